"""What a Llama is: its config, weights and tokenizer, RoPE, and the float64 reference forward
(reference.py) that every faster path is checked against. Imports nothing above it."""

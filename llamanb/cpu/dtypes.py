"""The precisions the cpu track runs, in one table: read by its backend, its kernels and the CLI
(which imports this module, and not numpy, to list --dtype's choices)."""
from __future__ import annotations

# GGUF block formats the kernels decode in registers: name -> (panel format, GGUF bytes per 32
# weights, panel block bytes per output column and 32 weights) -- kernels/cpu/quant.h
QUANT_FORMATS = {"Q4_1": ("q4_1", 20, 20), "Q4_0": ("q4_0", 18, 18), "Q5_0": ("q5_0", 22, 22),
                 "Q4_K": ("q4_k", 18, 24),
                 "Q6_K": ("q6_k", 26.25, 40), "Q8_0": ("q8_0", 34, 34)}
# --dtype: float32 and bf16 convert any checkpoint; a quantised dtype runs a GGUF's own blocks;
# auto runs a GGUF in the format it holds
QUANT_DTYPES = tuple(q.lower() for q in QUANT_FORMATS) + ("auto",)
DTYPES = ("float32", "bf16") + QUANT_DTYPES

"""Furiosa's TCP track: Llama as a program of einsums over named axes (program), run with numpy
(interpret), plugged into the engine as backend "tcp" (backend), and mapped onto RNGD's engines with
a roofline cost model from published specifications (cost). Notebook 08 walks through all four."""

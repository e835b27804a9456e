"""Furiosa's TCP track: Llama as a program of einsums over named axes (program), run with numpy
(interpret), plugged into the engine as backend "tcp" (backend); a roofline of RNGD's published
specifications (cost); the same ops as TCL kernels (tcl_kernels) compiled by Furiosa's furiosa-tcc
(compiler), the stored per-op cycle table (table), and Furiosa's published throughput predicted
from those cycles (predict). Notebook 08 walks through them."""

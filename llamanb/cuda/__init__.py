"""CUDA: min_llm_inference's kernel design for a Llama, in numba-cuda (kernels), on the engine
seam (backend), and as CUDA C++ compiled to PTX/SASS (compile; sources in kernels/cuda).

Importing this package imports nothing of numba: `runtime.load` decides simulator or GPU for
the process, and only then may `kernels` be imported.
"""

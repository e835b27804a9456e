"""The AMD NPU2 track: MLIR-AIR kernels, their external C++ kernels, and an emulated NPU2.

Everything here runs without the NPU software stack; the hardware paths import it lazily.
"""

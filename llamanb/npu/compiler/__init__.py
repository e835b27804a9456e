"""The NPU2 compiler side: builders (one launch each) to AIR text IR, its planner, verifier and
emulator, the stitching of launches into groups, and the mlir-air compile of a group to an ELF
artifact (with the extern kernels and Peano)."""

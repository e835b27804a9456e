#!/bin/sh
# The cuda backend on an NVIDIA GPU (H100/H200: numba-cuda, CuPy, torch, transformers installed;
# no registry): CUDA C++ vs numba-cuda kernels, random weights drawn on the device at SmolLM2-135M
# and Llama-3.2-1B shapes, cuda backend vs numpy engine vs transformers, tok/s beside torch,
# batching speed-up. Under 5 minutes by design; NOT yet run on hardware.
# Usage (repository root):  sh scripts/gpu_check.sh      results also in $OUT/gpu_check.json
# Needs on the GPU machine: numpy, numba-cuda, CuPy, torch, transformers (llamanb imports only
# numpy for this). `python scripts/gpu_check.py --dry-run` runs the same code here, without a GPU
# (tests/cuda/test_cuda_gpu_check.py).
set -e
cd "$(dirname "$0")/.."
unset NUMBA_ENABLE_CUDASIM
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec timeout 290 python scripts/gpu_check.py

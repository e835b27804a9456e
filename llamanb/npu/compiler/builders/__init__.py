"""Kernel builders for AMD NPU2: each returns a KernelSpec (MLIR-AIR text, %argN table, model).

    rmsnorm(rows, hidden, eps)                     codegen, bare herd [8, 1]
    gemm(m, k, n, tile_m, tile_k, tile_n)          codegen, herd [8, 4] (prefill projections)
    gemv(m, k, tile_m)                             extern matvec_bf16 (mv.o), herd [8, 1]
    rope(rows, n_heads, head_dim)                  extern rope_halfsplit_bf16 (rope.o)
    silu_and_mul(rows, ffn)                        extern silu_and_mul_bf16 (silu_and_mul.o)
    flash_attn(seq, n_heads, n_kv_heads, head_dim) codegen, cascade of Q tiles (causal GQA)
    add(rows, cols)                                codegen, bare herd [8, 1] (residual adds)

The package llamanb.npu imports nothing heavy: MLIR bindings and compilers load lazily.
Verify a module with llamanb.npu.compiler.verify, read its launch plan with llamanb.npu.compiler.plan, run it on the
emulated NPU2 with llamanb.npu.compiler.emulator.
"""
from llamanb.npu.compiler.builders.add import add
from llamanb.npu.compiler.builders.flash_attn import flash_attn
from llamanb.npu.compiler.builders.gemm import gemm
from llamanb.npu.compiler.builders.gemv import gemv
from llamanb.npu.compiler.builders.rmsnorm import rmsnorm
from llamanb.npu.compiler.builders.rope import rope, rope_lut
from llamanb.npu.compiler.builders.swiglu import silu_and_mul

__all__ = ["add", "flash_attn", "gemm", "gemv", "rmsnorm", "rope", "rope_lut", "silu_and_mul"]

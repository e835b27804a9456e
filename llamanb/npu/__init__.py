"""AMD NPU2 kernels as MLIR-AIR modules: specs, builders, verification, plan and emulation.

    from llamanb.npu.builders import rmsnorm, gemm, gemv, rope, silu_and_mul, flash_attn, add
    spec = rmsnorm(rows=128, hidden=576, eps=1e-5)   # KernelSpec: MLIR text, %argN table, model
    llamanb.npu.verify.verify(spec.text)             # upstream MLIR parser + verifier (extra: mlir)
    llamanb.npu.plan.read_plan(spec.text)            # launches, herds, buffers read from the text
    llamanb.npu.emulator.run(spec, *arrays)          # the emulated NPU2 executes the text

Importing this package needs only numpy; the MLIR bindings and compilers load lazily.
"""

"""The engine as a server runs it: decode-only steps at their own row count.

`Engine` pads every step of more than one row to the backend's row multiple, so that each
prompt row is computed the same way whatever shares its step (bit-identical prefill). On BLAS
kernels whose multiple is 48 (OpenBLAS's Haswell/Zen kernels) that turns a step of 8 decoding
requests into a 48-row GEMM: measured on the 2-core dev VM (AMD EPYC, 1 thread), 8 rows took
105 ms unpadded against 358 ms padded to 48, and one row (the GEMV) 41 ms.

A decode row in the default engine is only float32-close to the same row decoded alone anyway
(a GEMV rounds differently from a GEMM row), so padding a decode-only step buys nothing: this
engine runs such steps unpadded. Steps with prompt rows keep the padding, and a batch-invariant
engine pads everything, as before.
"""
from __future__ import annotations

from ..engine import Engine
from ..step import Step


class ServeEngine(Engine):
    def _rows_for(self, step: Step) -> int:
        decode_only = all(s.n == 1 and s.start > 0 for s in step.segments)
        if decode_only and not self.batch_invariant and self.backend.prefill_lengths is None:
            return step.rows
        return super()._rows_for(step)

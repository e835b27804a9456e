"""Where a step's rows sit in the backend's matrix products: the one policy the engine consults.

A BLAS computes a row of a GEMM with other bits at another row count or offset (OpenBLAS picks
kernels by the number of rows, and splits them into panels: llamanb.platform.blas measures both).
So that a prompt's logits do not depend on what else shares its step, the engine places rows by
three numbers the backend declares (llamanb.engine.backend.Backend) and one switch of its own:

    row_align        each prompt (each sequence, when batch-invariant) starts at a multiple of it
    row_multiple     a step of several rows is padded to a multiple of it
    prefill_lengths  a compiled backend runs only these row counts: a step takes the first that fits
    batch_invariant  pad every step, a lone decode row included, and the LM head's rows too, so a
                     row's bits never depend on its neighbours (a GEMM instead of a GEMV: slower)

    plan = RowPolicy.of(backend, pad_id, batch_invariant)
    run = plan.layout(step)                 # the step as the backend runs it (PAD rows added)
    logits = plan.head(backend.head, x[run.logit_rows])

Decode rows (one row per sequence, each continuing a sequence) run as they are unless the engine
is batch-invariant: one row is a GEMV (the fast path), several a small GEMM, and a decode row is
only float32-close to the same row in another step anyway (a GEMV rounds differently from a GEMM
row), so padding buys nothing -- on OpenBLAS's Haswell/Zen kernels (row multiple 48) it would turn
8 decoding sequences into a 48-row GEMM. A prompt, even of one token, is always padded.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamanb.engine.step import PAD, Segment, Step
from llamanb.errors import LlamanbError


@dataclass(frozen=True)
class RowPolicy:
    row_align: int = 1
    row_multiple: int = 1
    prefill_lengths: tuple[int, ...] | None = None
    batch_invariant: bool = False
    pad_id: int = 0

    @classmethod
    def of(cls, backend, pad_id: int, batch_invariant: bool = False) -> "RowPolicy":
        lengths = backend.prefill_lengths
        if lengths is not None and any(n % backend.row_multiple for n in lengths):
            raise LlamanbError(f"backend {backend.name!r}: compiled lengths {lengths} are not "
                               f"multiples of its row multiple {backend.row_multiple}")
        return cls(backend.row_align, backend.row_multiple,
                   None if lengths is None else tuple(lengths), bool(batch_invariant), pad_id)

    def layout(self, step: Step) -> Step:
        """The step as the backend runs it: aligned, then padded to the row count it runs at."""
        run = aligned(step, self.row_align, self.pad_id, every=self.batch_invariant)
        return padded(run, self.rows_for(run), self.pad_id)

    def rows_for(self, step: Step) -> int:
        """The row count the backend runs this step at."""
        R = step.rows
        if self.prefill_lengths is not None and R > 1:
            fits = [n for n in sorted(self.prefill_lengths) if n >= R]
            if not fits:
                raise LlamanbError(f"step of {R} rows exceeds the backend's compiled lengths "
                                   f"{self.prefill_lengths}")
            return fits[0]
        decode_only = all(s.n == 1 and s.start > 0 for s in step.segments)
        if decode_only and not self.batch_invariant:
            return R
        return -(-R // self.row_multiple) * self.row_multiple

    def head(self, head, rows: np.ndarray) -> np.ndarray:
        """head(rows) -> logits [k, V]; batch-invariant: the head's GEMM, too, at a row count that
        keeps each row's bits."""
        if not self.batch_invariant:
            return head(rows)
        k = rows.shape[0]
        pad = -(-k // self.row_multiple) * self.row_multiple - k
        return head(np.concatenate([rows, np.zeros((pad, rows.shape[1]), dtype=rows.dtype)]))[:k]


def padded(step: Step, rows: int, pad_id: int) -> Step:
    """The same step with PAD rows appended up to `rows` rows (ids pad_id, positions
    continuing the last row's, so RoPE stays defined)."""
    extra = rows - step.rows
    if extra < 0:
        raise LlamanbError(f"step of {step.rows} rows does not fit {rows}")
    if extra == 0:
        return step
    last = int(step.positions[-1])
    return Step(np.concatenate([step.ids, np.full(extra, pad_id, dtype=np.int64)]),
                np.concatenate([step.positions, np.arange(last + 1, last + 1 + extra)]),
                np.concatenate([step.slots, np.full(extra, PAD, dtype=np.int64)]),
                step.segments, step.logit_rows)

def aligned(step: Step, align: int, pad_id: int, every: bool = False) -> Step:
    """The same step with PAD rows inserted so that each segment of more than one row (every
    segment, with every=True) starts at a row that is a multiple of `align`. A BLAS may give a
    row other bits at another offset in the GEMM (llamanb.platform.blas.row_align)."""
    if align <= 1 or len(step.segments) == 1:
        return step
    order, segs, row = [], [], 0          # order: the old row of each new row, -1 for a gap
    for seg in step.segments:
        if every or seg.n > 1:
            gap = -row % align
            order += [-1] * gap
            row += gap
        order += range(seg.row, seg.row + seg.n)
        segs.append(Segment(seg.slot, seg.start, row, seg.n))
        row += seg.n
    in_segs = {r for seg in step.segments for r in range(seg.row, seg.row + seg.n)}
    order += [r for r in range(step.rows) if r not in in_segs]     # padding rows it had
    order = np.array(order, dtype=np.int64)
    gap = order < 0
    new_row = np.empty(step.rows, dtype=np.int64)
    new_row[order[~gap]] = np.flatnonzero(~gap)
    pick = np.where(gap, 0, order)
    return Step(np.where(gap, pad_id, step.ids[pick]), np.where(gap, 0, step.positions[pick]),
                np.where(gap, PAD, step.slots[pick]), tuple(segs), new_row[step.logit_rows])

"""One engine step: the rows the engine hands to a backend, and where each row belongs.

A step may hold rows of several sequences at once -- a prompt being prefilled, another prompt's
next chunk, three sequences decoding one token each -- and is the same call in every case:

    ids        [R]  token id of each row
    positions  [R]  position of each row in its own sequence (RoPE angle, cache row)
    slots      [R]  cache slot (sequence) of each row; PAD (-1) for padding rows
    segments        the runs of consecutive rows of one slot: (slot, start, row, n). The rows
                    row .. row+n-1 hold positions start .. start+n-1 of that slot's sequence, so
                    after the step the sequence is `start + n` long and its attention reads
                    cache positions 0 .. start+n-1 -- its own keys only.
    logit_rows [k]  rows whose next-token logits the caller wants (usually each segment's last)

Padding rows (slot PAD) are computed by the linear layers -- a backend may need a fixed row
count -- but are never written to a cache and never attended to; their attention output is 0.

    prefill of one prompt      Step.build([(slot, 0, prompt_ids)])
    decode of one token        Step.build([(slot, length, [token])])
    mixed                      Step.build([(0, 0, p0), (1, 0, p1), (2, 17, [t])])

Where the rows then sit in the backend's matrix products (padding, alignment) is not the step's
business: llamanb.engine.rows decides it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamanb.errors import LlamanbError

PAD = -1


@dataclass(frozen=True)
class Segment:
    slot: int       # cache slot of the sequence
    start: int      # position of the segment's first row in its sequence
    row: int        # the segment's first row in the step
    n: int          # rows

    @property
    def rows(self) -> slice:
        return slice(self.row, self.row + self.n)

    @property
    def end(self) -> int:
        """The sequence's length after this step (attention reads positions 0 .. end-1)."""
        return self.start + self.n


@dataclass(frozen=True)
class Step:
    ids: np.ndarray             # [R] int64
    positions: np.ndarray       # [R] int64
    slots: np.ndarray           # [R] int64, PAD for padding rows
    segments: tuple[Segment, ...]
    logit_rows: np.ndarray      # [k] int64

    @property
    def rows(self) -> int:
        return int(self.ids.size)

    @property
    def real_rows(self) -> int:
        return sum(s.n for s in self.segments)

    @classmethod
    def build(cls, parts, want_logits: bool | list[bool] = True) -> "Step":
        """A step from parts (slot, start, ids): ids are positions start .. of that slot.
        want_logits: per part (or for all), whether its last row's logits are wanted."""
        parts = list(parts)
        if not parts:
            raise LlamanbError("a step needs at least one sequence")
        wants = [want_logits] * len(parts) if isinstance(want_logits, bool) else list(want_logits)
        ids, pos, slots, segs, logit_rows, row = [], [], [], [], [], 0
        seen = set()
        for (slot, start, part_ids), want in zip(parts, wants):
            part_ids = np.asarray(part_ids, dtype=np.int64).reshape(-1)
            slot, start = int(slot), int(start)
            if part_ids.size == 0:
                raise LlamanbError(f"slot {slot}: no tokens in this step")
            if slot < 0 or start < 0:
                raise LlamanbError(f"slot and start must be >= 0, got slot {slot}, start {start}")
            if slot in seen:
                raise LlamanbError(f"slot {slot} appears twice in one step")
            seen.add(slot)
            n = part_ids.size
            ids.append(part_ids)
            pos.append(np.arange(start, start + n, dtype=np.int64))
            slots.append(np.full(n, slot, dtype=np.int64))
            segs.append(Segment(slot, start, row, n))
            if want:
                logit_rows.append(row + n - 1)
            row += n
        return cls(np.concatenate(ids), np.concatenate(pos), np.concatenate(slots), tuple(segs),
                   np.array(logit_rows, dtype=np.int64))

    def with_pad_rows(self, first_pad: int) -> "Step":
        """Rows from `first_pad` on become padding (for a prompt the caller padded itself and
        passed its real length). Those rows must all lie in the last segment."""
        seg = self.segments[-1]
        if not seg.row < first_pad <= seg.row + seg.n:
            raise LlamanbError(f"real length {first_pad} outside 1..{self.rows}")
        slots = self.slots.copy()
        slots[first_pad:] = PAD
        segs = self.segments[:-1] + (Segment(seg.slot, seg.start, seg.row, first_pad - seg.row),)
        logit_rows = np.where(self.logit_rows == seg.row + seg.n - 1, first_pad - 1, self.logit_rows)
        return Step(self.ids, self.positions, slots, segs, logit_rows)

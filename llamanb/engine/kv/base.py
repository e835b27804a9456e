"""The KV-cache protocol: what a backend's attention may ask of a cache, whatever stores it.

    write(layer, slot, start, k, v)   k, v [n, N_kv, d_h] -> positions start .. start+n-1 of slot
    keys(layer, slot, n)   -> [N_kv, n, d_h] float32   positions 0 .. n-1 of slot
    values(layer, slot, n) -> [N_kv, n, d_h] float32
    free(slot)                        the sequence is done: its positions may be reused
    truncate(slot, n)                 keep positions 0 .. n-1 only (a chat cutting back a turn)
    admit(step) / advance(step)       before a step: it continues each slot where it stands and
                                      fits (reserve, all or nothing); after it: lengths move on
    lengths[slot]                     positions filled (read it; only the methods above write it)

`keys`/`values` may be asked for more positions than a sequence holds, up to `capacity` (a backend
that reads whole tiles of keys masks the tail itself); those positions read as finite values
(zeros in a fresh or freed store). How positions are stored is the implementation's business:

    contiguous  one [capacity] row range per slot               llamanb.engine.kv.contiguous.KVCache
    paged       fixed-size blocks + a block table per sequence  llamanb.engine.kv.paged.PagedKVCache

Attention code talks to this protocol only, so neither storage touches a backend.

Block floats (Tenstorrent's bfloat8_b) are a number format, not a storage: no store here keeps them.
The galaxy-emulated backend rounds each K/V row to one before any store above writes it
(`kv_format=`, llamanb.mesh.layers, through llamanb.model.numerics.blockfloat_padded; chapter 09),
so a store holds the bfloat8_b values (one shared exponent per 16 numbers of a row), as float32.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from llamanb.errors import LlamanbError


class KVStore(ABC):
    n_layers: int
    n_kv_heads: int
    head_dim: int
    slots: int          # sequences it can hold at once
    max_seq: int        # usable positions per sequence
    capacity: int       # readable positions per sequence (>= max_seq)
    lengths: np.ndarray  # [slots] int64

    @abstractmethod
    def write(self, layer: int, slot: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store k, v [n, N_kv, d_h] at positions start .. start+n-1 of `slot`."""

    @abstractmethod
    def keys(self, layer: int, slot: int, n: int) -> np.ndarray:
        """[N_kv, n, d_h] keys of positions 0 .. n-1 of `slot`."""

    @abstractmethod
    def values(self, layer: int, slot: int, n: int) -> np.ndarray:
        """[N_kv, n, d_h] values of positions 0 .. n-1 of `slot`."""

    @abstractmethod
    def free(self, slot: int) -> None:
        """Forget a sequence: its length becomes 0 and its storage may be reused."""

    @abstractmethod
    def truncate(self, slot: int, length: int) -> None:
        """Keep the first `length` positions of `slot` (0 <= length <= its length): the store
        then holds what it would after running only those positions, the rest reading as zeros."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes held for keys and values."""

    # --- shared checks -------------------------------------------------------------------------
    def check_slot(self, slot: int) -> int:
        if not 0 <= int(slot) < self.slots:
            raise LlamanbError(f"cache slot {slot} outside 0..{self.slots - 1}")
        return int(slot)

    def check_room(self, slot: int, end: int) -> None:
        if end > self.max_seq:
            raise LlamanbError(f"sequence of {end} tokens exceeds the cache/context of "
                               f"{self.max_seq} (slot {slot})")

    def check_truncate(self, slot: int, length: int) -> tuple[int, int]:
        slot = self.check_slot(slot)
        if isinstance(length, (bool, np.bool_)) or not isinstance(length, (int, np.integer)) \
                or not 0 <= length <= self.lengths[slot]:
            raise LlamanbError(f"truncate: slot {slot} holds {int(self.lengths[slot])} positions, "
                               f"so it keeps 0..{int(self.lengths[slot])} of them, not {length!r}")
        return slot, int(length)

    def admit(self, step) -> None:
        """Before `step` (llamanb.engine.step.Step) runs: each of its segments continues its slot exactly
        where the slot stands, and the store makes room for all of them at once (or refuses
        with nothing changed)."""
        for seg in step.segments:
            self.check_slot(seg.slot)
            if seg.start != self.lengths[seg.slot]:
                raise LlamanbError(f"slot {seg.slot} holds {self.lengths[seg.slot]} positions; "
                                   f"the step continues it at {seg.start}")
        self.reserve({seg.slot: seg.end for seg in step.segments})

    def advance(self, step) -> None:
        """After `step` ran: each of its slots now holds positions 0 .. segment end - 1."""
        for seg in step.segments:
            self.lengths[seg.slot] = seg.end

    def reserve(self, ends: dict[int, int]) -> None:
        """Make room for each slot to reach position end-1 -- all or nothing, before a step
        writes anything. (A store that allocates on demand overrides this.)"""
        for slot, end in ends.items():
            self.check_room(slot, end)

    def reset(self) -> None:
        """Forget every sequence."""
        for s in range(self.slots):
            self.free(s)

    # --- the single-sequence view (slot 0) -----------------------------------------------------
    @property
    def length(self) -> int:
        return int(self.lengths[0])

    @length.setter
    def length(self, n: int) -> None:
        self.lengths[0] = n

"""The TCP program on the engine's seam: backend "tcp" (`Engine(model, backend="tcp")`).

Each block runs the program's layer ops (llamanb.tcp.program) through the numpy interpreter, one
sequence of the step at a time (B = 1): prefill for a new prompt, decode for one row after cached
ones, "extend" for a chunk after cached ones. The engine's KV store holds K/V; the interpreter
sees it through a two-method adapter. No TCP is involved: this is the program interpreted on the
host CPU, and the backend says so ("emulated").
"""
from __future__ import annotations

import numpy as np

from llamanb.engine.backend import Backend
from llamanb.engine.kv.base import KVStore
from llamanb.engine.step import Step
from llamanb.model.weights import Weights
from llamanb.tcp.interpret import Interpreter, layout
from llamanb.tcp.program import dims


class _SlotCache:
    """The interpreter's cache calls on one slot of an engine KVStore ([N_kv, n, d] per slot)."""

    def __init__(self, store: KVStore, slot: int):
        self.store, self.slot = store, slot
        self.pending: dict[str, np.ndarray] = {}

    def write(self, layer, which, start, x):                # x [1, h_kv, n, d_k]
        self.pending[which] = x[0].transpose(1, 0, 2)        # [n, h_kv, d_k]
        if len(self.pending) == 2:                           # the program stores K, then V; a
            k, v = self.pending.pop("K"), self.pending.pop("V")   # KVStore takes both at once
            self.store.write(layer, self.slot, start, k, v)

    def read(self, layer, which, n):
        get = self.store.keys if which == "K" else self.store.values
        return get(layer, self.slot, n)[None]                # [1, h_kv, n, d_k]


class TCPBackend(Backend):
    name = "tcp"
    emulated = True
    description = "Furiosa TCP einsum program, interpreted with numpy on the host CPU (emulated)"

    def __init__(self, weights: Weights):
        super().__init__(weights)
        self.run = Interpreter(layout(weights))

    def block(self, layer: int, x: np.ndarray, step: Step, cache: KVStore) -> np.ndarray:
        out = x.copy()                                       # padding rows pass through
        lw = self.run.lay.layers[layer]
        for seg in step.segments:
            phase = "prefill" if seg.start == 0 else ("decode" if seg.n == 1 else "extend")
            d = dims(self.config, 1, seg.n, seg.end)
            d["s_max"] = cache.capacity
            env = {"x": x[seg.rows][None], "position": step.positions[seg.rows],
                   "w_rope": self.run.lay.w_rope(cache.capacity), **lw}
            slot = _SlotCache(cache, seg.slot)
            for op in self.run.programs[phase].layer:
                self.run.execute(op, env, d, slot, layer)
            out[seg.rows] = env["x"][0]
        return out

    def head(self, x: np.ndarray) -> np.ndarray:
        """x [n, D]: each row its own sequence of one row (B = n, s_in = 1)."""
        d = dims(self.config, x.shape[0], 1)
        return self.run.head(x[:, None, :], d)[0]

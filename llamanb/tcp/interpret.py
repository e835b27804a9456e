"""Run a TCP program (llamanb.tcp.program) on real weights with numpy: every einsum is np.einsum
with the subscripts derived from the op's axis names, every other op a few lines below.

    lay = layout(model.weights)                # the chapter's weight layouts, made once
    run = Interpreter(lay)
    cache = run.new_cache(B, s_max)
    logits = run.prefill(prompts [B, s_in], cache)     # [B, V]
    logits = run.decode(tokens [B], cache)             # [B, V]

The token loop is not here: `Engine(model, backend="tcp")` (llamanb.tcp.backend) runs the same
program on the engine's seam, so generate/stream/chat/serve drive it like any backend.

Batches: B sequences of the same length (the chapter's B axis has one s for all). The KV cache is
[L, B, h_kv, s_max, d_k] per K and V, in HBM on a TCP; here two numpy arrays. Keys are stored in
the consecutive-pair order of the laid-out w_k (see layout), not HF's half-split order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.model.ops import rms_norm, silu_mul, softmax_
from llamanb.model.rope import rope_for
from llamanb.model.rope_tables import half_split_to_interleaved, rotation_table
from llamanb.model.token_ids import token_batch
from llamanb.model.weights import Weights
from llamanb.tcp.ops import Op, shape
from llamanb.tcp.program import Program, dims, program


@dataclass
class Layout:
    """The weights in the chapter's layouts. Projections are views of the engine's arrays (no
    copy) except w_q and w_k, whose head dimension is permuted into consecutive RoPE pairs."""
    config: object
    w_emb: np.ndarray            # [V, D]
    w_lm_head: np.ndarray        # [D, V]
    w_final_norm: np.ndarray     # [D]
    layers: list[dict]           # w_attn_norm [D], w_q [D, h_q, d_k], w_k / w_v [D, h_kv, d_k],
                                 # w_o [h_q, d_k, D], w_ffn_norm [D], w_gate / w_up [D, F], w_down [F, D]
    _rope: dict = field(default_factory=dict)

    def w_rope(self, s_max: int) -> np.ndarray:
        """[s_max, d_k', f, r] rotation table (llamanb.model.rope_tables), built once per size."""
        if s_max not in self._rope:
            self._rope.clear()
            self._rope[s_max] = rotation_table(np.arange(s_max), rope_for(self.config))
        return self._rope[s_max]


def layout(weights: Weights) -> Layout:
    c = weights.config
    D, hq, hkv, d, F = c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn
    pairs = half_split_to_interleaved(d)          # HF's (i, i + d/2) -> consecutive (2i, 2i+1)
    layers = []
    for i, lw in enumerate(weights.layers):
        q, k, v = weights.split_qkv(i)            # [h*d, D] each (HF [out, in])
        gate, up = weights.split_gate_up(i)       # [F, D]
        layers.append({
            "w_attn_norm": lw.attn_norm,
            "w_q": np.ascontiguousarray(q.T.reshape(D, hq, d)[..., pairs]),
            "w_k": np.ascontiguousarray(k.T.reshape(D, hkv, d)[..., pairs]),
            "w_v": v.T.reshape(D, hkv, d),
            "w_o": lw.wo.T.reshape(hq, d, D),
            "w_ffn_norm": lw.ffn_norm,
            "w_gate": gate.T, "w_up": up.T, "w_down": lw.w_down.T,
        })
    return Layout(c, weights.embed, weights.lm_head.T, weights.final_norm, layers)


class TCPCache:
    """K and V [L, B, h_kv, s_max, d_k]: B sequences of one common length."""

    def __init__(self, cfg, B: int, s_max: int):
        if B < 1 or s_max < 1:
            raise LlamanbError(f"cache needs B >= 1 and s_max >= 1, got {B}, {s_max}")
        self.s_max, self.B, self.length = s_max, B, 0
        self.k = np.zeros((cfg.n_layers, B, cfg.n_kv_heads, s_max, cfg.head_dim), np.float32)
        self.v = np.zeros_like(self.k)

    def write(self, layer: int, which: str, start: int, x: np.ndarray) -> None:
        """x [B, h_kv, n, d_k] -> positions start .. start+n-1 (on the s axis, not the batch's)."""
        store = self.k if which == "K" else self.v
        store[layer, :, :, start:start + x.shape[2]] = x

    def read(self, layer: int, which: str, n: int) -> np.ndarray:
        store = self.k if which == "K" else self.v
        return store[layer, :, :, :n]                        # [B, h_kv, n, d_k]


class Interpreter:
    def __init__(self, lay: Layout):
        self.lay, self.config = lay, lay.config
        self.programs = {p: program(self.config, p) for p in ("prefill", "decode", "extend")}
        self._paths: dict = {}
        self.executed = 0                   # ops run so far (counted, for per-token activity)

    def new_cache(self, B: int, s_max: int) -> TCPCache:
        return TCPCache(self.config, B, s_max)

    # --- one op ------------------------------------------------------------------------------------
    def _operand(self, op: Op, i: int, env: dict, d: dict, cache, layer: int) -> np.ndarray:
        name = op.args[i]
        if name in ("kv_cache_K", "kv_cache_V"):
            x = cache.read(layer, name[-1], d["s"])
        else:
            x = env[name]
        want = shape(op.arg_axes[i], d)
        if op.kind not in ("gather", "view") and x.shape != want:
            raise LlamanbError(f"op {op.name}: operand {name} has shape {x.shape}, its axes "
                               f"[{', '.join(op.arg_axes[i])}] say {want}")
        return x

    def execute(self, op: Op, env: dict, d: dict, cache, layer: int = 0) -> None:
        """Run one op: read its operands from `env` (or the cache), write its result into `env`."""
        self.executed += 1
        xs = [self._operand(op, i, env, d, cache, layer) for i in range(len(op.args))]
        if op.kind == "einsum":
            key = (op.subscripts, tuple(x.shape for x in xs))
            if key not in self._paths:
                self._paths[key] = np.einsum_path(op.subscripts, *xs, optimize="greedy")[0]
            y = np.einsum(op.subscripts, *xs, optimize=self._paths[key])
        elif op.kind == "gather":
            y = xs[1][xs[0]]
        elif op.kind == "view":
            want = shape(op.out_axes, d)
            if int(np.prod(want)) != xs[0].size:
                raise LlamanbError(f"view {op.name}: {xs[0].shape} cannot be seen as {want}")
            y = xs[0].reshape(want)
        elif op.kind == "store":
            cache.write(layer, op.out[-1], d["s"] - d["s_in"], xs[0])
            return
        elif op.kind == "slice":
            y = xs[0][:, -1, :]
        elif op.kind == "host":
            y = np.argmax(xs[0], axis=-1)
        else:
            y = self._vector(op.fn, xs, d)
        env[op.out] = np.asarray(y, dtype=np.float32) if op.kind != "host" else y

    def _vector(self, fn: str, xs: list, d: dict) -> np.ndarray:
        c = self.config
        if fn == "rms_norm":
            x, w = xs
            return rms_norm(x.reshape(-1, x.shape[-1]), w, c.rms_eps).reshape(x.shape)
        if fn == "scale":
            return xs[0] * np.float32(c.head_dim ** -0.5)     # 1/sqrt(d_k), precomputed
        if fn == "causal_mask":                                 # query i sits at position s - s_in + i
            i = np.arange(d["s_in"])[:, None] + (d["s"] - d["s_in"])
            return np.where(np.arange(d["s"])[None, :] <= i, xs[0], np.float32(-np.inf))
        if fn == "softmax":
            return softmax_(np.array(xs[0], dtype=np.float32), axis=-1)
        if fn == "add":
            return xs[0] + xs[1]
        if fn == "silu_mul":
            return silu_mul(xs[0], xs[1])
        raise LlamanbError(f"unknown vector fn {fn!r}")

    # --- a whole step --------------------------------------------------------------------------------
    def layers(self, prog: Program, x: np.ndarray, positions: np.ndarray, d: dict, cache) -> np.ndarray:
        """Every block on x [B, s_in, D]; returns the last block's output."""
        env = {"x": x, "position": positions, "w_rope": self.lay.w_rope(d["s_max"])}
        for layer, weights in enumerate(self.lay.layers):
            env.update(weights)
            for op in prog.layer:
                self.execute(op, env, d, cache, layer)
        return env["x"]

    def head(self, x: np.ndarray, d: dict) -> tuple[np.ndarray, np.ndarray]:
        """x [B, s_in, D] -> (logits [B, V], greedy next tokens [B])."""
        env = {"x": x, "w_final_norm": self.lay.w_final_norm, "w_lm_head": self.lay.w_lm_head}
        for op in self.programs["prefill"].post:
            self.execute(op, env, d, None)
        return env["logits"], env["next_token"]

    def step(self, ids: np.ndarray, cache: TCPCache) -> tuple[np.ndarray, np.ndarray]:
        """ids [B, s_in] appended to every sequence in the cache -> (logits [B, V], tokens [B])."""
        ids = self._check_ids(ids, cache)
        B, s_in = ids.shape
        start = cache.length
        phase = "prefill" if start == 0 else ("decode" if s_in == 1 else "extend")
        prog = self.programs[phase]
        d = dims(self.config, B, s_in, start + s_in)
        d["s_max"] = cache.s_max
        env = {"input": ids, "w_emb": self.lay.w_emb}
        for op in prog.pre:
            self.execute(op, env, d, cache)
        x = self.layers(prog, env["x_0"], np.arange(start, start + s_in), d, cache)
        cache.length = start + s_in
        return self.head(x, d)

    def prefill(self, prompts, cache: TCPCache) -> np.ndarray:
        if cache.length:
            raise LlamanbError("prefill needs an empty cache")
        return self.step(prompts, cache)[0]

    def decode(self, tokens, cache: TCPCache) -> np.ndarray:
        return self.step(np.asarray(tokens).reshape(-1, 1), cache)[0]

    # --- input checks --------------------------------------------------------------------------------
    def _check_ids(self, ids, cache: TCPCache) -> np.ndarray:
        ids = token_batch(ids, self.config.vocab)
        if ids.shape[0] != cache.B:
            raise LlamanbError(f"{ids.shape[0]} sequences for a cache of {cache.B}")
        if cache.length + ids.shape[1] > cache.s_max:
            raise LlamanbError(f"{cache.length + ids.shape[1]} positions exceed the cache's {cache.s_max}")
        return ids

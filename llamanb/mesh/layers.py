"""Tensor-parallel Llama layers on a mesh, placed as Tenstorrent's Llama 3 70B Galaxy demo places
them (tenstorrent/tt-metal, models/demos/llama3_70b_galaxy). With P devices on the head axis and
Q on the hidden axis, device (p, q) holds:

    residual x      [R, H/Q]                 hidden slice q (replicated over the head axis)
    WQKV            [H/Q, (N_h + 2 N_kv)/P d] rows: hidden slice q; columns: head group p
    WO              [N_h/P d, H/Q]           rows: head group p; columns: hidden slice q
    W1, W3          [H/Q, D_ff/P]            rows: hidden slice q; columns: FFN slice p
    W2              [D_ff/P, H/Q]            rows: FFN slice p; columns: hidden slice q
    LM head         [H, V/(P Q)]             vocabulary slice p Q + q (the demo instead holds
                                             [H/Q, V/P] and all-reduces the logits over the
                                             hidden axis: tt/lm_head.py)

The demo uploads these with ttnn.ShardTensor2dMesh(dims=(3, 2)) for WQKV and W1/W3 (mesh axis 0
splits the output columns, axis 1 the input rows) and dims=(2, 3) for WO and W2; ttnn keeps
weights as [in, out], the transposes of the [out, in] arrays here.

One block, with the collective each split forces, in the order of the demo's prefill
(tt/llama_attention.py forward_prefill, tt/llama_mlp.py forward_prefill, tt/llama_ccl.py; its
decode differs, see llamanb.mesh.cost.decode_ccl_plan):

    RMSNorm      local sum of squares [R, 1] -> all_gather(hidden axis) -> sum -> scale x
                 (the demo gathers a bf16 tile column [R, 32] per chip)
    QKV          x_q @ WQKV_pq: a partial sum over q  -> all_reduce(hidden axis)
    attention    head group p, on every device of the row; K/V of group p into the cache
    WO           attn_p @ WO_pq: a partial sum over p -> all_reduce(head axis) -> x += ...
    W1, W3       h_q @ W1_pq, h_q @ W3_pq: partial over q -> reduce_scatter(hidden axis) each
    SiLU * mul   on [R, D_ff/(P Q)]          -> all_gather(hidden axis) -> [R, D_ff/P]
    W2           partial over p              -> all_reduce(head axis) -> x += ...

Every op is float32 numpy; only the order of the sums differs from one device, so results agree
with the single-device engine to float32 reduction-order error (the notebook derives the bound).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamanb.engine.attention import attention
from llamanb.model.config import LlamaConfig
from llamanb.errors import LlamanbError
from llamanb.engine.kv.base import KVStore
from llamanb.model.ops import silu_mul
from llamanb.model.rope import cos_sin, rope_for, rotation_tables, rope_inplace
from llamanb.engine.step import Step
from llamanb.model.weights import Weights
from llamanb.mesh import ccl
from llamanb.mesh.config import MeshConfig
from llamanb.mesh.device import EmulatedMesh, MeshTensor


@dataclass
class Placement:
    """How a model's dimensions split over a mesh (checked once, up front)."""
    P: int                  # devices on the head axis
    Q: int                  # devices on the hidden axis
    heads: int              # query heads per device
    kv_heads: int           # K/V heads per device
    ffn: int                # FFN columns per device (before the reduce-scatter)
    hidden: int             # residual slice per device

    @classmethod
    def of(cls, c: LlamaConfig, m: MeshConfig) -> "Placement":
        """The split of model config c over mesh config m (a one-line error if it does not fit)."""
        P, Q = m.heads_split, m.hidden_split
        why = []
        if c.n_kv_heads % P:
            why.append(f"{c.n_kv_heads} K/V heads over {P} devices")
        if c.ffn % (P * Q):
            why.append(f"FFN {c.ffn} over {P * Q} devices")
        if c.hidden % Q:
            why.append(f"hidden {c.hidden} over {Q} devices")
        if why:
            raise LlamanbError(f"{c.name} does not split over the {m.label()} mesh: " + "; ".join(why))
        return cls(P, Q, c.n_heads // P, c.n_kv_heads // P, c.ffn // P, c.hidden // Q)


def _pq(mesh: EmulatedMesh, r: int, c: int) -> tuple[int, int]:
    rc = (r, c)
    return rc[mesh.config.head_axis], rc[mesh.config.hidden_axis]


class MeshLayers:
    """The model's weights placed on a mesh, and the forward pass that uses them."""

    def __init__(self, weights: Weights, mesh: EmulatedMesh):
        self.weights, self.mesh, self.config = weights, mesh, weights.config
        self.place = pl = Placement.of(weights.config, mesh.config)
        c = self.config
        d = c.head_dim
        R, C = mesh.config.shape
        self.ha, self.xa = mesh.config.head_axis, mesh.config.hidden_axis
        self.freqs = rope_for(c)
        self.scale = np.float32(d ** -0.5)

        def hid(q):                                   # hidden slice q
            return slice(q * pl.hidden, (q + 1) * pl.hidden)

        self.layers = []
        for lw in weights.layers:
            per_p = []
            for p in range(pl.P):                     # rows of WQKV for head group p (one copy)
                qh = slice(p * pl.heads * d, (p + 1) * pl.heads * d)
                kh = slice(c.q_dim + p * pl.kv_heads * d, c.q_dim + (p + 1) * pl.kv_heads * d)
                vh = slice(c.q_dim + c.kv_dim + p * pl.kv_heads * d,
                           c.q_dim + c.kv_dim + (p + 1) * pl.kv_heads * d)
                per_p.append(np.concatenate([lw.wqkv[qh], lw.wqkv[kh], lw.wqkv[vh]]))
            dev = {}
            for r in range(R):
                for cc in range(C):
                    p, q = _pq(mesh, r, cc)
                    f = slice(p * pl.ffn, (p + 1) * pl.ffn)
                    heads = slice(p * pl.heads * d, (p + 1) * pl.heads * d)
                    dev[r, cc] = dict(
                        attn_norm=lw.attn_norm[hid(q)], ffn_norm=lw.ffn_norm[hid(q)],
                        wqkv=per_p[p][:, hid(q)],                        # [(nq+2nkv) d, H/Q]
                        wo=lw.wo[hid(q), heads],                         # [H/Q, nq d]
                        w1=lw.w_gate_up[:c.ffn][f, hid(q)],              # [D_ff/P, H/Q]
                        w3=lw.w_gate_up[c.ffn:][f, hid(q)],
                        w2=lw.w_down[hid(q), f])                         # [H/Q, D_ff/P]
            self.layers.append(dev)
        n = R * C
        bounds = np.linspace(0, c.vocab, n + 1).astype(int)               # as even as possible
        self.vocab_slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        self.kv_format: str | None = None          # set by the backend: K/V rounded to it when stored

    # --- helpers ---------------------------------------------------------------------------------
    def to_mesh(self, x: np.ndarray) -> MeshTensor:
        """Host rows [R, H] -> the residual layout: hidden split over the hidden axis."""
        return self.mesh.shard(np.ascontiguousarray(x, dtype=np.float32), {self.xa: 1})

    def to_host(self, x: MeshTensor) -> np.ndarray:
        return x.gather()

    def _w(self, layer: int, name: str):
        dev = self.layers[layer]
        return lambda r, c: dev[r, c][name]

    def rms_norm(self, x: MeshTensor, w) -> MeshTensor:
        """RMSNorm of rows whose hidden dim is split over the hidden axis: each device sums its
        squares, the sums are all-gathered along the hidden axis, every device adds them up."""
        ss = x.map(lambda a: np.square(a).sum(axis=-1, keepdims=True))               # [R, 1]
        ss = MeshTensor(x.mesh, ss.arrays, {self.xa: 1})
        allss = ccl.all_gather(ss, 1, self.xa, label="norm stats")                   # [R, Q]
        H = np.float32(self.config.hidden)

        def scale(r, c, a):
            ms = allss[r, c].sum(axis=-1, keepdims=True) / H
            return a * (np.float32(1.0) / np.sqrt(ms + np.float32(self.config.rms_eps))) * w(r, c)
        return x.map_rc(scale)

    def matmul(self, x: MeshTensor, w, dims: dict[int, int]) -> MeshTensor:
        """x @ W.T on every device with its own shard W [out, in]."""
        return x.map_rc(lambda r, c, a: a @ w(r, c).T, dims)

    # --- one block -------------------------------------------------------------------------------
    def _add(self, x: MeshTensor, y: MeshTensor) -> MeshTensor:
        """The residual add, on every device (both in the residual layout)."""
        return MeshTensor(x.mesh, [[a + b for a, b in zip(ra, rb)] for ra, rb in zip(x.arrays, y.arrays)],
                          x.dims)

    def block(self, layer: int, x: MeshTensor, step: Step, cache: KVStore) -> MeshTensor:
        """One transformer block on the residual x [R, H/Q] per device (layout in the module doc)."""
        W = lambda name: self._w(layer, name)                                         # noqa: E731
        # attention
        h = self.rms_norm(x, W("attn_norm"))                                          # [R, H/Q]
        qkv = self.matmul(h, W("wqkv"), {})                                           # partial over q
        qkv = ccl.all_reduce(qkv, self.xa, label="QKV")                              # [R, (nq+2nkv) d]
        attn = self.attention(layer, qkv, step, cache)                               # [R, nq d]
        o = self.matmul(attn, W("wo"), {self.xa: 1})                                 # partial over p
        x = self._add(x, ccl.all_reduce(o, self.ha, label="WO"))
        # MLP
        return self._add(x, self.mlp(layer, self.rms_norm(x, W("ffn_norm"))))

    def mlp(self, layer: int, h: MeshTensor) -> MeshTensor:
        """SwiGLU on normalised rows h [R, H/Q] (hidden split over the hidden axis) -> the W2
        output [R, H/Q], summed over the head axis (ready to add to the residual)."""
        W = lambda name: self._w(layer, name)                                         # noqa: E731
        g = ccl.reduce_scatter(self.matmul(h, W("w1"), {self.ha: 1}), 1, self.xa, label="FF1")
        u = ccl.reduce_scatter(self.matmul(h, W("w3"), {self.ha: 1}), 1, self.xa, label="FF3")
        a = MeshTensor(h.mesh, [[silu_mul(ga, ua) for ga, ua in zip(rg, ru)]
                                for rg, ru in zip(g.arrays, u.arrays)], g.dims)      # [R, F/(PQ)]
        a = ccl.all_gather(a, 1, self.xa, label="FF2 in")                            # [R, F/P]
        y = self.matmul(a, W("w2"), {self.xa: 1})                                    # partial over p
        return ccl.all_reduce(y, self.ha, label="FF2")

    def attention(self, layer: int, qkv: MeshTensor, step: Step, cache: KVStore) -> MeshTensor:
        """Causal GQA of head group p on the devices of head-axis coordinate p. The rows of one
        head-axis coordinate hold identical q/k/v (replicas after the all-reduce), so the
        emulator computes each head group once and hands the result to its replicas.

        The cache is one KVStore for the whole mesh; head group p owns K/V heads
        p*kv_heads .. of it (on a Galaxy each chip's DRAM holds its own group)."""
        pl, d = self.place, self.config.head_dim
        R = qkv.shape[0]
        nq, nkv = pl.heads, pl.kv_heads
        cos2, sin2 = rotation_tables(*cos_sin(step.positions, self.freqs))
        mesh = self.mesh
        reps = {}
        for p in range(pl.P):                     # one representative device per head group
            rc = [(r, cc) for r in range(mesh.config.shape[0]) for cc in range(mesh.config.shape[1])
                  if _pq(mesh, r, cc)[0] == p][0]
            reps[p] = qkv[rc]
        qs, ks, vs = [], [], []
        for p in range(pl.P):
            a = reps[p]
            qk = a[:, :(nq + nkv) * d].reshape(R, nq + nkv, d).copy()
            rope_inplace(qk, cos2, sin2)
            qs.append(qk[:, :nq])
            ks.append(qk[:, nq:])
            vs.append(a[:, (nq + nkv) * d:].reshape(R, nkv, d))
        k_all, v_all = np.concatenate(ks, axis=1), np.concatenate(vs, axis=1)      # [R, N_kv, d]
        out = {p: np.zeros((R, nq * d), np.float32) for p in range(pl.P)}
        for seg in step.segments:
            rows = seg.rows
            k, v = k_all[rows], v_all[rows]
            if self.kv_format is not None:                     # what a bfloat8_b cache stores
                from llamanb.model.numerics import blockfloat_padded
                k, v = blockfloat_padded(k, self.kv_format), blockfloat_padded(v, self.kv_format)
            cache.write(layer, seg.slot, seg.start, k, v)
            keys, vals = cache.keys(layer, seg.slot, seg.end), cache.values(layer, seg.slot, seg.end)
            for p in range(pl.P):
                kv = slice(p * nkv, (p + 1) * nkv)
                out[p][rows] = self._attend(qs[p][rows], keys[kv], vals[kv], seg.start)
        return qkv.map_rc(lambda r, cc, a: out[_pq(mesh, r, cc)[0]], {})

    def _attend(self, q: np.ndarray, keys: np.ndarray, vals: np.ndarray, start: int) -> np.ndarray:
        """q [S, nq, d] at positions start.., keys/vals [nkv, T, d] -> [S, nq d]: llamanb.engine.attention,
        all rows against all keys in one block."""
        return attention(q, lambda T: keys[:, :T], lambda T: vals[:, :T], start, self.scale,
                         keys.shape[0], block_q=None)

    # --- the LM head -----------------------------------------------------------------------------
    def head(self, x: MeshTensor) -> np.ndarray:
        """Final RMSNorm, all-gather of the hidden slices, then each device's vocabulary slice;
        the host concatenates the logits."""
        w = self.weights.final_norm
        pl = self.place
        h = self.rms_norm(x, lambda r, c: w[_pq(self.mesh, r, c)[1] * pl.hidden:
                                             (_pq(self.mesh, r, c)[1] + 1) * pl.hidden])
        h = ccl.all_gather(h, 1, self.xa, label="head in")                           # [n, H]
        C = self.mesh.config.shape[1]
        parts = [h[r, c] @ self.weights.lm_head[self.vocab_slices[r * C + c]].T
                 for r in range(self.mesh.config.shape[0]) for c in range(C)]
        return np.concatenate(parts, axis=-1)

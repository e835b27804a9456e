"""Backend "galaxy-emulated": the engine's seam driven through an emulated mesh.

    Engine(model, backend="galaxy-emulated", mesh=MeshConfig((3, 4)), kv_format="bfloat8_b",
           weight_formats={"w1": "bfloat4_b", "w3": "bfloat4_b"})

The hidden state stays on the mesh between blocks (`layers` is overridden); embedding is a host
gather, as on every backend, and the logits come back to the host. Optional number formats, as
the demo uses them: `kv_format` rounds every K/V row to a block float before the cache stores it;
`weight_formats` rounds weights (keys "wqkv", "wo", "w1", "w3", "w2") once, on the host, in ttnn's
[in, out] orientation, before they are placed. Collectives' traffic accumulates in
`backend.mesh.ledger`.

`TtnnMeshBackend` is the same seam on real hardware: ttnn is imported only when it is built, and
only if a Tenstorrent device opens (tests drive it with a fake ttnn module).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from llamanb.engine.backend import Backend
from llamanb.errors import LlamanbError
from llamanb.engine.kv.base import KVStore
from llamanb.model.numerics import BLOCK_FLOAT_BITS, blockfloat
from llamanb.model.rope import cos_sin, rope_for
from llamanb.engine.step import Step
from llamanb.model.weights import Weights
from llamanb.mesh.config import MeshConfig
from llamanb.mesh.device import EmulatedMesh
from llamanb.mesh.layers import MeshLayers, Placement

WEIGHT_NAMES = ("wqkv", "wo", "w1", "w3", "w2")


def _check_format(fmt, what):
    if fmt is not None and fmt not in BLOCK_FLOAT_BITS:
        raise LlamanbError(f"{what}: unknown format {fmt!r}; use one of {', '.join(BLOCK_FLOAT_BITS)}")


def _ttnn_round(w: np.ndarray, fmt: str) -> np.ndarray:
    """A weight [out, in] as ttnn would hold it: converted in [in, out] (blocks along `out`)."""
    return np.ascontiguousarray(blockfloat(np.ascontiguousarray(w.T), fmt).T)


def formatted_weights(weights: Weights, formats: dict[str, str]) -> Weights:
    """A copy of weights with the named matrices rounded to their block-float formats."""
    for name, fmt in formats.items():
        if name not in WEIGHT_NAMES:
            raise LlamanbError(f"weight_formats: unknown weight {name!r}; use {', '.join(WEIGHT_NAMES)}")
        _check_format(fmt, f"weight_formats[{name!r}]")
    if not formats:
        return weights
    F = weights.config.ffn
    layers = []
    for lw in weights.layers:
        new = {}
        if "wqkv" in formats:
            new["wqkv"] = _ttnn_round(lw.wqkv, formats["wqkv"])
        if "wo" in formats:
            new["wo"] = _ttnn_round(lw.wo, formats["wo"])
        if "w1" in formats or "w3" in formats:
            g, u = lw.w_gate_up[:F], lw.w_gate_up[F:]
            g = _ttnn_round(g, formats["w1"]) if "w1" in formats else g
            u = _ttnn_round(u, formats["w3"]) if "w3" in formats else u
            new["w_gate_up"] = np.concatenate([g, u])
        if "w2" in formats:
            new["w_down"] = _ttnn_round(lw.w_down, formats["w2"])
        layers.append(dataclasses.replace(lw, **new))
    return dataclasses.replace(weights, layers=layers, deriver=None)


class MeshBackend(Backend):
    name = "galaxy-emulated"
    emulated = True

    def __init__(self, weights: Weights, mesh: MeshConfig | tuple | None = None,
                 kv_format: str | None = None, weight_formats: dict | None = None):
        if isinstance(mesh, tuple):
            mesh = MeshConfig(tuple(int(n) for n in mesh))
        mesh = mesh or MeshConfig((1, 1))
        if not isinstance(mesh, MeshConfig):
            raise LlamanbError(f"mesh must be a MeshConfig or (rows, cols), got {mesh!r}")
        _check_format(kv_format, "kv_format")
        self.kv_format = kv_format
        self.weight_formats = dict(weight_formats or {})
        super().__init__(formatted_weights(weights, self.weight_formats))
        self.mesh = EmulatedMesh(mesh)
        self.tp = MeshLayers(self.weights, self.mesh)
        self.tp.kv_format = kv_format
        fmts = ", ".join(f"{k} {v}" for k, v in self.weight_formats.items())
        self.description = (f"emulated Tenstorrent mesh {mesh.label()} ({mesh.n_devices} numpy "
                            f"devices on the host CPU, {mesh.topology} collectives), float32"
                            + (f", KV cache {kv_format}" if kv_format else "")
                            + (f", weights {fmts}" if fmts else ""))

    def layers(self, x: np.ndarray, step: Step, cache: KVStore, collect: list | None = None) -> np.ndarray:
        t = self.tp.to_mesh(x)                                                       # [R, H/Q] each
        for layer in range(self.config.n_layers):
            t = self.tp.block(layer, t, step, cache)
            if collect is not None:
                collect.append(self.tp.to_host(t))
        self._last = t
        return self.tp.to_host(t)                                                    # [R, H]

    def block(self, layer: int, x: np.ndarray, step: Step, cache: KVStore) -> np.ndarray:
        return self.tp.to_host(self.tp.block(layer, self.tp.to_mesh(x), step, cache))

    def head(self, x: np.ndarray) -> np.ndarray:
        return self.tp.head(self.tp.to_mesh(x))                                      # [n, V]


class TtnnMeshBackend(Backend):
    """The same placement through ttnn on a real mesh device. Built only when ttnn imports and a
    device opens. Every op of the forward pass is a ttnn call, in the demo's order; the host only
    gathers the embedding rows, builds the step's RoPE tables and causal masks, and reads the logits:

        RMSNorm      ttnn.rms_norm_pre_all_gather -> all_gather(hidden axis) -> rms_norm_post_all_gather
        QKV          ttnn.linear -> all_reduce(hidden axis) -> experimental.nlp_create_qkv_heads (the
                     demo's prefill; its decode reduce-scatters QKV over the hidden axis instead,
                     fused with head creation, so each mesh column keeps 8 of its 32 users)
        RoPE         ttnn.experimental.rotary_embedding (HF half-split pairs; tables per step row;
                     the demo uses rotary_embedding_llama with Meta's interleaved pairs)
        KV cache     ttnn.fill_cache(cache, input, batch_idx) for a segment that starts at position
                     0 (upstream's fill_cache takes no start position: it writes rows 0..S-1), else
                     ttnn.update_cache(cache, input, update_idx, batch_offset=) one position at a
                     time; caches [slots, N_kv/P, max_seq, d] per layer, heads over the head axis,
                     in `kv_dtype` (the demo keeps bfloat8_b caches, paged, with
                     ttnn.experimental.paged_fill_cache / paged_fused_update_cache)
        attention    transformer.scaled_dot_product_attention (prefill: causal, or a mask for a chunk
                     after earlier ones) / scaled_dot_product_attention_decode (one row, cur_pos)
        WO, MLP      as above; residual adds with ttnn.add
        LM head      final norm, all_gather(hidden axis), ttnn.linear on each chip's vocabulary slice

    Tensors are 4-D, [1, 1, rows, width], as ttnn keeps them. The KV cache lives on the device, one
    per KVStore the engine hands in (contiguous caches only); the KVStore keeps the lengths. The
    RoPE tables are uploaded per step as the op's "cache" with exactly the step's rows. Tested with
    a fake ttnn (tests/mesh/test_mesh_ttnn.py) that computes in float32 and models neither tile padding
    nor memory configs: on a card, row slices that do not start on a tile, partial-tile cache
    writes and the rms_norm weight layout may need ttnn's ROW_MAJOR / padding variants."""

    name = "galaxy-ttnn"
    emulated = False

    def __init__(self, weights: Weights, mesh: MeshConfig | None = None, ttnn=None,
                 weight_dtypes: dict | None = None, kv_dtype: str = "bfloat16"):
        super().__init__(weights)
        self.mesh_config = m = mesh or MeshConfig((1, 1))
        self.place = Placement.of(weights.config, m)
        self.weight_dtypes = {"w1": "bfloat8_b", "w3": "bfloat8_b", "w2": "bfloat8_b",
                              "lm_head": "bfloat8_b", **(weight_dtypes or {})}
        self.kv_dtype_name = kv_dtype
        self.freqs = rope_for(weights.config)
        self.scale = float(weights.config.head_dim ** -0.5)
        self._kv = None
        self.ttnn = ttnn if ttnn is not None else load_ttnn()
        t = self.ttnn
        try:
            self.device = t.open_mesh_device(t.MeshShape(*m.shape))
        except Exception as e:                                       # noqa: BLE001 -- any driver error
            raise LlamanbError(f"ttnn could not open a {m.label()} mesh device: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        self.topology = getattr(t.Topology, "Linear" if m.topology == "line" else "Ring")
        self.description = f"Tenstorrent mesh {m.label()} through ttnn"
        self._uploaded = {}

    # --- placement ---------------------------------------------------------------------------------
    def _mapper(self, dims: dict[int, int]):
        t = self.ttnn
        if not dims:
            return t.ReplicateTensorToMesh(self.device)
        return t.ShardTensor2dMesh(self.device, dims=(dims.get(0), dims.get(1)),
                                   mesh_shape=self.mesh_config.shape)

    def to_device(self, a: np.ndarray, dims: dict[int, int] | None, dtype: str = "bfloat16"):
        """Host array -> a mesh tensor: mesh axis k splits tensor dim dims[k]; others replicate."""
        import torch                                                 # ttnn's from_torch needs it

        t = self.ttnn
        return t.from_torch(torch.from_numpy(np.array(a, dtype=np.float32)),
                            dtype=getattr(t, dtype), layout=t.TILE_LAYOUT, device=self.device,
                            mesh_mapper=self._mapper(dims or {}))

    def to_host(self, x, dims: dict[int, int]) -> np.ndarray:
        t = self.ttnn
        composer = t.ConcatMesh2dToTensor(self.device, dims=(dims.get(0), dims.get(1)),
                                          mesh_shape=self.mesh_config.shape)
        return np.asarray(t.to_torch(x, mesh_composer=composer).float().numpy())

    def mlp_weights(self, layer: int) -> dict:
        """W1, W3 [H, D_ff] and W2 [D_ff, H] of one layer, uploaded once ([in, out] as ttnn
        multiplies): the hidden dim over the hidden axis, the FFN dim over the head axis."""
        if layer not in self._uploaded:
            c, m, lw = self.config, self.mesh_config, self.weights.layers[layer]
            ha, xa = m.head_axis, m.hidden_axis
            up = {ha: 1, xa: 0}                                      # [H, F]: rows over xa, cols over ha
            self._uploaded[layer] = dict(
                w1=self.to_device(lw.w_gate_up[:c.ffn].T, up, self.weight_dtypes["w1"]),
                w3=self.to_device(lw.w_gate_up[c.ffn:].T, up, self.weight_dtypes["w3"]),
                w2=self.to_device(lw.w_down.T, {ha: 0, xa: 1}, self.weight_dtypes["w2"]))
        return self._uploaded[layer]

    def attn_weights(self, layer: int) -> dict:
        """WQKV [H, (N_h + 2 N_kv) d] with each head group's Q, K and V columns side by side (the
        emulated layers' order), and WO [N_h d, H], uploaded once."""
        if ("attn", layer) not in self._uploaded:
            c, m, lw, pl = self.config, self.mesh_config, self.weights.layers[layer], self.place
            d, ha, xa = c.head_dim, m.head_axis, m.hidden_axis
            groups = []
            for p in range(pl.P):
                q0, k0 = p * pl.heads * d, c.q_dim + p * pl.kv_heads * d
                v0 = c.q_dim + c.kv_dim + p * pl.kv_heads * d
                groups += [lw.wqkv[q0:q0 + pl.heads * d], lw.wqkv[k0:k0 + pl.kv_heads * d],
                           lw.wqkv[v0:v0 + pl.kv_heads * d]]
            wqkv = np.concatenate(groups).T                          # [H, P * group columns]
            self._uploaded["attn", layer] = dict(
                wqkv=self.to_device(wqkv, {ha: 1, xa: 0}, self.weight_dtypes.get("wqkv", "bfloat8_b")),
                wo=self.to_device(lw.wo.T, {ha: 0, xa: 1}, self.weight_dtypes.get("wo", "bfloat8_b")))
        return self._uploaded["attn", layer]

    def qkv(self, layer: int, h):
        """Normalised rows (hidden split over the hidden axis) -> q|k|v of each chip's head group,
        summed over the hidden axis (the demo's prefill all-reduce on cluster_axis 1)."""
        w = self.attn_weights(layer)
        return self.all_reduce(self.ttnn.linear(h, w["wqkv"]), self.mesh_config.hidden_axis)

    def wo(self, layer: int, attn):
        """Attention output of each chip's heads -> WO, summed over the head axis."""
        w = self.attn_weights(layer)
        return self.all_reduce(self.ttnn.linear(attn, w["wo"]), self.mesh_config.head_axis)

    # --- collectives: ttnn's own, one cluster_axis at a time ----------------------------------------
    def _ccl_kw(self, cluster_axis: int) -> dict:
        return dict(cluster_axis=cluster_axis, num_links=self.mesh_config.num_links,
                    topology=self.topology)

    def all_reduce(self, x, cluster_axis: int):
        return self.ttnn.all_reduce(x, **self._ccl_kw(cluster_axis))

    def reduce_scatter(self, x, dim: int, cluster_axis: int):
        return self.ttnn.reduce_scatter(x, dim, **self._ccl_kw(cluster_axis))

    def all_gather(self, x, dim: int, cluster_axis: int):
        return self.ttnn.all_gather(x, dim, **self._ccl_kw(cluster_axis))

    # --- the MLP sub-block, as llamanb.mesh.layers.MeshLayers.mlp ----------------------------------
    def mlp(self, layer: int, h):
        """h: normalised rows on the mesh, hidden split over the hidden axis -> W2 output, summed
        over the head axis. The demo's order: W1, W3, reduce-scatter each, SiLU(W1) * W3,
        all-gather, W2, all-reduce."""
        t, w, m = self.ttnn, self.mlp_weights(layer), self.mesh_config
        g = self.reduce_scatter(t.linear(h, w["w1"]), -1, m.hidden_axis)
        u = self.reduce_scatter(t.linear(h, w["w3"]), -1, m.hidden_axis)
        a = t.mul(g, u, input_tensor_a_activations=[t.UnaryOpType.SILU])
        a = self.all_gather(a, -1, m.hidden_axis)
        return self.all_reduce(t.linear(a, w["w2"]), m.head_axis)

    # --- RMSNorm over a hidden dim split on the hidden axis ---------------------------------------
    def norm_weight(self, key, w: np.ndarray):
        """A norm's gain [H] as [1, 1, 1, H], split over the hidden axis like the residual."""
        if key not in self._uploaded:
            self._uploaded[key] = self.to_device(w.reshape(1, 1, 1, -1), {self.mesh_config.hidden_axis: 3})
        return self._uploaded[key]

    def rms_norm(self, x, weight):
        """Each chip's sum of squares, all-gathered along the hidden axis, then the scale."""
        t = self.ttnn
        stats = self.all_gather(t.rms_norm_pre_all_gather(x), -1, self.mesh_config.hidden_axis)
        return t.rms_norm_post_all_gather(x, stats, epsilon=self.config.rms_eps, weight=weight)

    # --- the attention core --------------------------------------------------------------------
    def kv_caches(self, cache: KVStore, layer: int):
        """This layer's device K and V caches [slots, N_kv, capacity, d], heads over the head axis
        (made, zeroed, the first time a KVStore is seen)."""
        if getattr(cache, "block", None) is not None:
            raise LlamanbError("the ttnn mesh path keeps a contiguous KV cache on the device; "
                               "use new_cache(max_seq) without block=")
        if self._kv is None or self._kv[0] is not cache:
            c = self.config
            z = np.zeros((cache.slots, c.n_kv_heads, cache.capacity, c.head_dim), np.float32)
            ha = self.mesh_config.head_axis
            self._kv = (cache, [(self.to_device(z, {ha: 1}, self.kv_dtype_name),
                                 self.to_device(z, {ha: 1}, self.kv_dtype_name))
                                for _ in range(c.n_layers)])
        return self._kv[1][layer]

    def rope_tables(self, step: Step):
        """cos and sin [1, 1, R, d] of the step's rows (cos | cos, sin | sin), replicated."""
        cos, sin = cos_sin(step.positions, self.freqs)
        return (self.to_device(np.concatenate([cos, cos], -1)[None, None], {}),
                self.to_device(np.concatenate([sin, sin], -1)[None, None], {}))

    def attention(self, layer: int, qkv, step: Step, cache: KVStore):
        """qkv [1, 1, R, (nq + 2 nkv) d] of each chip's head group -> [1, 1, R, nq d]."""
        t, pl, d = self.ttnn, self.place, self.config.head_dim
        q, k, v = t.experimental.nlp_create_qkv_heads(qkv, num_heads=pl.heads, num_kv_heads=pl.kv_heads,
                                                      transpose_k_heads=False)   # [1, n, R, d]
        cos, sin = self.rope_tables(step)
        q = t.experimental.rotary_embedding(q, cos, sin)
        k = t.experimental.rotary_embedding(k, cos, sin)
        kc, vc = self.kv_caches(cache, layer)
        R, width = len(step.positions), pl.heads * d
        pieces, row = [], 0
        for seg in sorted(step.segments, key=lambda s: s.row):
            if seg.row > row:                                        # padding rows: zeros
                pieces.append(self.to_device(np.zeros((1, 1, seg.row - row, width), np.float32), {}))
            rows = lambda a, n: t.slice(a, [0, 0, seg.row, 0], [1, n, seg.row + seg.n, d])  # noqa: E731
            qs, ks, vs = rows(q, pl.heads), rows(k, pl.kv_heads), rows(v, pl.kv_heads)
            if seg.start == 0 and seg.n > 1:                           # fill_cache writes from 0
                t.fill_cache(kc, ks, seg.slot)
                t.fill_cache(vc, vs, seg.slot)
            else:
                for i in range(seg.n):
                    one = lambda a: t.slice(a, [0, 0, i, 0], [1, pl.kv_heads, i + 1, d])  # noqa: E731
                    t.update_cache(kc, one(ks), seg.start + i, batch_offset=seg.slot)
                    t.update_cache(vc, one(vs), seg.start + i, batch_offset=seg.slot)
            own = lambda c: t.slice(c, [seg.slot, 0, 0, 0], [seg.slot + 1, pl.kv_heads, seg.end, d])  # noqa: E731
            keys, vals = own(kc), own(vc)                            # [1, nkv, end, d]
            if seg.n == 1:
                o = t.transformer.scaled_dot_product_attention_decode(
                    t.permute(qs, (0, 2, 1, 3)), keys, vals, cur_pos=[seg.start], scale=self.scale)
                o = t.permute(o, (0, 2, 1, 3))                       # [1, nq, 1, d]
            elif seg.start == 0:
                o = t.transformer.scaled_dot_product_attention(qs, keys, vals, is_causal=True,
                                                               scale=self.scale)
            else:                                                    # a chunk after earlier ones
                later = np.arange(seg.end)[None, :] > (seg.start + np.arange(seg.n))[:, None]
                mask = self.to_device(np.where(later, -np.inf, 0).astype(np.float32)[None, None], {})
                o = t.transformer.scaled_dot_product_attention(qs, keys, vals, is_causal=False,
                                                               attn_mask=mask, scale=self.scale)
            pieces.append(t.experimental.nlp_concat_heads(o))        # [1, 1, n, nq d]
            row = seg.row + seg.n
        if row < R:
            pieces.append(self.to_device(np.zeros((1, 1, R - row, width), np.float32), {}))
        return pieces[0] if len(pieces) == 1 else t.concat(pieces, dim=2)

    # --- one block, the stack, the head ----------------------------------------------------------
    def block_on_device(self, layer: int, x, step: Step, cache: KVStore):
        """x [1, 1, R, H/Q] on the mesh -> the block's output, same layout."""
        t, lw = self.ttnn, self.weights.layers[layer]
        h = self.rms_norm(x, self.norm_weight(("attn_norm", layer), lw.attn_norm))
        attn = self.attention(layer, self.qkv(layer, h), step, cache)
        x = t.add(x, self.wo(layer, attn))
        h = self.rms_norm(x, self.norm_weight(("ffn_norm", layer), lw.ffn_norm))
        return t.add(x, self.mlp(layer, h))

    def _up(self, x: np.ndarray):
        return self.to_device(x[None, None], {self.mesh_config.hidden_axis: 3})

    def _down(self, x) -> np.ndarray:
        return self.to_host(x, {self.mesh_config.hidden_axis: 3})[0, 0]

    def layers(self, x: np.ndarray, step: Step, cache: KVStore, collect: list | None = None) -> np.ndarray:
        y = self._up(x)                                              # [1, 1, R, H/Q] per chip
        for layer in range(self.config.n_layers):
            y = self.block_on_device(layer, y, step, cache)
            if collect is not None:
                collect.append(self._down(y))
        return self._down(y)

    def block(self, layer: int, x: np.ndarray, step: Step, cache: KVStore) -> np.ndarray:
        return self._down(self.block_on_device(layer, self._up(x), step, cache))

    def lm_head_weight(self):
        """LM head [H, V] as [P, Q, H, V'/(P Q)]: chip (p, q) holds vocabulary slice p Q + q
        (V padded with zero columns to a multiple of the chip count)."""
        if "lm_head" not in self._uploaded:
            (A, B), H, V = self.mesh_config.shape, self.config.hidden, self.config.vocab
            n = -(-V // (A * B))
            w = np.zeros((H, A * B * n), np.float32)
            w[:, :V] = self.weights.lm_head.T
            w = w.reshape(H, A, B, n).transpose(1, 2, 0, 3)          # [A, B, H, n]
            self._uploaded["lm_head"] = self.to_device(w, {0: 0, 1: 1}, self.weight_dtypes["lm_head"])
        return self._uploaded["lm_head"]

    def head(self, x: np.ndarray) -> np.ndarray:
        t, m = self.ttnn, self.mesh_config
        h = self.rms_norm(self._up(x), self.norm_weight("final_norm", self.weights.final_norm))
        h = self.all_gather(h, -1, m.hidden_axis)                    # [1, 1, n, H] on every chip
        parts = self.to_host(t.linear(h, self.lm_head_weight()), {0: 0, 1: 1})   # [A, B, n, V'/AB]
        n = parts.shape[2]
        return np.ascontiguousarray(parts.transpose(2, 0, 1, 3).reshape(n, -1)[:, :self.config.vocab])


def load_ttnn():
    """Import ttnn (only here, on demand): a one-line error when it is missing or unusable."""
    try:
        import ttnn  # type: ignore[import-not-found]
    except Exception as e:                                           # noqa: BLE001 -- ImportError and broken wheels
        raise LlamanbError(f"ttnn is not usable here ({type(e).__name__}: {str(e)[:80]}); it needs "
                           "CPython 3.10/3.12, numpy < 2 and a Tenstorrent card") from None
    return ttnn


def ttnn_available() -> bool:
    try:
        load_ttnn()
    except LlamanbError:
        return False
    return True

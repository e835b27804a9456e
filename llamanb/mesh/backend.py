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

from ..backends.base import Backend
from ..errors import LlamanbError
from ..kv.base import KVStore
from ..numerics import BLOCK_FLOAT_BITS, blockfloat
from ..step import Step
from ..weights import Weights
from .config import MeshConfig
from .device import EmulatedMesh
from .layers import MeshLayers, Placement

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
    device opens. What runs through ttnn so far: placing tensors with ttnn's mesh mappers, the
    collectives (ttnn.all_reduce / reduce_scatter / all_gather along a cluster_axis), the QKV and
    WO projections with their all-reduces, and the MLP sub-block, in the demo's order. The
    attention core (RoPE, KV cache, SDPA), RMSNorm and the LM head are not written for ttnn yet."""

    name = "galaxy-ttnn"
    emulated = False

    def __init__(self, weights: Weights, mesh: MeshConfig | None = None, ttnn=None,
                 weight_dtypes: dict | None = None):
        super().__init__(weights)
        self.mesh_config = m = mesh or MeshConfig((1, 1))
        self.place = Placement.of(weights.config, m)
        self.weight_dtypes = {"w1": "bfloat8_b", "w3": "bfloat8_b", "w2": "bfloat8_b",
                              **(weight_dtypes or {})}
        self.ttnn = ttnn if ttnn is not None else load_ttnn()
        t = self.ttnn
        try:
            self.device = t.open_mesh_device(t.MeshShape(*m.shape))
        except Exception as e:                                       # noqa: BLE001 -- any driver error
            raise LlamanbError(f"ttnn could not open a {m.label()} mesh device: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        self.topology = getattr(t.Topology, "Linear" if m.topology == "line" else "Ring")
        self.description = f"Tenstorrent mesh {m.label()} through ttnn"
        self._mlp = {}

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
        return t.from_torch(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)),
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
        if layer not in self._mlp:
            c, m, lw = self.config, self.mesh_config, self.weights.layers[layer]
            ha, xa = m.head_axis, m.hidden_axis
            up = {ha: 1, xa: 0}                                      # [H, F]: rows over xa, cols over ha
            self._mlp[layer] = dict(
                w1=self.to_device(lw.w_gate_up[:c.ffn].T, up, self.weight_dtypes["w1"]),
                w3=self.to_device(lw.w_gate_up[c.ffn:].T, up, self.weight_dtypes["w3"]),
                w2=self.to_device(lw.w_down.T, {ha: 0, xa: 1}, self.weight_dtypes["w2"]))
        return self._mlp[layer]

    def attn_weights(self, layer: int) -> dict:
        """WQKV [H, (N_h + 2 N_kv) d] with each head group's Q, K and V columns side by side (the
        emulated layers' order), and WO [N_h d, H], uploaded once."""
        if ("attn", layer) not in self._mlp:
            c, m, lw, pl = self.config, self.mesh_config, self.weights.layers[layer], self.place
            d, ha, xa = c.head_dim, m.head_axis, m.hidden_axis
            groups = []
            for p in range(pl.P):
                q0, k0 = p * pl.heads * d, c.q_dim + p * pl.kv_heads * d
                v0 = c.q_dim + c.kv_dim + p * pl.kv_heads * d
                groups += [lw.wqkv[q0:q0 + pl.heads * d], lw.wqkv[k0:k0 + pl.kv_heads * d],
                           lw.wqkv[v0:v0 + pl.kv_heads * d]]
            wqkv = np.concatenate(groups).T                          # [H, P * group columns]
            self._mlp["attn", layer] = dict(
                wqkv=self.to_device(wqkv, {ha: 1, xa: 0}, self.weight_dtypes.get("wqkv", "bfloat8_b")),
                wo=self.to_device(lw.wo.T, {ha: 0, xa: 1}, self.weight_dtypes.get("wo", "bfloat8_b")))
        return self._mlp["attn", layer]

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

    def block(self, layer, x, step, cache):
        raise LlamanbError("the ttnn mesh path runs the projections, the MLP and the collectives; its "
                           "attention is not written yet (use backend 'galaxy-emulated')")

    def head(self, x):
        raise LlamanbError("the ttnn mesh path has no LM head yet (use backend 'galaxy-emulated')")


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

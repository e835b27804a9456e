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
from .layers import MeshLayers

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
    """The same layers through ttnn on a real mesh device. Built only when ttnn imports and a
    device opens; weights go up once with the mesh mappers, collectives are ttnn's own."""

    name = "galaxy-ttnn"
    emulated = False

    def __init__(self, weights: Weights, mesh: MeshConfig | None = None, ttnn=None):
        super().__init__(weights)
        self.mesh_config = mesh or MeshConfig((1, 1))
        self.ttnn = ttnn if ttnn is not None else load_ttnn()
        t = self.ttnn
        try:
            self.device = t.open_mesh_device(t.MeshShape(*self.mesh_config.shape))
        except Exception as e:                                       # noqa: BLE001 -- any driver error
            raise LlamanbError(f"ttnn could not open a {self.mesh_config.label()} mesh device: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        self.description = f"Tenstorrent mesh {self.mesh_config.label()} through ttnn"

    def to_device(self, a: np.ndarray, dims: dict[int, int] | None, dtype: str = "bfloat16"):
        """Host array -> a mesh tensor: sharded along `dims` ({mesh axis: tensor dim}) or replicated."""
        t = self.ttnn
        import torch                                                 # ttnn's from_torch needs it

        dims = dims or {}
        mapper = (t.ShardTensor2dMesh(self.device, dims=(dims.get(0), dims.get(1)),
                                      mesh_shape=self.mesh_config.shape)
                  if dims else t.ReplicateTensorToMesh(self.device))
        return t.from_torch(torch.from_numpy(np.ascontiguousarray(a)), dtype=getattr(t, dtype),
                            layout=t.TILE_LAYOUT, device=self.device, mesh_mapper=mapper)

    def all_reduce(self, x, cluster_axis: int):
        """ttnn's all-reduce along one mesh axis (the emulated ccl.all_reduce's counterpart)."""
        return self.ttnn.all_reduce(x, cluster_axis=cluster_axis, mesh_device=self.device,
                                    num_links=self.mesh_config.num_links,
                                    topology=getattr(self.ttnn.Topology,
                                                     self.mesh_config.topology.capitalize()))

    def block(self, layer, x, step, cache):
        raise LlamanbError("the ttnn mesh path places weights and runs collectives; its attention "
                           "block is not written yet (use backend 'galaxy-emulated')")

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

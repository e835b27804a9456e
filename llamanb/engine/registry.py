"""Backends: who computes a transformer block. See base.Backend for the contract."""
from __future__ import annotations

from llamanb.errors import LlamanbError
from llamanb.engine.backend import Backend
from llamanb.engine.numpy_backend import NumpyBackend

BACKENDS = {"numpy": NumpyBackend}


LAZY = {"cpu": ("llamanb.cpu.backend", "CpuBackend"),
        "galaxy-emulated": ("llamanb.mesh.backend", "MeshBackend"),   # imported on first use
        "tcp": ("llamanb.tcp.backend", "TCPBackend"),
        "npu2-emulated": ("llamanb.npu.backend", "NPU2Backend"),
        "npu2": ("llamanb.npu.backend", "NPU2RealBackend"),
        "galaxy-ttnn": ("llamanb.mesh.backend", "TtnnMeshBackend"),
        "cuda-simulated": ("llamanb.cuda.backend", "CudaSimBackend"),
        "cuda": ("llamanb.cuda.backend", "CudaBackend")}


def backend_class(name: str) -> type[Backend] | None:
    """The class registered as `name`, its track imported on first use; None if unknown."""
    if name in LAZY and name not in BACKENDS:
        import importlib

        module, cls_name = LAZY[name]
        BACKENDS[name] = getattr(importlib.import_module(module), cls_name)
    return BACKENDS.get(name)


def make_backend(name: str, weights, **options) -> Backend:
    cls = backend_class(name)
    if cls is None:
        raise LlamanbError(f"unknown backend {name!r}; available: {', '.join({**BACKENDS, **LAZY})}")
    return cls(weights, **options)


__all__ = ["Backend", "NumpyBackend", "BACKENDS", "LAZY", "backend_class", "make_backend"]

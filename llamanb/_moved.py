"""Old import paths, for one release: the package moved from 30 flat modules into rooms
(docs/architecture.md). `import llamanb.config` still gives llamanb.model.config, with a
DeprecationWarning naming the new path. Notebooks, tests and the package itself use the new paths
(tests/test_layout.py checks that nothing imports an old one).

    MOVED    old module -> the module it is now (the same module object, so patching works)
    SPLIT    old module whose names went to several modules -> where each name went
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

MOVED = {
    "attention": "engine.attention",
    "backends": "engine.registry",
    "backends.base": "engine.backend",
    "backends.cpu": "cpu.backend",
    "backends.cpu_kernels": "cpu.kernels",
    "backends.numpy_ref": "engine.numpy_backend",
    "blas": "platform.blas",
    "calibration": "platform.calibration",
    "chat": "engine.chat",
    "chat_widget": "course.widgets",
    "check.float64": "model.reference",
    "config": "model.config",
    "cxx_build": "platform.cxx_build",
    "exercises": "course.exercises",
    "exercises.ch14": "course.exercises.chA",
    "flops": "model.flops",
    "generate": "engine.generate",
    "hardware": "platform.hardware",
    "info": "model.info",
    "kv": "engine.kv",
    "kv.base": "engine.kv.base",
    "kv.contiguous": "engine.kv.contiguous",
    "kv.paged": "engine.kv.paged",
    "npu.perf": "npu",
    "npu.perf.cost": "npu.cost",
    "npu.perf.profile": "npu.profile",
    "npu.perf.traffic": "npu.traffic",
    "numerics": "model.numerics",
    "ops": "model.ops",
    "paths": "platform.paths",
    "progress": "platform.progress",
    "rope": "model.rope",
    "rope_tables": "model.rope_tables",
    "sampling": "engine.sampling",
    "step": "engine.step",
    "token_ids": "model.token_ids",
    "tokenizer": "model.tokenizer",
    "weights": "model.weights"
}
SPLIT = {
    "hardware.CXX_CANDIDATES": "platform.cxx_build.CXX_CANDIDATES",
    "hardware.cpu_compiler_missing": "cpu.readiness.cpu_compiler_missing",
    "hardware.cuda_missing": "cuda.readiness.cuda_missing",
    "hardware.find_cxx": "platform.cxx_build.find_cxx",
    "hardware.furiosa_tool": "tcp.readiness.furiosa_tool",
    "hardware.npu2_missing": "npu.readiness.npu2_missing",
    "hardware.peano_found": "npu.readiness.peano_found",
    "hardware.readiness": "readiness.readiness",
    "hardware.readiness_report": "readiness.readiness_report",
    "hardware.tcp_compiler_missing": "tcp.readiness.tcp_compiler_missing",
    "hardware.tcp_compiler_note": "tcp.readiness.tcp_compiler_note",
    "hardware.ttlang_sim_missing": "mesh.readiness.ttlang_sim_missing",
    "hardware.ttnn_missing": "mesh.readiness.ttnn_missing"
}
OLD_PACKAGES = {"backends", "exercises", "kv", "npu.perf"}


def new_name(old: str) -> str | None:
    """llamanb.<old> -> llamanb.<new>, or None where the path did not move."""
    rel = old.removeprefix("llamanb.")
    return "llamanb." + MOVED[rel] if rel in MOVED else None


class _Alias(types.ModuleType):
    """An old module whose names went to several places (hardware) or an old package whose own
    module became a plain module (backends -> engine.registry): names are looked up where they went."""

    def __init__(self, old: str, new: str):
        super().__init__(old)
        self.__path__ = []                  # so that old submodule paths (backends.cpu) resolve
        self._new = new

    def __getattr__(self, name: str):
        where = SPLIT.get(f"{self.__name__.removeprefix('llamanb.')}.{name}")
        module = importlib.import_module("llamanb." + where.rsplit(".", 1)[0]) if where else \
            importlib.import_module(self._new)
        return getattr(module, name)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        old = module.__name__
        new = new_name(old)
        warnings.warn(f"{old} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)
        rel = old.removeprefix("llamanb.")
        target = importlib.import_module(new)
        split = any(k.startswith(rel + ".") for k in SPLIT)
        sys.modules[old] = _Alias(old, new) if split or (rel in OLD_PACKAGES and not hasattr(target, "__path__")) \
            else target


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("llamanb.") and new_name(fullname):
            return importlib.machinery.ModuleSpec(fullname, _Loader())
        return None


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

"""What a kernel builder returns: the module text plus the facts a runtime needs about it.

Upstream's Llama on NPU2 keeps, next to every compiled ELF, a hand-written table of its `%argN`
slots (which is a weight uploaded once, which an intermediate that never leaves the device, which an
output the host reads) and index sets typed from that table. Here the table is data:

    spec.args[3]            Arg(name='wq', shape=(576, 576), dtype='bf16', role='weight', doc=...)
    spec.static_indices     (1, 3)     derived from the roles, never typed
    print(spec.table())     the %argN table, one row per function argument

Roles: "weight" (written once per layer: weights, norm scales, RoPE tables), "input" (changes every
call: the activation), "intermediate" (produced and consumed on the device, between launches),
"output" (the host reads it back). A stitched group (llamanb.npu stitching) builds the same type.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from llamanb.errors import LlamanbError

ROLES = ("weight", "input", "intermediate", "output")


@dataclass(frozen=True)
class Arg:
    name: str
    shape: tuple[int, ...]
    role: str
    doc: str = ""
    dtype: str = "bf16"

    def __post_init__(self):
        if self.role not in ROLES:
            raise LlamanbError(f"argument {self.name}: role {self.role!r} is not one of {ROLES}")

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * {"bf16": 2, "f32": 4, "i32": 4}[self.dtype]


@dataclass(frozen=True)
class KernelSpec:
    """One NPU kernel (or stitched group): its MLIR text, arguments and numpy semantics.

    model(*arrays) runs the kernel's semantics in numpy on float32 arrays holding bf16 values, one
    per argument in order, and writes the outputs (and intermediates) in place, as the NPU does.
    """

    name: str                         # kernel name, also the public function's symbol
    args: tuple[Arg, ...]
    text: str                         # the MLIR module
    model: Callable
    herd: tuple[int, int] = (1, 1)    # the herd shape the builder was asked for
    tiles: dict = field(default_factory=dict)       # tile sizes by name (tile_m, tile_n, ...)
    links: tuple[str, ...] = ()       # external objects (rope.o, ...)
    externs: tuple[str, ...] = ()     # external kernel symbols
    params: dict = field(default_factory=dict)      # scalars of the semantics (eps, causal, ...)
    # keyword arguments for mlir-air's XRTBackend when this module is compiled for the NPU, on top
    # of llamanb.npu.compiler.compile's defaults (ELF output, instance_name = the function, npu2): e.g.
    # {"omit_pingpong": "all", "runtime_loop_tiling_sizes": [1, 1]} (a group's, from upstream's
    # presets; see llamanb.npu.compiler.groups.COMPILE_OPTIONS). The emulated L1 check reads omit_pingpong.
    backend: dict = field(default_factory=dict)

    @property
    def func(self) -> str:
        return self.name

    def __repr__(self) -> str:
        args = ", ".join(f"{a.name}{list(a.shape)}:{a.role}" for a in self.args)
        links = f", links={list(self.links)}" if self.links else ""
        return (f"KernelSpec({self.name}: {args}; herd {self.herd[0]}x{self.herd[1]}, "
                f"tiles {self.tiles}{links}; {len(self.text.splitlines())} lines of MLIR)")

    def __str__(self) -> str:
        """The repr's facts on two lines, so that a printed spec fits a notebook's column."""
        args = ", ".join(f"{a.name}{list(a.shape)}:{a.role}" for a in self.args)
        links = f", links={list(self.links)}" if self.links else ""
        return (f"KernelSpec {self.name}: {args}\n  herd {self.herd[0]}x{self.herd[1]}, "
                f"tiles {self.tiles}{links}; {len(self.text.splitlines())} lines of MLIR")

    def _indices(self, *roles: str) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.args) if a.role in roles)

    @property
    def static_indices(self) -> tuple[int, ...]:
        return self._indices("weight")

    @property
    def input_indices(self) -> tuple[int, ...]:
        return self._indices("input")

    @property
    def intermediate_indices(self) -> tuple[int, ...]:
        return self._indices("intermediate")

    @property
    def output_indices(self) -> tuple[int, ...]:
        return self._indices("output")

    def arg_index(self, name: str) -> int:
        for i, a in enumerate(self.args):
            if a.name == name:
                return i
        raise LlamanbError(f"{self.name} has no argument {name!r}; it has "
                           f"{', '.join(a.name for a in self.args)}")

    def table(self) -> str:
        """The %argN table: slot, name, shape, dtype, role, what it holds."""
        rows = [("slot", "name", "shape", "dtype", "role", "holds")]
        for i, a in enumerate(self.args):
            rows.append((f"%arg{i}", a.name, "x".join(map(str, a.shape)), a.dtype, a.role, a.doc))
        widths = [max(len(r[k]) for r in rows) for k in range(5)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5]
                         for r in rows).rstrip()

    def make_arrays(self, rng: np.random.Generator, scale: float = 1.0) -> list[np.ndarray]:
        """Random bf16-valued weights and inputs, zeroed intermediates and outputs (float32)."""
        from llamanb.model.numerics import to_bf16

        out = []
        for a in self.args:
            if a.role in ("weight", "input"):
                out.append(to_bf16(rng.standard_normal(a.shape).astype(np.float32) * scale))
            else:
                out.append(np.zeros(a.shape, np.float32))
        return out

    def check_arrays(self, arrays) -> None:
        """LlamanbError unless there is one float32 array of the right shape per argument."""
        if len(arrays) != len(self.args):
            raise LlamanbError(f"{self.name} takes {len(self.args)} arrays "
                               f"({', '.join(a.name for a in self.args)}), got {len(arrays)}")
        for a, x in zip(self.args, arrays):
            if not isinstance(x, np.ndarray) or x.dtype != np.float32 or tuple(x.shape) != a.shape:
                got = f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}"
                raise LlamanbError(f"{self.name}: argument {a.name} must be a float32 array of "
                                   f"shape {a.shape} (bf16 values), got {got}")

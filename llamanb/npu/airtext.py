"""Reading launches, herds and their buffers out of an MLIR-AIR module's text.

    text --> [Launch(name, herds=[Herd(name, op, cols, rows, l1=[Buffer...])], l2=[Buffer...])]

Just enough of the text for the array model (llamanb.npu.array): the `air.launch` / `air.segment` /
`air.herd` ops in MLIR's generic form (the form this package emits), where an op reads

    "air.herd"(%c8, %c1, %a, %b) <{operandSegmentSizes = array<i32: 0, 2, 2>}> ({ ...body... })
        {sym_name = "rope", llamanb.op = "rope"} : (index, index, ...) -> ()

The herd's size operands are the second operand group; their values come from
`arith.constant N : index`. A buffer is a `memref.alloc` whose memref type carries memory space 2
(L1, inside a herd: one copy per tile) or 1 (L2, in a launch: the mem tiles). A herd outside any
launch (RMSNorm's and add's bare herds) is a launch of its own, as stitching will make it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod

from ..errors import LlamanbError

BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
         "index": 8}
L1_SPACE, L2_SPACE = 2, 1


@dataclass(frozen=True)
class Buffer:
    name: str            # the SSA value, e.g. "%alloc_3"
    shape: tuple
    dtype: str
    space: int           # 2: L1 (a compute tile), 1: L2 (a mem tile)

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * BYTES[self.dtype]


@dataclass(frozen=True)
class Herd:
    name: str
    op: str              # the llamanb.op attribute ("" when absent)
    cols: int            # herd size x: columns of the array
    rows: int            # herd size y: compute rows
    l1: tuple = ()       # Buffers each tile of the herd holds

    @property
    def tiles(self) -> int:
        return self.cols * self.rows

    @property
    def l1_bytes(self) -> int:
        return sum(b.nbytes for b in self.l1)


@dataclass(frozen=True)
class Launch:
    name: str
    herds: tuple = ()
    l2: tuple = ()

    @property
    def l2_bytes(self) -> int:
        return sum(b.nbytes for b in self.l2)


@dataclass
class _Op:
    kind: str            # launch | segment | herd
    start: int
    body: tuple          # (first, last) character offsets of the region
    operands: list
    attrs: str           # properties and attribute dictionary text
    children: list = field(default_factory=list)


_OP = re.compile(r'"air\.(launch|segment|herd)"\(')
_CONST = re.compile(r'(%[\w$.-]+)\s*=\s*(?:arith\.constant\s+(-?\d+)\s*:\s*index'
                    r'|"arith\.constant"\(\)\s*<\{value\s*=\s*(-?\d+)\s*:\s*index\}>)')
_ALLOC = re.compile(r'(%[\w$.-]+)\s*=\s*"?memref\.alloca?"?\(')
_SEGMENTS = re.compile(r"operandSegmentSizes\s*=\s*array<i32:\s*([\d,\s]+)>")


def _close(text: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        depth += (text[j] == open_ch) - (text[j] == close_ch)
        if depth == 0:
            return j
    raise LlamanbError(f"unbalanced {open_ch}{close_ch} in the module text at offset {i}")


def _ops(text: str) -> list[_Op]:
    ops = []
    for m in _OP.finditer(text):
        args_end = _close(text, m.end() - 1, "(", ")")
        operands = [a.strip() for a in text[m.end():args_end].split(",") if a.strip()]
        region = text.find("({", args_end)
        if region < 0:
            raise LlamanbError(f"air.{m.group(1)} at offset {m.start()} has no region")
        body_end = _close(text, region + 1, "{", "}")
        attrs = text[args_end:region]                       # <{properties}>
        k = text.find(")", body_end) + 1                     # past "})"
        while k < len(text) and text[k] in " \t\n":
            k += 1
        if text.startswith("{", k):                          # {attribute dictionary}
            attrs += text[k:_close(text, k, "{", "}") + 1]
        ops.append(_Op(m.group(1), m.start(), (region + 1, body_end), operands, attrs))
    return ops


def _memref(line: str, where: int) -> tuple[tuple, str, int]:
    """(shape, dtype, memory space) of the last memref type in a line."""
    i = line.rfind("memref<")
    if i < 0:
        raise LlamanbError(f"memref.alloc without a memref type at offset {where}")
    inner = line[i + 7:_close(line, i + 6, "<", ">")]
    parts = [p.strip() for p in re.split(r",(?![^<]*>)", inner)]
    dims = parts[0].split("x")
    if any(not d.isdigit() for d in dims[:-1]) or dims[-1] not in BYTES:
        raise LlamanbError(f"cannot size memref<{inner}> (dynamic shape or unknown element type)")
    space = next((int(p.split(":")[0]) for p in parts[1:] if re.fullmatch(r"\d+(\s*:\s*i\d+)?", p)),
                 0)
    return tuple(int(d) for d in dims[:-1]), dims[-1], space


def _attr(attrs: str, name: str) -> str:
    m = re.search(rf'{re.escape(name)}\s*=\s*"([^"]*)"', attrs)
    return m.group(1) if m else ""


def read_launches(text: str) -> list[Launch]:
    """The launches of a module, in text order, with their herds and buffers."""
    ops = _ops(text)
    if not ops:
        raise LlamanbError("no air.launch / air.herd op in generic form found in the module text")
    consts = [(m.start(), m.group(1), int(m.group(2) or m.group(3))) for m in _CONST.finditer(text)]

    def value(name: str, before: int) -> int:
        found = [v for pos, n, v in consts if n == name and pos < before]
        if not found:
            raise LlamanbError(f"herd size {name} is not an arith.constant of index type")
        return found[-1]

    def inside(pos: int, op: _Op) -> bool:
        return op.body[0] <= pos < op.body[1]

    def innermost(pos: int, kind: str):
        enclosing = [o for o in ops if o.kind == kind and inside(pos, o)]
        return max(enclosing, key=lambda o: o.start) if enclosing else None

    buffers = []                                              # (position, Buffer)
    for m in _ALLOC.finditer(text):
        line_end = text.find("\n", m.end())
        shape, dtype, space = _memref(text[m.start():line_end if line_end >= 0 else None], m.start())
        buffers.append((m.start(), Buffer(m.group(1), shape, dtype, space)))

    herds = {}
    for op in (o for o in ops if o.kind == "herd"):
        seg = _SEGMENTS.search(op.attrs)
        if seg is None:
            raise LlamanbError(f"air.herd at offset {op.start} has no operandSegmentSizes")
        deps, nsizes = (int(v) for v in seg.group(1).split(",")[:2])
        sizes = [value(s, op.start) for s in op.operands[deps:deps + nsizes]] + [1, 1]
        l1 = tuple(b for pos, b in buffers if b.space == L1_SPACE and innermost(pos, "herd") is op)
        name = _attr(op.attrs, "sym_name") or f"herd_{len(herds)}"
        herds[op.start] = Herd(name, _attr(op.attrs, "llamanb.op"), sizes[0], sizes[1], l1)

    launches = []
    outer = [o for o in ops if o.kind in ("launch", "herd") and innermost(o.start, "launch") is None]
    for op in outer:                                          # in text order
        if op.kind == "herd":                                  # a bare herd: its own launch
            launches.append(Launch(herds[op.start].name, (herds[op.start],)))
            continue
        mine = tuple(h for pos, h in herds.items() if inside(pos, op))
        l2 = tuple(b for pos, b in buffers if b.space == L2_SPACE and inside(pos, op))
        launches.append(Launch(_attr(op.attrs, "sym_name") or f"launch_{len(launches)}", mine, l2))
    return launches

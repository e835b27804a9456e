"""The launch plan of an NPU module, read back from its MLIR text.

    plan = read_plan(text)            # a single kernel, a bare herd, or a stitched group
    plan.launches[0].operands         # (0, 1, 2): function argument feeding each launch operand
    print(plan.table())               # launch order, argument map, herds, kernels, L1/L2 bytes

What a runtime (or a reader of a stitched ELF) needs to know without trusting the builder: in what
order the launches run, which `%argN` each launch reads or writes (through views such as
memref.collapse_shape), the herd sizes and unrolled segment instances (so the tiles used), the
kernel each herd runs (its `llamanb.op` and any external symbol with its object), and the L1
buffers each tile holds and the L2 buffers its segment holds. A bare herd counts as a launch of
its own (stitching wraps it in one).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from llamanb.npu.compiler.textir import Op, memref_info, read_module

_BYTES = {"bf16": 2, "f32": 4, "i32": 4, "i8": 1}
_VIEWS = {"memref.collapse_shape", "memref.expand_shape", "memref.subview", "memref.cast"}


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: str
    space: int                       # 1: L2 (mem tile), 2: L1 (compute tile)
    dma: str = ""                    # "in", "out" or "in+out": the air.dma_memcpy_nd ops of its
                                     # herd (or segment) that write it / read it; "" when none do

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * _BYTES[self.dtype]


@dataclass(frozen=True)
class HerdPlan:
    sym: str
    op: str                          # llamanb.op: the kernel it runs
    size: tuple[int, int]            # (columns, rows)
    instances: int                   # unrolled segment instances running this herd
    args: tuple                      # function argument (or None) feeding each herd operand
    externs: tuple[tuple[str, str], ...]     # (symbol, object) it calls
    l1: tuple[Buffer, ...]           # what each tile holds
    params: dict

    @property
    def tiles(self) -> int:
        return self.size[0] * self.size[1] * self.instances

    @property
    def l1_bytes(self) -> int:
        return sum(b.nbytes for b in self.l1)


@dataclass(frozen=True)
class LaunchPlan:
    index: int
    sym: str
    sizes: tuple[int, ...]           # the launch's iteration space (() for a bare herd)
    operands: tuple                  # function argument index (or None) per launch operand
    herds: tuple[HerdPlan, ...]
    l2: tuple[Buffer, ...]
    bare: bool

    @property
    def tiles(self) -> int:
        return sum(h.tiles for h in self.herds)

    @property
    def l2_bytes(self) -> int:
        return sum(b.nbytes for b in self.l2)

    @property
    def args(self) -> tuple[int, ...]:
        return tuple(sorted({a for a in self.operands if a is not None}))


@dataclass(frozen=True)
class Plan:
    func: str
    args: tuple[tuple[str, str], ...]        # (name, type) of each function argument
    launches: tuple[LaunchPlan, ...]
    externs: dict                            # symbol -> object (link_with)

    def table(self) -> str:
        rows = [("#", "launch", "iterations", "reads/writes", "herd", "tiles", "kernel",
                 "L1/tile", "L2")]
        for lp in self.launches:
            for k, h in enumerate(lp.herds):
                kern = h.op + "".join(f" @{s} ({o})" for s, o in h.externs)
                herd = f"{h.size[0]}x{h.size[1]}" + (f" x{h.instances}" if h.instances > 1 else "")
                rows.append((str(lp.index) if k == 0 else "", lp.sym if k == 0 else "",
                             "x".join(map(str, lp.sizes)) or "1" if k == 0 else "",
                             " ".join(f"%arg{a}" for a in lp.args) if k == 0 else "", herd,
                             str(h.tiles), kern, f"{h.l1_bytes / 1024:.1f} KB",
                             f"{lp.l2_bytes / 1024:.1f} KB" if k == 0 else ""))
        w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(x) for c, x in zip(r, w)).rstrip() for r in rows)


def _buffers(op: Op, space: int, stop_at_herd: bool) -> tuple[Buffer, ...]:
    out = []
    fed, drained = set(), set()
    stack = [op]
    while stack:
        o = stack.pop()
        if o is not op and stop_at_herd and o.name == "air.herd":
            continue
        if o.name == "memref.alloc":
            shape, dtype, sp = memref_info(o.result_types[0])
            if sp == space:
                out.append(Buffer(o.results[0], shape, dtype, sp))
        if o.name == "air.dma_memcpy_nd":
            segs = o.props["operandSegmentSizes"]
            fed.add(o.operands[segs[0]])                          # the destination
            drained.add(o.operands[sum(segs[:5])])                # the source
        stack.extend(inner for r in o.regions for blk in r for inner in reversed(blk.ops))
    how = {b.name: "+".join(w for w, s in (("in", fed), ("out", drained)) if b.name in s)
           for b in out}
    return tuple(Buffer(b.name, b.shape, b.dtype, b.space, how[b.name]) for b in out)


def _herds(op: Op, origin: dict, instances: int, externs: dict) -> list[HerdPlan]:
    """Herds nested in a launch/segment, with the function arguments their operands come from."""
    found = []
    for inner in (o for r in op.regions for blk in r for o in blk.ops):
        if inner.name in ("memref.collapse_shape", "memref.expand_shape", "memref.cast"):
            origin[inner.results[0]] = origin.get(inner.operands[0])
        if inner.name not in ("air.segment", "air.herd"):
            if inner.regions:
                found += _herds(inner, origin, instances, externs)
            continue
        segs = inner.props["operandSegmentSizes"]
        opds = inner.operands[segs[0] + segs[1]:]
        inner_args = [a for a, _ in inner.body.args][2 * segs[1]:]
        local = dict(origin)
        local.update({a: origin.get(v) for a, v in zip(inner_args, opds)})
        if inner.name == "air.segment":
            sizes = _sizes(inner, origin)
            found += _herds(inner, local, instances * prod(sizes or [1]), externs)
            continue
        calls = sorted({str(o.props["callee"]) for o in inner.walk() if o.name == "func.call"})
        params = {k[len("llamanb."):]: v for k, v in inner.attrs.items()
                  if k.startswith("llamanb.") and k != "llamanb.op"}
        found.append(HerdPlan(str(inner.props.get("sym_name", "")),
                              str(inner.attrs.get("llamanb.op", "")),
                              tuple(_sizes(inner, origin)), instances,
                              tuple(origin.get(v) for v in opds),
                              tuple((c, externs.get(c, "")) for c in calls),
                              _buffers(inner, 2, False), params))
    return found


def _sizes(op: Op, origin: dict) -> list[int]:
    segs = op.props["operandSegmentSizes"]
    return [origin["#const"][v] for v in op.operands[segs[0]:segs[0] + segs[1]]]


def _constants(op_list, table: dict) -> None:
    for o in op_list:
        if o.name == "arith.constant" and o.result_types[0] == "index":
            table[o.results[0]] = int(o.props["value"])
        for r in o.regions:
            for blk in r:
                _constants(blk.ops, table)


def read_plan(text: str) -> Plan:
    """The launch plan of a module in llamanb's NPU form (LlamanbError on malformed text)."""
    mod = read_module(text)
    externs = {s: str(d.attrs.get("link_with", "")) for s, d in mod.externs.items()}
    origin: dict = {name: i for i, (name, _) in enumerate(mod.func.args)}
    origin["#const"] = {}
    _constants(mod.func.body.ops, origin["#const"])
    launches = []
    for op in mod.func.body.ops:
        if op.name in _VIEWS:
            origin[op.results[0]] = origin.get(op.operands[0])
        if op.name not in ("air.launch", "air.herd"):
            continue
        segs = op.props["operandSegmentSizes"]
        opds = op.operands[segs[0] + segs[1]:]
        bare = op.name == "air.herd"
        if bare:
            wrapper = Op("bare", [], [], {}, {}, [[type(op.body)([], [op])]], [], [], op.line)
            herds = _herds(wrapper, origin, 1, externs)
            sizes = ()
        else:
            inner_args = [a for a, _ in op.body.args][2 * segs[1]:]
            local = dict(origin)
            local.update({a: origin.get(v) for a, v in zip(inner_args, opds)})
            herds = _herds(op, local, 1, externs)
            sizes = tuple(_sizes(op, origin))
        launches.append(LaunchPlan(len(launches), str(op.props.get("sym_name", "")), sizes,
                                   tuple(origin.get(v) for v in opds), tuple(herds),
                                   _buffers(op, 1, False), bare))
    return Plan(mod.func.name, tuple(mod.func.args), tuple(launches), externs)

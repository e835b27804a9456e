"""Pieces every kernel builder shares: shape checks, tile choice, the launch/segment/herd nest,
and the elementwise "each tile takes every T-th chunk" loop.
"""
from __future__ import annotations

import contextlib

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.mlir import Body, memref, quote, seg_sizes


def positive(**dims) -> None:
    for k, v in dims.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise LlamanbError(f"{k} must be a positive integer, got {v!r}")


def divides(what: str, n: int, d: int, hint: str = "") -> None:
    """LlamanbError unless d divides n: tiles must cover a dimension exactly."""
    if d <= 0 or n % d:
        more = f"; {hint}" if hint else ""
        raise LlamanbError(f"{what}: {d} does not divide {n}{more}")


def fits(spec):
    """The spec, once the emulated NPU2 array model (llamanb.npu.compiler.array) has placed every launch's
    herds and checked their L1 and L2 buffers: a tile configuration that would not fit is
    rejected here, at build time, as the real compiler would reject it. L1 is counted with
    ping-pong (a second copy of each DMA-fed buffer) unless the spec's compile options omit it."""
    from llamanb.npu.compiler.array import usage

    usage(spec)
    return spec


def herd_shape(herd) -> tuple[int, int]:
    try:
        hx, hy = (int(v) for v in herd)
    except (TypeError, ValueError):
        raise LlamanbError(f"herd must be two positive integers (columns, rows), got {herd!r}")
    positive(herd_x=hx, herd_y=hy)
    return hx, hy


def pick_tile(n: int, cap: int, multiple: int = 1) -> int:
    """The largest divisor of n that is <= cap and a multiple of `multiple` (LlamanbError if none)."""
    for t in range(min(n, cap), 0, -1):
        if n % t == 0 and t % multiple == 0:
            return t
    raise LlamanbError(f"no tile size <= {cap} divides {n} in multiples of {multiple}")


def ddr_type(shape, flat: bool) -> str:
    """A DDR argument's type: [rows, cols] or its flat [rows*cols] view."""
    if flat:
        n = 1
        for d in shape:
            n *= d
        return memref((n,))
    return memref(shape)


def flatten(b: Body, value: str, ty: str) -> str:
    """memref.collapse_shape of a row-major DDR buffer to 1D (free: a view, no data moves)."""
    from llamanb.npu.compiler.textir import memref_info

    shape, dtype, space = memref_info(ty)
    if len(shape) == 1:
        return value
    n = 1
    for d in shape:
        n *= d
    return b.op("memref.collapse_shape", [value], [ty], [memref((n,), dtype, space)],
                props={"reassociation": "[[" + ", ".join(map(str, range(len(shape)))) + "]]"},
                hint="flat")[0]


@contextlib.contextmanager
def launch(b: Body, name: str, sizes: tuple[int, ...], operands, types):
    """air.launch over `sizes` iterations; yields (ids, operand names inside)."""
    cs = [b.const(s) for s in sizes]
    args = [(f"l{'xyz'[i]}", "index") for i in range(len(sizes))]
    args += [(f"ls{'xyz'[i]}", "index") for i in range(len(sizes))]
    args += [(f"l_{k}", t) for k, t in enumerate(types)]
    with b.region_op("air.launch", cs + list(operands), ["index"] * len(cs) + list(types), args,
                     props={"operandSegmentSizes": seg_sizes(0, len(cs), len(operands)),
                            "sym_name": quote(f"{name}_launch")},
                     terminator="air.launch_terminator", isolated=True) as names:
        yield names[:len(sizes)], names[2 * len(sizes):]


@contextlib.contextmanager
def segment(b: Body, name: str, operands, types, sizes: tuple[int, ...] = ()):
    """air.segment (optionally unrolled over `sizes`); yields (ids, operand names inside)."""
    cs = [b.const(s) for s in sizes]
    args = [(f"s{'xyz'[i]}", "index") for i in range(len(sizes))]
    args += [(f"ss{'xyz'[i]}", "index") for i in range(len(sizes))]
    args += [(f"s_{k}", t) for k, t in enumerate(types)]
    with b.region_op("air.segment", cs + list(operands), ["index"] * len(cs) + list(types), args,
                     props={"operandSegmentSizes": seg_sizes(0, len(cs), len(operands)),
                            "sym_name": quote(f"{name}_seg")},
                     terminator="air.segment_terminator", isolated=True) as names:
        yield names[:len(sizes)], names[2 * len(sizes):]


@contextlib.contextmanager
def herd(b: Body, name: str, shape: tuple[int, int], operands, types, op: str,
         link_with: str | None = None, **params):
    """air.herd of shape (columns, rows) tagged llamanb.op=op; yields ((tx, ty), operand names)."""
    cs = [b.const(shape[0]), b.const(shape[1])]
    args = [("tx", "index"), ("ty", "index"), ("hsx", "index"), ("hsy", "index")]
    args += [(f"h_{k}", t) for k, t in enumerate(types)]
    props = {"operandSegmentSizes": seg_sizes(0, 2, len(operands)),
             "sym_name": quote(f"{name}_herd")}
    if link_with:
        props["link_with"] = quote(link_with)
    attrs = {"llamanb.op": quote(op)}
    for k, v in params.items():
        attrs[f"llamanb.{k}"] = v
    with b.region_op("air.herd", cs + list(operands), ["index", "index"] + list(types), args,
                     props=props, attrs=attrs, terminator="air.herd_terminator",
                     isolated=True) as names:
        yield (names[0], names[1]), names[4:]


def tile_id(b: Body, tx: str, ty: str, shape: tuple[int, int]) -> str:
    """The tile's linear index tx * rows + ty (0 .. tiles-1)."""
    return b.affine([(tx, shape[1]), (ty, 1)], hint="tid") if shape[1] > 1 else tx


@contextlib.contextmanager
def chunk_loop(b: Body, tid: str, n_tiles: int, chunk: int, total: int):
    """for i in range(total // (n_tiles * chunk)): offset = (i * n_tiles + tid) * chunk.

    Tile t takes chunks t, t + T, t + 2T, ... of `chunk` elements (or rows): a round-robin split
    that keeps every tile's DMA pattern identical."""
    iters = total // (n_tiles * chunk)
    with b.for_(b.const(0), b.const(iters), b.const(1), hint="it") as it:
        yield b.affine([(it, n_tiles * chunk), (tid, chunk)], hint="off")


@contextlib.contextmanager
def block_loop(b: Body, tid: str, n_tiles: int, chunk: int, total: int):
    """for i in range(total // (n_tiles * chunk)): offset = tid * (total // n_tiles) + i * chunk.

    Tile t owns one contiguous block, elements [t * total/T, (t+1) * total/T), and walks it in
    chunks: upstream's split for its eltwise add (Xilinx/mlir-air programming_examples/llms/shared/
    builders/o_ffn_multi.py:82-137, offset = iv + (tx * herd_y + ty) * chunk_size) and, per launch
    iteration, for its GEMV rows (matrix_vector_multiplication/bf16/matvec.py:154-163)."""
    per = total // n_tiles
    with b.for_(b.const(0), b.const(per // chunk), b.const(1), hint="it") as it:
        yield b.affine([(tid, per), (it, chunk)], hint="off")


def generic(b: Body, ins, in_types, outs, out_types, maps, iterators, body):
    """linalg.generic on memrefs; `body(b, in_elems, out_elems)` returns the values to yield."""
    from llamanb.npu.compiler.textir import memref_info

    elem = [memref_info(t)[1] for t in list(in_types) + list(out_types)]
    props = {"indexing_maps": "[" + ", ".join(f"affine_map<{m}>" for m in maps) + "]",
             "iterator_types": "[" + ", ".join(f"#linalg.iterator_type<{it}>"
                                               for it in iterators) + "]",
             "operandSegmentSizes": seg_sizes(len(ins), len(outs))}
    args = [("e", t) for t in elem]
    with b.region_op("linalg.generic", list(ins) + list(outs), list(in_types) + list(out_types),
                     args, props=props) as names:
        vals = body(b, names[:len(ins)], names[len(ins):])
        b.op("linalg.yield", vals, [elem[len(ins) + i] for i in range(len(vals))])

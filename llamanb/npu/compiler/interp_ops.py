"""Scalar and tensor semantics of the MLIR ops inside NPU kernels, for the emulator.

Every value is a Python int (index, i32), a numpy float32 scalar/array, or a numpy bool array (i1).
A result typed bf16 is rounded to bfloat16 (ties to even) the moment it is produced, so a bf16
store holds exactly what the NPU's bf16 store would. linalg.generic runs vectorised: its body is
evaluated once on whole broadcast arrays, a reduction body `out = out (+|max) f(ins)` as f over the
whole iteration space, reduced along its reduction dimensions in float32.
"""
from __future__ import annotations

import re

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.model.numerics import to_bf16

_F = np.float32
_INT = {"arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
        "arith.muli": lambda a, b: a * b, "arith.divui": lambda a, b: a // b,
        "arith.divsi": lambda a, b: a // b, "arith.floordivsi": lambda a, b: a // b,
        "arith.ceildivsi": lambda a, b: -(-a // b), "arith.remui": lambda a, b: a % b,
        "arith.remsi": lambda a, b: a % b, "arith.minsi": np.minimum, "arith.maxsi": np.maximum,
        "arith.minui": np.minimum, "arith.maxui": np.maximum}
_FLOAT = {"arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
          "arith.divf": np.divide, "arith.maximumf": np.maximum, "arith.minimumf": np.minimum,
          "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin}
_UNARY = {"arith.negf": np.negative, "math.exp": np.exp, "math.sqrt": np.sqrt,
          "math.rsqrt": lambda x: _F(1.0) / np.sqrt(x), "math.absf": np.abs,
          "arith.extf": lambda x: x, "arith.truncf": lambda x: x}
_CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
         5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal}
_CMPF = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal,
         6: np.not_equal}
_REDUCERS = {"arith.addf": np.add, "arith.maximumf": np.maximum, "arith.maxnumf": np.fmax}


def scalar_op(op, vals):
    """The value of a region-free arith/math op, or NotImplemented."""
    n = op.name
    if n == "arith.constant":
        v = op.props["value"]
        return _F(v) if op.result_types[0] in ("f32", "bf16") else int(v)
    if n in _INT:
        return _INT[n](*vals)
    if n in _FLOAT:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return _FLOAT[n](_F(vals[0]) if np.isscalar(vals[0]) else vals[0], vals[1])
    if n in _UNARY:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return _UNARY[n](vals[0])
    if n == "arith.cmpi":
        return _CMPI[op.props["predicate"]](vals[0], vals[1])
    if n == "arith.cmpf":
        return _CMPF[op.props["predicate"]](vals[0], vals[1])
    if n == "arith.select":
        return np.where(vals[0], vals[1], vals[2])
    if n in ("arith.index_cast", "arith.index_castui"):
        return vals[0]
    if n in ("arith.sitofp", "arith.uitofp"):
        return np.asarray(vals[0]).astype(_F)
    return NotImplemented


def round_results(op, results):
    """Round values whose declared type is bf16 (scalars inside bodies, never memrefs)."""
    return [to_bf16(v) if t == "bf16" else v for v, t in zip(results, op.result_types)]


_MAP = re.compile(r"affine_map<\(([^)]*)\)\s*->\s*\(([^)]*)\)>")


def map_dims(text: str) -> tuple[int, list[int]]:
    """'affine_map<(d0, d1, d2) -> (d0, d2)>' -> (3, [0, 2]); only projections are allowed."""
    m = _MAP.fullmatch(str(text).strip())
    if not m:
        raise LlamanbError(f"emulator: unsupported indexing map {text}")
    names = [s.strip() for s in m.group(1).split(",") if s.strip()]
    res = [s.strip() for s in m.group(2).split(",") if s.strip()]
    if any(r not in names for r in res):
        raise LlamanbError(f"emulator: indexing map {text} is not a projection of its dims")
    return len(names), [names.index(r) for r in res]


def run_generic(op, env, evaluate):
    """Execute a linalg.generic. evaluate(op, values_env) runs one body op on arrays."""
    n_in, n_out = op.props["operandSegmentSizes"]
    arrays = [env[o] for o in op.operands]
    maps = [map_dims(m) for m in op.props["indexing_maps"]]
    iters = ["reduction" in str(it) for it in op.props["iterator_types"]]
    rank = len(iters)
    dims = [1] * rank
    for arr, (_, res) in zip(arrays, maps):
        for axis, d in enumerate(res):
            dims[d] = np.shape(arr)[axis]

    def view(arr, res):
        if not res:
            return arr
        v = np.transpose(arr, np.argsort(res))
        return v.reshape([dims[d] if d in res else 1 for d in range(rank)])

    block = op.body
    local = dict(env)
    for (name, _), arr, (_, res) in zip(block.args, arrays, maps):
        local[name] = view(arr, res)
    red_axes = tuple(d for d in range(rank) if iters[d])
    *body_ops, yield_op = block.ops
    combiners = {}
    if red_axes:                                  # out = out (+|max) f(ins): find the combiners
        outs = {name for name, _ in block.args[n_in:]}
        for o in body_ops:
            if o.name in _REDUCERS and any(x in outs for x in o.operands):
                combiners[o.results[0]] = o
    for o in body_ops:
        if o.results and o.results[0] in combiners:
            continue
        if o.name == "linalg.index":
            d = o.props["dim"]
            local[o.results[0]] = np.arange(dims[d]).reshape([-1 if k == d else 1
                                                              for k in range(rank)])
            continue
        evaluate(o, local)
    full = [1 if iters[d] else dims[d] for d in range(rank)] if red_axes else dims
    for k, y in enumerate(yield_op.operands):
        out_name, out_arr, (_, res) = block.args[n_in + k][0], arrays[n_in + k], maps[n_in + k]
        if y in combiners:
            c = combiners[y]
            f = local[next(x for x in c.operands if x != out_name)]
            f = np.broadcast_to(f, dims)
            red = _REDUCERS[c.name].reduce(f, axis=red_axes, keepdims=True, dtype=_F)
            val = _REDUCERS[c.name](local[out_name], red)
            val = round_results(c, [val])[0]
        else:
            val = local[y]
        val = np.broadcast_to(val, full)
        keep = [d for d in range(rank) if d in res]
        val = val.reshape([full[d] for d in keep]) if len(keep) < rank else val
        order = sorted(res)
        out_arr[...] = np.transpose(val, [order.index(d) for d in res])

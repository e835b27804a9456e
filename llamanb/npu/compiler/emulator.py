"""The emulated NPU2: execute a kernel's (or a stitched group's) MLIR text on numpy arrays.

    report = run(spec_or_text, *arrays)      # outputs and intermediates are written in place
    print(report)                            # "emulated NPU2: 1 launch, 8 tiles, ..."

Nothing is taken from the builder: the interpreter walks the module text op by op. Launches run in
order over their iteration space, a segment over its unrolled instances, a herd tile by tile
(column-major: (0,0), (0,1), ... so a cascade's producer runs before its consumer); DMAs copy the
strided element sets they name, L1/L2 buffers are numpy arrays, `func.call` runs the external
kernel, linalg bodies run vectorised (see interp_ops). So a wrong DMA offset or a wrong argument map
in a stitched module changes the numbers, exactly as it would on the device.

External kernels run the g++ host build of the C++ source when one is available
(`llamanb.npu.compiler.extern.kernel`), else its numpy model; the report says which. A declaration may
carry `llamanb.impl = "matvec_bf16"` when it names the same C kernel compiled under another symbol
(upstream's mv_k8192.o trick). Callers (tests) may pass `externs={symbol: function}` with the numpy
signature of llamanb.npu.compiler.extern (inputs -> output) to supply their own.
"""
from __future__ import annotations

import itertools
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.interp_ops import round_results, run_generic, scalar_op
from llamanb.npu.compiler.textir import Module, memref_info, read_module

_NOOPS = {"air.herd_terminator", "air.segment_terminator", "air.launch_terminator", "scf.yield",
          "memref.dealloc", "air.wait_all"}


@dataclass
class EmulatedRun:
    """What one emulated execution did (everything printed about it says "emulated")."""

    func: str
    launches: int = 0
    herds: list = field(default_factory=list)          # (herd sym, (x, y), instances run)
    kernels: dict = field(default_factory=dict)        # extern symbol -> "host build" | "numpy model" | "caller"
    calls: int = 0

    def __str__(self) -> str:
        ks = ", ".join(f"@{k}: {v}" for k, v in self.kernels.items()) or "none"
        hs = ", ".join(f"{s} {x}x{y}" for s, (x, y), _ in self.herds)
        return (f"emulated NPU2 run of @{self.func}: {self.launches} launch(es), herds [{hs}], "
                f"external kernels: {ks}")


# How each external kernel's C arguments (buffers, then int32 sizes) map onto its numpy signature
# in llamanb.npu.compiler.extern (inputs -> output): the sizes in the call decide how much of each L1
# buffer the kernel reads and writes, as they would for the C++.
def _abi_rope(fn, x, lut, y, rows, dim):
    n = rows * dim
    y.reshape(-1)[:n] = fn(x.reshape(-1)[:n].reshape(rows, dim),
                           lut.reshape(-1)[:n].reshape(rows, dim)).reshape(-1)


def _abi_silu(fn, gate, up, out, n):
    out.reshape(-1)[:n] = fn(gate.reshape(-1)[:n], up.reshape(-1)[:n])


def _abi_matvec(fn, a, x, y, m, k):
    y.reshape(-1)[:m] = fn(a.reshape(-1)[:m * k].reshape(m, k), x.reshape(-1)[:k])


C_ABI = {"rope_halfsplit_bf16": _abi_rope, "silu_and_mul_bf16": _abi_silu,
         "matvec_bf16": _abi_matvec}


def extern_impl(symbol: str):
    """(callable taking the C arguments, how) for an external kernel symbol (or its `impl`)."""
    if symbol not in C_ABI:
        raise LlamanbError(f"emulator: no C interface known for external kernel @{symbol}; "
                           f"known: {', '.join(C_ABI)}")
    try:
        from llamanb.npu.compiler import extern
    except ImportError:
        raise LlamanbError(f"no implementation of external kernel @{symbol}: "
                           f"llamanb.npu.compiler.extern (host builds and numpy models) is not available")
    k = extern.kernel(symbol)
    how = "host build" if k.how.startswith("host build") else "numpy model"
    return (lambda *args: C_ABI[symbol](k.fn, *args)), how


class _Machine:
    def __init__(self, mod: Module, externs: dict | None):
        self.mod = mod
        self.override = externs or {}
        self.impls: dict = {}
        self.channels: dict = defaultdict(deque)
        self.report = EmulatedRun(mod.func.name)

    # ---- blocks and ops
    def block(self, block, env):
        for op in block.ops:
            self.op(op, env)

    def op(self, op, env):
        name = op.name
        if name in _NOOPS:
            return
        handler = getattr(self, "_" + name.replace(".", "_"), None)
        if handler is not None:
            return handler(op, env)
        vals = [env[o] for o in op.operands]
        res = scalar_op(op, vals)
        if res is NotImplemented:
            raise LlamanbError(f"emulator: op '{name}' (line {op.line}) is not supported")
        env.update(zip(op.results, round_results(op, [res])))

    def _hierarchy(self, op, env, kind):
        segs = op.props["operandSegmentSizes"]
        n_sizes = segs[1]
        vals = [env[o] for o in op.operands[segs[0]:]]
        sizes, operands = [int(v) for v in vals[:n_sizes]], vals[n_sizes:]
        args = [a for a, _ in op.body.args]
        count = 0
        for ids in itertools.product(*[range(s) for s in sizes]):
            local = dict(zip(args, list(ids) + sizes + operands))          # isolated from above
            self.block(op.body, local)
            count += 1
        return sizes, count

    def _air_launch(self, op, env):
        self.report.launches += 1
        self._hierarchy(op, env, "launch")

    def _air_segment(self, op, env):
        self._hierarchy(op, env, "segment")

    def _air_herd(self, op, env):
        sizes, count = self._hierarchy(op, env, "herd")
        if not any(s == op.props.get("sym_name") for s, _, _ in self.report.herds):
            self.report.herds.append((op.props.get("sym_name", "?"), tuple(sizes), count))

    # ---- memory
    def _memref_alloc(self, op, env):
        shape, dtype, _ = memref_info(op.result_types[0])
        env[op.results[0]] = np.zeros(shape, np.int32 if dtype.startswith("i") else np.float32)

    def _memref_collapse_shape(self, op, env):
        shape, _, _ = memref_info(op.result_types[0])
        env[op.results[0]] = _view(env[op.operands[0]], shape)

    _memref_expand_shape = _memref_collapse_shape

    def _air_dma_memcpy_nd(self, op, env):
        segs = op.props["operandSegmentSizes"]
        vals = [env[o] for o in op.operands]
        k = segs[0]
        dst = vals[k]
        d = vals[k + 1:k + 1 + sum(segs[2:5])]
        k += 1 + sum(segs[2:5])
        src = vals[k]
        s = vals[k + 1:]
        di = _addresses(dst, d[:segs[2]], d[segs[2]:segs[2] + segs[3]], d[segs[2] + segs[3]:], op)
        si = _addresses(src, s[:segs[6]], s[segs[6]:segs[6] + segs[7]], s[segs[6] + segs[7]:], op)
        if di.size != si.size:
            raise LlamanbError(f"emulator: DMA on line {op.line} moves {si.size} elements into "
                               f"{di.size}")
        dst.reshape(-1)[di] = src.reshape(-1)[si]

    def _air_channel_put(self, op, env):
        segs = op.props["operandSegmentSizes"]
        vals = [env[o] for o in op.operands[segs[0]:]]
        idx, src, rest = tuple(vals[:segs[1]]), vals[segs[1]], vals[segs[1] + 1:]
        if rest:
            raise LlamanbError(f"emulator: channel.put with a strided view (line {op.line})")
        self.channels[(op.props["chan_name"], idx)].append(src.copy())

    def _air_channel_get(self, op, env):
        segs = op.props["operandSegmentSizes"]
        vals = [env[o] for o in op.operands[segs[0]:]]
        idx, dst = tuple(vals[:segs[1]]), vals[segs[1]]
        q = self.channels[(op.props["chan_name"], idx)]
        if not q:
            raise LlamanbError(f"emulator: channel @{op.props['chan_name']}{list(idx)} is empty "
                               f"at line {op.line} (a get runs before its put)")
        dst[...] = q.popleft().reshape(dst.shape)

    # ---- control flow and compute
    def _scf_for(self, op, env):
        lb, ub, step = (int(env[o]) for o in op.operands[:3])
        iv = op.body.args[0][0]
        local = dict(env)
        for i in range(lb, ub, step):
            local[iv] = i
            self.block(op.body, local)

    def _scf_if(self, op, env):
        region = op.regions[0] if bool(env[op.operands[0]]) else op.regions[1]
        for blk in region:
            self.block(blk, dict(env))

    def _linalg_generic(self, op, env):
        run_generic(op, env, self.op)

    def _func_call(self, op, env):
        sym = str(op.props["callee"])
        if sym not in self.mod.externs:
            raise LlamanbError(f"emulator: call to undeclared @{sym} (line {op.line})")
        if sym not in self.impls:
            impl = str(self.mod.externs[sym].attrs.get("llamanb.impl", sym))
            if impl in self.override:
                fn = self.override[impl]
                self.impls[sym] = (lambda *a, fn=fn, impl=impl: C_ABI[impl](fn, *a), "caller")
            else:
                self.impls[sym] = extern_impl(impl)
            self.report.kernels[sym] = self.impls[sym][1]
        self.impls[sym][0](*[env[o] for o in op.operands])
        self.report.calls += 1


def _view(arr: np.ndarray, shape) -> np.ndarray:
    v = arr.reshape(shape)
    if not np.shares_memory(v, arr):
        raise LlamanbError("emulator: a reshape of a non-contiguous buffer would copy it")
    return v


def _addresses(buf, offsets, sizes, strides, op) -> np.ndarray:
    """Flat element indices named by an (offsets, sizes, strides) access pattern."""
    if not sizes:
        return np.arange(buf.size)
    if not (len(offsets) == len(sizes) == len(strides)):
        raise LlamanbError(f"emulator: DMA on line {op.line} has unequal offset/size/stride lists")
    idx = np.zeros((), np.int64)
    for o, n, s in zip(offsets, sizes, strides):
        idx = idx[..., None] + (int(o) + np.arange(int(n))) * int(s)
    idx = idx.reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= buf.size):
        raise LlamanbError(f"emulator: DMA on line {op.line} reaches element {int(idx.max())} of "
                           f"a {buf.size}-element buffer")
    return idx


def run(spec_or_text, *arrays, externs: dict | None = None) -> EmulatedRun:
    """Execute the module on `arrays` (one float32 C-contiguous array per function argument)."""
    text = getattr(spec_or_text, "text", spec_or_text)
    if hasattr(spec_or_text, "check_arrays"):
        spec_or_text.check_arrays(arrays)
    mod = read_module(text)
    if len(arrays) != len(mod.func.args):
        raise LlamanbError(f"@{mod.func.name} takes {len(mod.func.args)} arrays, got {len(arrays)}")
    env = {}
    for (name, ty), a in zip(mod.func.args, arrays):
        shape, _, _ = memref_info(ty)
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != shape \
                or not a.flags.c_contiguous:
            raise LlamanbError(f"@{mod.func.name}: {name} must be a C-contiguous float32 array "
                               f"of shape {shape}, got {getattr(a, 'dtype', type(a))} "
                               f"{getattr(a, 'shape', '')}")
        env[name] = a
    m = _Machine(mod, externs)
    m.block(mod.func.body, env)
    return m.report

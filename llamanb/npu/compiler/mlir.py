"""Writing MLIR-AIR modules as text: types, generic ops, SSA names, the module shell.

The form every NPU module in llamanb takes (builders emit it, stitching combines it, the plan
reader and the emulator read it back, upstream MLIR's parser verifies it):

    module {
      "air.channel"() <{channel_type = "npu_cascade", size = [4, 3], sym_name = "fa_cascade"}> : () -> ()
      func.func private @rope_halfsplit_bf16(memref<64x64xbf16, 2 : i32>, ..., i32, i32) attributes {link_with = "rope.o", llvm.emit_c_interface}
      func.func @rope(%arg0: memref<128x576xbf16>, %arg1: memref<128x576xbf16>, %arg2: memref<128x576xbf16>) {
        %c1 = "arith.constant"() <{value = 1 : index}> : () -> index
        "air.launch"(%c1, %c1, %arg0, %arg1, %arg2) <{operandSegmentSizes = array<i32: 0, 2, 3>, sym_name = "rope_launch"}> ({
        ^bb0(%lx: index, %ly: index, %lsx: index, %lsy: index, %l_x: memref<...>, ...):
          "air.segment"(...) <{operandSegmentSizes = array<i32: 0, 0, 3>, sym_name = "rope_seg"}> ({
          ^bb0(%s_x: memref<...>, ...):
            "air.herd"(%c8, %c1_0, %s_x, ...) <{operandSegmentSizes = array<i32: 0, 2, 3>, sym_name = "rope_herd", link_with = "rope.o"}> ({
            ^bb0(%tx: index, %ty: index, %hsx: index, %hsy: index, %h_x: memref<...>, ...):
              ... "memref.alloc" (L1: memory space 2 : i32), "air.dma_memcpy_nd", "scf.for",
              "func.call"(...) <{callee = @rope_halfsplit_bf16}> : (...) -> () ...
              "air.herd_terminator"() : () -> ()
            }) {llamanb.op = "rope"} : (index, index, memref<...>, ...) -> ()
            "air.segment_terminator"() : () -> ()
          }) : (memref<...>, ...) -> ()
          "air.launch_terminator"() : () -> ()
        }) : (index, index, memref<...>, ...) -> ()
        return
      }
    }

Rules (what readers of this text may rely on):
  - The shell is pretty-printed: `module {`, one `func.func private @sym(types) attributes {link_with =
    "x.o", ...}` line per external kernel, one public `func.func @name(%arg0: T0, %arg1: T1, ...) {`
    whose arguments are DDR buffers `memref<...xbf16>` (no memory space), its body, `return`, `}`.
    Module-level channel declarations, if any, are generic `"air.channel"` lines before the decls.
  - EVERY op in the function body is in MLIR's generic form ("dialect.op"(operands) <{properties}>
    ({regions}) {attributes} : (operand types) -> result types), one op per line; a region opens
    with `({` at the end of its op's line, each block starts with a `^bbN(args):` line and the region
    closes with a line starting `})`. Upstream MLIR parses AIR ops only in generic form without the
    AIR dialect; generic form for the rest keeps one grammar for everything that reads the text.
  - AIR hierarchy ops carry their inherent attributes as properties: `operandSegmentSizes`
    (async dependencies, sizes, operands), `sym_name`, and for herds `link_with` when they call an
    external kernel. Their block arguments are ids (one per size), sizes, then one per operand, as
    mlir-air defines them. They are isolated from above: constants are defined inside each level.
  - Discardable attributes on each herd: `llamanb.op = "<kind>"` (rmsnorm, gemm, gemv, rope,
    silu_and_mul, flash_attn, add) plus the `llamanb.*` scalars its semantics need (eps, causal...).
  - L2 buffers are `memref<..., 1 : i32>`, L1 buffers `memref<..., 2 : i32>` (mlir-air's integer
    memory spaces); all allocated with "memref.alloc" inside the segment (L2) or herd (L1).
  - DMA: "air.dma_memcpy_nd"(dst, dst offsets, sizes, strides, src, src offsets, sizes, strides)
    with operandSegmentSizes [0, 1, n, n, n, 1, m, m, m]; an empty list means the whole buffer.
    Offsets and strides count elements: element (i0, i1, ..) sits at sum((off_k + i_k) * stride_k).
  - SSA names are unique across the whole function (so a stitcher may prefix them blindly), and
    symbol names (`sym_name`, channels) are plain strings; external kernel symbols are `@sym`.
  - A bare `"air.herd"` directly in the function body is allowed (RMSNorm and eltwise add, as
    upstream builds them); a stitcher wraps it in launch -> segment before compiling.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

L3, L2, L1 = 0, 1, 2          # mlir-air memory spaces: DDR (default), mem tile, compute tile


def memref(shape, dtype: str = "bf16", space: int = L3) -> str:
    """memref<64x576xbf16, 2 : i32>: row-major, static shape; space 0 is written without a space."""
    dims = "x".join(str(int(d)) for d in shape)
    body = f"{dims}x{dtype}" if dims else dtype
    return f"memref<{body}>" if space == L3 else f"memref<{body}, {space} : i32>"


def seg_sizes(*counts: int) -> str:
    """The operandSegmentSizes property value: array<i32: 0, 2, 3>."""
    return "array<i32: " + ", ".join(str(int(c)) for c in counts) + ">"


def quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def f32_attr(x: float) -> str:
    """A float attribute MLIR reads back to the same float32 (repr of the value, then the type)."""
    import numpy as np

    v = np.float32(x)
    if not np.isfinite(v):
        return f"0x{int(v.view(np.uint32)):08X} : f32"
    return f"{float(v):.9e} : f32"          # 9 significant digits: float32 round-trips


def attr_dict(d: dict) -> str:
    """{a = 1, b = "x"}: values are already MLIR attribute text (use quote()/seg_sizes())."""
    return ", ".join(f"{k} = {v}" for k, v in d.items())


@dataclass(frozen=True)
class Extern:
    """An external kernel: its C symbol, the object it lives in and its argument types."""

    symbol: str
    link_with: str
    arg_types: tuple[str, ...]
    impl: str = ""           # the C kernel it is, when compiled under another symbol

    def decl(self) -> str:
        impl = f", llamanb.impl = {quote(self.impl)}" if self.impl and self.impl != self.symbol \
            else ""
        return (f"func.func private @{self.symbol}({', '.join(self.arg_types)}) attributes "
                f"{{link_with = {quote(self.link_with)}, llvm.emit_c_interface{impl}}}")


class Body:
    """Lines of a function body in generic form, with unique SSA names and per-scope constants.

        b = Body(n_args=3)                    # %arg0 .. %arg2 are the function arguments
        c8 = b.const(8)                       # %c8, defined once per isolated scope
        with b.region_op("air.herd", ...) as args: ...   # opens ({ ^bb0(...):  ... })
    """

    def __init__(self, n_args: int = 0, indent: int = 4):
        self.lines: list[str] = []
        self._indent = indent
        self._used = {f"%arg{i}" for i in range(n_args)}
        self._scopes: list[dict] = [{}]            # constant caches; an isolated op starts afresh

    # ---- names and lines
    def name(self, hint: str) -> str:
        base = "%" + hint
        cand, k = base, 0
        while cand in self._used:
            k += 1
            cand = f"{base}_{k}"
        self._used.add(cand)
        return cand

    def line(self, text: str) -> None:
        self.lines.append(" " * self._indent + text)

    def const(self, value, ty: str = "index") -> str:
        """A constant visible in the current scope (re-emitted inside each isolated region)."""
        key = (value, ty)
        for scope in reversed(self._scopes):
            if key in scope:
                return scope[key]
            if scope.get("__isolated__"):
                break
        if ty == "f32":
            hint, text = "cst", f32_attr(value)
        else:
            hint = f"c{value}" if value >= 0 else f"cm{-value}"
            hint = hint if ty == "index" else f"{hint}_{ty}"
            text = f"{int(value)} : {ty}"
        res = self.name(hint)
        self.line(f'{res} = "arith.constant"() <{{value = {text}}}> : () -> {ty}')
        self._scopes[-1][key] = res
        return res

    # ---- ops
    def op(self, name: str, operands=(), types=(), results=(), props=None, attrs=None,
           hint: str = "v") -> list[str]:
        """One region-free op; returns its result names (len(results) of them)."""
        res = [self.name(hint if len(results) == 1 else f"{hint}{i}") for i in range(len(results))]
        lhs = (", ".join(res) + " = ") if res else ""
        self.line(lhs + _generic(name, operands, props) + _tail(attrs, types, results))
        return res

    @contextlib.contextmanager
    def region_op(self, name: str, operands=(), types=(), block_args=(), props=None, attrs=None,
                  terminator: str | None = None, isolated: bool = False):
        """An op with one single-block region. block_args: [(hint, type)]; yields their names."""
        self.line(_generic(name, operands, props) + " ({")
        names = [self.name(h) for h, _ in block_args]
        sig = ", ".join(f"{n}: {t}" for n, (_, t) in zip(names, block_args))
        self.line(f"^bb0({sig}):" if sig else "^bb0:")
        self._indent += 2
        self._scopes.append({"__isolated__": True} if isolated else {})
        yield names
        if terminator:
            self.line(f'"{terminator}"() : () -> ()')
        self._scopes.pop()
        self._indent -= 2
        self.line("})" + _tail(attrs, types, ()))

    def dma(self, dst: str, dst_type: str, src: str, src_type: str,
            dst_ofs=(), dst_sizes=(), dst_strides=(), src_ofs=(), src_sizes=(), src_strides=()):
        """air.dma_memcpy_nd; offsets/sizes/strides are SSA index values (empty: whole buffer)."""
        d, s = list(dst_ofs) + list(dst_sizes) + list(dst_strides), \
            list(src_ofs) + list(src_sizes) + list(src_strides)
        segs = seg_sizes(0, 1, len(dst_ofs), len(dst_sizes), len(dst_strides),
                         1, len(src_ofs), len(src_sizes), len(src_strides))
        self.op("air.dma_memcpy_nd", [dst, *d, src, *s],
                [dst_type, *["index"] * len(d), src_type, *["index"] * len(s)],
                props={"operandSegmentSizes": segs})

    def alloc(self, ty: str, hint: str) -> str:
        return self.op("memref.alloc", results=[ty], props={"operandSegmentSizes": seg_sizes(0, 0)},
                       hint=hint)[0]

    def dealloc(self, buf: str, ty: str) -> None:
        self.op("memref.dealloc", [buf], [ty])

    def arith(self, name: str, a: str, b: str, ty: str = "index", hint: str = "i") -> str:
        return self.op(f"arith.{name}", [a, b], [ty, ty], [ty], hint=hint)[0]

    def affine(self, terms: list[tuple[str, int]], const: int = 0, hint: str = "i") -> str:
        """sum(value * k) + const on index values, as arith.muli/addi."""
        acc = None
        for v, k in terms:
            t = v if k == 1 else self.arith("muli", v, self.const(k), hint=hint)
            acc = t if acc is None else self.arith("addi", acc, t, hint=hint)
        if acc is None:
            return self.const(const)
        return acc if const == 0 else self.arith("addi", acc, self.const(const), hint=hint)

    @contextlib.contextmanager
    def for_(self, lb: str, ub: str, step: str, hint: str = "i"):
        """scf.for %i = lb to ub step step (no iteration arguments)."""
        with self.region_op("scf.for", [lb, ub, step], ["index"] * 3, [(hint, "index")],
                            terminator="scf.yield") as (iv,):
            yield iv

    @contextlib.contextmanager
    def if_(self, cond: str):
        """scf.if %cond { ... } with an empty else region."""
        self.line(f'"scf.if"({cond}) ({{')
        self.line("^bb0:")
        self._indent += 2
        self._scopes.append({})
        yield
        self.line('"scf.yield"() : () -> ()')
        self._scopes.pop()
        self._indent -= 2
        self.line("}, {")
        self.line("}) : (i1) -> ()")

    def text(self) -> str:
        return "\n".join(self.lines)


def _generic(name: str, operands, props) -> str:
    p = f" <{{{attr_dict(props)}}}>" if props else ""
    return f'"{name}"({", ".join(operands)}){p}'


def _tail(attrs, types, results) -> str:
    a = f" {{{attr_dict(attrs)}}}" if attrs else ""
    r = results[0] if len(results) == 1 else "(" + ", ".join(results) + ")"
    return f"{a} : ({', '.join(types)}) -> {r}"


def module_text(func_name: str, arg_types: list[str], body: Body, externs=(), channels=()) -> str:
    """Assemble the module: channel lines, extern decls, the public function over %arg0..%argN."""
    out = ["module {"]
    out += ["  " + c for c in channels]
    seen = {}
    for e in externs:
        if e.symbol in seen and seen[e.symbol] != e:
            from llamanb.errors import LlamanbError
            raise LlamanbError(f"external kernel @{e.symbol} declared twice with different types; "
                               f"give one variant another symbol (as upstream's mv_k8192.o does)")
        if e.symbol not in seen:
            seen[e.symbol] = e
            out.append("  " + e.decl())
    sig = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(arg_types))
    out.append(f"  func.func @{func_name}({sig}) {{")
    out.append(body.text())
    out.append("    return")
    out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"

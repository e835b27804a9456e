"""Reading an NPU module's text back into a tree of ops, without MLIR installed.

The modules follow the form in `llamanb.npu.compiler.mlir` (a pretty shell, generic ops inside), so one small
recursive-descent reader covers them all:

    m = read_module(text)
    m.func.name, m.func.args          # 'rmsnorm', [('%arg0', 'memref<128x576xbf16>'), ...]
    m.externs['rope_halfsplit_bf16']  # Decl(symbol, arg_types, attrs={'link_with': 'rope.o', ...})
    for op in m.func.body.walk(): op.name, op.operands, op.props, op.attrs, op.regions

Attribute values come back as Python values: ints, floats (bit-exact for hex float literals),
strings, lists, `Sym('name')` for @references and `Raw('affine_map<...>')` for the rest.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from llamanb.errors import LlamanbError


class Sym(str):
    """A symbol reference @name (the string is the name)."""


class Raw(str):
    """An attribute kept as text: affine_map<...>, #linalg.iterator_type<parallel>, ..."""


@dataclass
class Block:
    args: list[tuple[str, str]]
    ops: list["Op"]


@dataclass
class Op:
    name: str
    results: list[str]
    operands: list[str]
    props: dict
    attrs: dict
    regions: list[list[Block]]
    operand_types: list[str]
    result_types: list[str]
    line: int

    def walk(self):
        yield self
        for region in self.regions:
            for block in region:
                for op in block.ops:
                    yield from op.walk()

    @property
    def body(self) -> Block:
        return self.regions[0][0]


@dataclass
class Decl:
    symbol: str
    arg_types: list[str]
    attrs: dict


@dataclass
class Func:
    name: str
    args: list[tuple[str, str]]
    body: Block

    def walk(self):
        for op in self.body.ops:
            yield from op.walk()


@dataclass
class Module:
    func: Func
    externs: dict[str, Decl] = field(default_factory=dict)
    top_ops: list[Op] = field(default_factory=list)        # module-level generic ops (channels)


def memref_info(ty: str) -> tuple[tuple[int, ...], str, int]:
    """'memref<64x576xbf16, 2 : i32>' -> ((64, 576), 'bf16', 2)."""
    m = re.fullmatch(r"memref<([^,>]*)(?:,\s*(\d+)\s*(?::\s*i\d+)?)?>", ty.strip())
    if not m:
        raise LlamanbError(f"not a static memref type: {ty}")
    *dims, dtype = m.group(1).split("x")
    return tuple(int(d) for d in dims), dtype, int(m.group(2) or 0)


_IDENT = re.compile(r"[A-Za-z_][\w.$-]*")
_SSA = re.compile(r"%[\w.$-]+(?:#\d+)?")
_NUM = re.compile(r"-?(?:0x[0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


class _Reader:
    def __init__(self, text: str):
        self.s, self.i = text, 0
        self.aliases: dict[str, object] = {}
        self._at = (0, 1)                        # (offset, line) last counted: lines grow forward

    # ---- low level
    def ws(self):
        s = self.s
        while self.i < len(s):
            if s[self.i].isspace():
                self.i += 1
            elif s.startswith("//", self.i):
                self.i = s.find("\n", self.i) if "\n" in s[self.i:] else len(s)
            else:
                break

    def peek(self, tok: str) -> bool:
        self.ws()
        return self.s.startswith(tok, self.i)

    def eat(self, tok: str) -> bool:
        if self.peek(tok):
            self.i += len(tok)
            return True
        return False

    def expect(self, tok: str):
        if not self.eat(tok):
            self.fail(f"expected '{tok}'")

    def match(self, rx: re.Pattern, what: str) -> str:
        self.ws()
        m = rx.match(self.s, self.i)
        if not m:
            self.fail(f"expected {what}")
        self.i = m.end()
        return m.group(0)

    def line(self) -> int:
        at, n = self._at
        if self.i < at:
            at, n = 0, 1
        n += self.s.count("\n", at, self.i)
        self._at = (self.i, n)
        return n

    def fail(self, msg: str):
        near = self.s[self.i:self.i + 40].split("\n")[0]
        raise LlamanbError(f"MLIR text, line {self.line()}: {msg} near '{near}'")

    def balanced(self) -> str:
        """Text from here through the matching '>' of the '<' that starts it."""
        start, depth = self.i, 0
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "-" and self.s.startswith("->", self.i):
                self.i += 2
                continue
            depth += c in "<([{"
            depth -= c in ">)]}"
            self.i += 1
            if depth == 0:
                return self.s[start:self.i]
        self.fail("unbalanced brackets")

    # ---- types and attributes
    def type(self) -> str:
        name = self.match(_IDENT, "a type")
        if self.s.startswith("<", self.i):
            name += self.balanced()
        return re.sub(r"\s+", " ", name)

    def type_list(self) -> list[str]:
        self.expect("(")
        out = []
        while not self.eat(")"):
            out.append(self.type())
            self.eat(",")
        return out

    def attr(self):
        self.ws()
        c = self.s[self.i]
        if c == '"':
            m = re.compile(r'"((?:[^"\\]|\\.)*)"').match(self.s, self.i)
            self.i = m.end()
            return m.group(1).replace('\\"', '"').replace("\\\\", "\\")
        if c == "@":
            self.i += 1
            return Sym(self.match(_IDENT, "a symbol"))
        if c == "[":
            self.i += 1
            out = []
            while not self.eat("]"):
                out.append(self.attr())
                self.eat(",")
            return out
        if c == "{":
            self.i += 1
            return self.entries("}")
        if c == "#":
            start = self.i
            self.i += 1
            self.match(_IDENT, "an attribute name")
            if self.s.startswith("<", self.i):
                self.balanced()
            text = self.s[start:self.i]
            return self.aliases.get(text, Raw(text))
        if self.s.startswith("array<", self.i):
            body = self.balanced_from("array")
            nums = body[len("array<"):-1].split(":", 1)[1] if ":" in body else ""
            return [int(x) for x in nums.split(",") if x.strip()]
        if self.s.startswith(("true", "false"), self.i):
            return self.match(re.compile(r"true|false"), "bool") == "true"
        if c == "-" or c.isdigit():
            num = self.match(_NUM, "a number")
            ty = self.type() if self.eat(":") else "i64"
            if num.startswith("0x") and ty.startswith("f"):
                return struct.unpack("<f", struct.pack("<I", int(num, 16)))[0]
            return float(num) if ty.startswith(("f", "bf")) else int(num, 0)
        start = self.i                                  # affine_map<...>, dense<...>, unit, ...
        self.match(_IDENT, "an attribute")
        if self.s.startswith("<", self.i):
            self.balanced()
        return Raw(self.s[start:self.i])

    def balanced_from(self, word: str) -> str:
        start = self.i
        self.i += len(word)
        self.balanced()
        return self.s[start:self.i]

    def entries(self, close: str) -> dict:
        out = {}
        while not self.eat(close):
            key = self.match(_IDENT, "an attribute name")
            out[key] = self.attr() if self.eat("=") else True
            self.eat(",")
        return out

    # ---- ops, blocks, regions
    def op(self) -> Op:
        line = self.line()
        results = []
        if self.peek("%"):
            results.append(self.match(_SSA, "a result"))
            while self.eat(","):
                results.append(self.match(_SSA, "a result"))
            self.expect("=")
        self.ws()
        if not self.peek('"'):
            self.fail("expected a generic op (\"dialect.name\"(...)); only the shell is pretty")
        name = self.attr()
        self.expect("(")
        operands = []
        while not self.eat(")"):
            operands.append(self.match(_SSA, "an operand"))
            self.eat(",")
        props = self.entries("}>") if self.eat("<{") else {}
        regions = []
        if self.peek("("):
            self.expect("(")
            while not self.eat(")"):
                regions.append(self.region())
                self.eat(",")
        attrs = self.entries("}") if self.eat("{") else {}
        self.expect(":")
        operand_types = self.type_list()
        self.expect("->")
        result_types = self.type_list() if self.peek("(") else [self.type()]
        if len(operand_types) != len(operands) or len(result_types) != len(results):
            self.fail(f"'{name}' lists {len(operands)} operands / {len(results)} results but "
                      f"{len(operand_types)} / {len(result_types)} types")
        return Op(name, results, operands, props, attrs, regions, operand_types, result_types, line)

    def block_args(self) -> list[tuple[str, str]]:
        args = []
        if self.eat("("):
            while not self.eat(")"):
                n = self.match(_SSA, "a block argument")
                self.expect(":")
                args.append((n, self.type()))
                self.eat(",")
        return args

    def region(self) -> list[Block]:
        self.expect("{")
        blocks = []
        while not self.eat("}"):
            args = []
            if self.eat("^"):
                self.match(_IDENT, "a block label")
                args = self.block_args()
                self.expect(":")
            ops = []
            while not (self.peek("}") or self.peek("^")):
                ops.append(self.op())
            blocks.append(Block(args, ops))
        return blocks

    # ---- the pretty shell
    def module(self) -> Module:
        while self.eat("#"):                                    # #map = affine_map<...> aliases
            key = "#" + self.match(_IDENT, "an alias")
            self.expect("=")
            self.aliases[key] = self.attr()
        self.expect("module")
        if self.eat("attributes"):
            self.expect("{")
            self.entries("}")
        self.expect("{")
        mod, func = Module(func=None), None
        while not self.eat("}"):
            if self.eat("func.func"):
                if self.eat("private"):
                    sym = self.match(re.compile(r"@[\w.$-]+"), "a symbol")[1:]
                    types = self.type_list()
                    attrs = {}
                    if self.eat("attributes"):
                        self.expect("{")
                        attrs = self.entries("}")
                    mod.externs[sym] = Decl(sym, types, attrs)
                    continue
                if func is not None:
                    self.fail("one public function per module")
                func = self.func()
            else:
                mod.top_ops.append(self.op())
        if func is None:
            self.fail("no public func.func in the module")
        mod.func = func
        return mod

    def func(self) -> Func:
        name = self.match(re.compile(r"@[\w.$-]+"), "a function name")[1:]
        args = self.block_args()
        if self.eat("attributes"):
            self.expect("{")
            self.entries("}")
        self.expect("{")
        ops = []
        while not (self.peek("return") or self.peek('"func.return"')):
            ops.append(self.op())
        if not self.eat("return"):
            self.op()
        self.expect("}")
        return Func(name, args, Block(args, ops))


def read_module(text: str) -> Module:
    """Parse a module in llamanb's NPU form (see llamanb.npu.compiler.mlir); LlamanbError on bad text."""
    r = _Reader(text)
    mod = r.module()
    r.ws()
    if r.i != len(r.s):
        r.fail("text after the module")
    return mod

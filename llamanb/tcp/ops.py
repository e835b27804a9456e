"""The vocabulary of a TCP program: named axes and the few kinds of op a Llama needs.

Furiosa's TCP programming book (furiosa-ai, furiosa-opt book, "Transformer Architecture") writes
Llama as a chain of einsums over *named* axes, plus gathers, elementwise (vector) ops and moves
between HBM and the on-chip data memory (DM). This module holds that vocabulary as data:

    axis names   B s_in s s_max h_q h_kv G d_k d_k' f r D F V      (AXES: name -> einsum letter)
    Op           one step: its kind, operands with their axes, result axes, the engine, notes

    kind      what it does                                 who runs it (the chapter's words)
    gather    rows of a table picked by an index tensor    Tensor DMA
    einsum    broadcast-multiply + reduce over named axes  Contraction Engine (+ reducers)
    vector    elementwise / row reductions (fn names it)   Vector Engine
    view      the same bytes under other axes (a no-op)    nobody
    store     a tensor written into the KV cache in HBM    Tensor DMA
    slice     the last row of each sequence                parallel copy (or a view)
    host      sampling, after logits leave the chip        host CPU

An einsum's subscripts and its FLOPs are *derived* from the axis names: 2 FLOPs (a multiply and
an add) per point of the product of every axis that occurs, the llamanb.model.flops convention. A view
is checked to be a pure reshape (axes only split or merged in order, never transposed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from llamanb.errors import LlamanbError

# Named axes -> einsum letters. f and r are the input and output member of a RoPE pair (both 2).
AXES = {"B": "b", "s_in": "i", "s": "j", "s_max": "t", "h_q": "q", "h_kv": "k", "G": "g",
        "d_k": "e", "d_k'": "p", "f": "f", "r": "r", "D": "m", "F": "n", "V": "v"}
# Composite axes: what a view may split them into (in memory order).
SPLITS = {"h_q": ("h_kv", "G"), "d_k": ("d_k'", "f")}
KINDS = ("gather", "einsum", "vector", "view", "store", "slice", "host")
VECTOR_FNS = ("rms_norm", "scale", "causal_mask", "softmax", "add", "silu_mul")

Axes = tuple[str, ...]


@dataclass(frozen=True)
class Op:
    name: str                     # "q_proj", "attn_scores", ... (llamanb.model.flops names where they exist)
    kind: str                     # one of KINDS
    out: str                      # the result's name
    out_axes: Axes
    args: tuple[str, ...]         # operand names (weights are "w_*"; "kv_cache_K/V" live in HBM)
    arg_axes: tuple[Axes, ...]
    engine: str                   # Tensor DMA, Contraction Engine, Vector Engine, parallel copy, host, none
    section: str = ""             # the chapter's section number
    stated: bool = True           # False where the chapter names no engine and we inferred it
    fn: str = ""                  # for vector ops: one of VECTOR_FNS
    moves: str = ""               # what crosses between HBM and DM
    note: str = ""                # where the chapter is wrong or silent: its words, and what is done
    params: dict = field(default_factory=dict, compare=False)   # e.g. the store's position

    def __post_init__(self):
        if self.kind not in KINDS:
            raise LlamanbError(f"op {self.name}: unknown kind {self.kind!r}; known: {', '.join(KINDS)}")
        if len(self.args) != len(self.arg_axes):
            raise LlamanbError(f"op {self.name}: {len(self.args)} operands but {len(self.arg_axes)} axis lists")
        for ax in (self.out_axes, *self.arg_axes):
            for a in ax:
                if a not in AXES:
                    raise LlamanbError(f"op {self.name}: unknown axis {a!r}; known: {', '.join(AXES)}")
        if self.kind == "vector" and self.fn not in VECTOR_FNS:
            raise LlamanbError(f"op {self.name}: vector fn {self.fn!r} not in {VECTOR_FNS}")
        if self.kind == "view":
            check_view(self.arg_axes[0], self.out_axes, self.name)

    @property
    def subscripts(self) -> str:
        """numpy einsum subscripts derived from the axis names, e.g. "bim,mqe->biqe"."""
        ins = ",".join("".join(AXES[a] for a in ax) for ax in self.arg_axes)
        return ins + "->" + "".join(AXES[a] for a in self.out_axes)

    @property
    def reduced(self) -> Axes:
        """Axes an einsum sums over (in an operand, not in the result)."""
        seen = dict.fromkeys(a for ax in self.arg_axes for a in ax)
        return tuple(a for a in seen if a not in self.out_axes)

    @property
    def broadcast(self) -> dict[str, Axes]:
        """For each operand, the result axes it lacks (the Contraction Engine broadcasts it there)."""
        return {n: tuple(a for a in self.out_axes if a not in ax) for n, ax in zip(self.args, self.arg_axes)}

    def flops(self, dims: dict[str, int]) -> int:
        """2 per point of the einsum's whole index space; 0 for everything but einsums."""
        if self.kind != "einsum":
            return 0
        every = dict.fromkeys(a for ax in (*self.arg_axes, self.out_axes) for a in ax)
        return 2 * math.prod(dims[a] for a in every)

    def formula(self) -> str:
        """The op as the chapter would write it, with its axes."""
        def t(n, ax):
            return f"{n}[{', '.join(ax)}]"
        ins = ", ".join(t(n, ax) for n, ax in zip(self.args, self.arg_axes))
        what = self.fn if self.kind == "vector" else self.kind
        return f"{t(self.out, self.out_axes)} = {what}({ins})"


def shape(axes: Axes, dims: dict[str, int]) -> tuple[int, ...]:
    try:
        return tuple(int(dims[a]) for a in axes)
    except KeyError as e:
        raise LlamanbError(f"axis {e.args[0]!r} has no size") from None


def _expand(axes: Axes) -> list[str]:
    out = []
    for a in axes:
        out += list(SPLITS.get(a, (a,)))
    # a pair axis is a pair axis, in or out; in prefill the keys are the prompt's rows (s = s_in)
    return [{"r": "f", "s_in": "s"}.get(a, a) for a in out]


def check_view(src: Axes, dst: Axes, name: str = "view") -> None:
    """A view may split or merge axes (SPLITS) but keep their order: then it moves no byte.
    (It may also call the prompt's rows s_in the keys s: the sizes are checked when it runs.)"""
    if _expand(src) != _expand(dst):
        raise LlamanbError(f"{name}: [{', '.join(src)}] -> [{', '.join(dst)}] is not a reshape "
                           f"(it would need a transpose)")

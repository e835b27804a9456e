"""Calibrating a cost model on published figures and checking it on the rest.

A cost model has a few constants no specification gives (a launch's fixed cost, how close a kernel
gets to peak). They are fixed from some published measurements (the CALIBRATION figures); every
other published figure is held back and predicted (VALIDATION). This module holds that machinery
once, for the three models that use it (llamanb.npu.cost, llamanb.tcp.cost and .predict,
llamanb.mesh.cost):

    split(names, calibration)      the two sets, in order; calibration must be among the names
    solve_linear(A, b)             constants of a model linear in them: one figure per constant
    bisect(f, target, lo, hi)      one constant of a monotone model, to the figure it must match
    Check / rel_error / signed_pct  one figure: published, model, role, error = model / published - 1
    summary(checks, band)          per role: count, error range, the figures outside +-band
    report(checks, ...)            calibration and validation tables, each in its own section
    Spread / spread(values, published)  a prediction that is a range (several readings of what
                                   was not published) and whether the published figure is inside
    sensitivity(predict, inputs)   d log(output) / d log(input): how each prediction moves with each
                                   calibration figure (or any other input)

Nothing here knows a chip: the models pass in their figures and their functions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from llamanb.errors import LlamanbError

ROLES = ("calibration", "validation")


def split(names: Sequence[str], calibration: Iterable[str]) -> tuple[list[str], list[str]]:
    """(calibration, validation): the named calibration figures in the order given, and every
    other name in its own order. A calibration name that is not a figure, or one named twice, is
    refused: a typo must not turn a figure into a silent validation row."""
    names, cal = list(names), list(calibration)
    if len(set(names)) != len(names):
        raise LlamanbError(f"figure names are not unique: {names}")
    unknown = [c for c in cal if c not in names]
    if unknown or len(set(cal)) != len(cal):
        raise LlamanbError(f"calibration figures {cal} must be distinct names among {names}")
    return cal, [n for n in names if n not in set(cal)]


def solve_linear(A, b) -> np.ndarray:
    """x with A x = b for a square A of full rank: one calibration figure per constant, matched
    exactly. The rank is judged on A with each column scaled to its largest entry (the constants'
    units differ by many orders of magnitude: seconds per launch against seconds per FLOP)."""
    A, b = np.asarray(A, dtype=float), np.asarray(b, dtype=float)
    n = A.shape[1] if A.ndim == 2 else 0
    if A.ndim != 2 or A.shape != (n, n) or b.shape != (n,):
        raise LlamanbError(f"calibration needs one figure per constant: {A.shape[0] if A.ndim else 0} "
                           f"figures for {n} constants")
    if np.linalg.matrix_rank(A / np.maximum(np.abs(A).max(axis=0), 1e-300), tol=1e-9) < n:
        raise LlamanbError("the calibration figures do not fix every constant (two of them measure "
                           "the same combination)")
    return np.linalg.solve(A, b)


def bisect(f: Callable[[float], float], target: float, lo: float, hi: float, *, increasing: bool = True,
           log: bool = False, tol: float | None = None, iterations: int = 100,
           what: str = "the constant") -> tuple[float, float]:
    """The final bracket (lo, hi) around the x in [lo, hi] with f(x) = target, f monotone.

    Each step halves the bracket at its midpoint (geometric mean if `log`) and keeps the half
    whose ends straddle the target: hi moves to mid when f(mid) >= target (increasing f) or
    f(mid) <= target (decreasing f). It stops after `iterations` steps or once hi - lo <= tol.
    The ends must straddle the target, or no x in the bracket matches the figure."""
    if not (lo < hi) or (log and lo <= 0):
        raise LlamanbError(f"{what}: bad bracket [{lo!r}, {hi!r}]")
    f_lo, f_hi = f(lo), f(hi)
    if increasing and not f_lo <= target <= f_hi or not increasing and not f_hi <= target <= f_lo:
        raise LlamanbError(f"{what}: no value in [{lo:g}, {hi:g}] reproduces {target:g} "
                           f"(the model gives {f_lo:g} .. {f_hi:g} there)")
    for _ in range(iterations):
        if tol is not None and hi - lo <= tol:
            break
        mid = math.sqrt(lo * hi) if log else (lo + hi) / 2
        y = f(mid)
        if (y >= target) if increasing else (y <= target):
            hi = mid
        else:
            lo = mid
    return lo, hi


def rel_error(model: float, published: float) -> float:
    """model / published - 1: +10 % means the model says 10 % more than was published."""
    if published == 0:
        raise LlamanbError("a published figure of 0 has no relative error")
    return model / published - 1


def signed_pct(x: float, decimals: int = 1) -> str:
    """`x` as a signed percentage, except that a value which rounds to zero prints unsigned.

    Python keeps the sign of a rounded zero (`f"{-1e-17:+.1%}"` is "-0.0%"), and a quantity that
    is zero by construction (a calibration row's error, solved to within rounding) comes out as
    +1e-16 on one BLAS kernel and -1e-16 on another: the sign is noise, so it is not printed."""
    text = f"{x:+.{decimals}%}"
    return text[1:] if float(text[1:-1]) == 0 else text


@dataclass(frozen=True)
class Check:
    """One published figure beside the model's value for it."""
    name: str
    published: float
    model: float
    role: str                      # "calibration" or "validation"
    unit: str = "s"
    source: str = ""
    extra: dict = field(default_factory=dict, compare=False)   # a model's own columns

    def __post_init__(self):
        if self.role not in ROLES:
            raise LlamanbError(f"role must be one of {ROLES}, got {self.role!r}")

    @property
    def error(self) -> float:
        return rel_error(self.model, self.published)


@dataclass(frozen=True)
class Summary:
    role: str
    n: int
    low: float                     # smallest and largest error (model / published - 1)
    high: float
    outside: tuple                 # names of the figures with |error| > band

    @property
    def worst(self) -> float:
        return max(abs(self.low), abs(self.high))


def summary(checks: Sequence[Check], band: float = 0.25) -> dict[str, Summary]:
    """Per role present: how many figures, the range of their errors, which lie outside +-band."""
    out = {}
    for role in ROLES:
        cs = [c for c in checks if c.role == role]
        if cs:
            errs = [c.error for c in cs]
            out[role] = Summary(role, len(cs), min(errs), max(errs),
                                tuple(c.name for c in cs if abs(c.error) > band))
    return out


TITLES = {"calibration": "CALIBRATION: the constants are solved from these (error 0 by construction)",
          "validation": "VALIDATION: held back, predicted (ESTIMATED)"}


def report(checks: Sequence[Check], fmt: Callable[[float, str], str] | None = None, width: int = 42,
           extra: tuple[str, Callable[[Check], str]] | None = None, titles: Mapping[str, str] = TITLES,
           extra_width: int = 10) -> str:
    """The calibration rows, then the validation rows, each section under its own title, one
    line per figure: name, published, model, error (and one model-specific column if given,
    `extra_width` wide)."""
    fmt = fmt or (lambda v, unit: f"{v:.4g} {unit}")
    lines = []
    for role in ROLES:
        rows = [c for c in checks if c.role == role]
        if not rows:
            continue
        head = f"{'figure':<{width}}{'published':>12}{'model':>12}{'error':>8}"
        lines += ["", titles[role], head + (f"{extra[0]:>{extra_width}}" if extra else "")]
        for c in rows:
            line = (f"{c.name:<{width}}{fmt(c.published, c.unit):>12}{fmt(c.model, c.unit):>12}"
                    f"{signed_pct(c.error):>8}")
            lines.append(line + (f"{extra[1](c):>{extra_width}}" if extra else ""))
    return "\n".join(lines[1:])


@dataclass(frozen=True)
class Spread:
    """A prediction that is a range over readings of what was not published."""
    low: float
    high: float
    published: float

    @property
    def inside(self) -> bool:
        return self.low <= self.published <= self.high

    @property
    def errors(self) -> tuple[float, float]:
        """The published figure against each end: (low, high) / published - 1."""
        return rel_error(self.low, self.published), rel_error(self.high, self.published)


def spread(values: Iterable[float], published: float) -> Spread:
    vs = [float(v) for v in values]
    if not vs:
        raise LlamanbError("a range needs at least one reading")
    return Spread(min(vs), max(vs), published)


def sensitivity(predict: Callable[[dict], Mapping[str, float]], inputs: Mapping[str, float],
                rel: float = 0.01) -> dict[str, dict[str, float]]:
    """{input: {output: elasticity}}: each input alone scaled by (1 + rel), the model re-fitted
    and re-run through `predict(inputs) -> {output: value}`, and the change of each output's log
    over the change of the input's log. 1 means the prediction moves one for one with that
    figure; 0 that it does not depend on it."""
    if not rel > 0:
        raise LlamanbError(f"rel must be > 0, got {rel!r}")
    base = dict(predict(dict(inputs)))
    out = {}
    for k in inputs:
        moved = dict(predict({**inputs, k: inputs[k] * (1 + rel)}))
        out[k] = {o: math.log(moved[o] / base[o]) / math.log1p(rel) for o in base}
    return out

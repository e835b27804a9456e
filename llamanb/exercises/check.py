"""Running a student's function on cases and saying, in one line, what is wrong.

    ex = Exercise("01.1", "block_params", cases, hint="...")
    ex(block_params)            # prints one line: passed / the first mismatch / not attempted yet
    ex.verdict(block_params)    # the same as a Verdict(status, message), for tests

A case is `Case(label, args, expected)`: the student's function is called as fn(*args) and its
result compared with `expected`, which the chapter module computed from the finished code in
llamanb (or from closed-form math), never from the student's function. The comparison walks
tuples, lists and dicts and compares numbers exactly (integers) or to a tolerance (floats,
arrays); the first difference found is reported with the case, what was expected, what came back
and, for arrays, both shapes and the first differing index.

A function that still raises NotImplementedError (the stub the notebooks ship with) gets one
fixed line, "not attempted yet", so a notebook with unsolved exercises runs clean and its stored
output does not change. Cases are drawn from a fixed seed: every run asks the same questions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"


@dataclass
class Case:
    label: str                      # what the case is, in words: "SmolLM2-135M", "S=5, start=3"
    args: tuple
    expected: Any
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    status: str                     # PASSED, FAILED or NOT_ATTEMPTED
    message: str                    # the one line the notebook prints

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __str__(self) -> str:
        return self.message


def _short(x, width: int = 90) -> str:
    """A value as one short line (arrays: their leading numbers)."""
    if isinstance(x, np.ndarray):
        with np.printoptions(precision=5, threshold=8, edgeitems=3, linewidth=10_000):
            s = np.array2string(x, separator=", ")
        s = " ".join(s.split())
    elif isinstance(x, (float, np.floating)):
        s = f"{float(x):.7g}"
    elif isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        s = f"{int(x):,}"
    else:
        s = repr(x)
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 3] + "..."


def _describe_array(a: np.ndarray) -> str:
    return f"shape {tuple(a.shape)} {a.dtype}"


def difference(expected, got, rtol: float = 1e-5, atol: float = 1e-6, where: str = "") -> str | None:
    """None if `got` matches `expected`; otherwise a short description of the first difference."""
    at = f" at {where}" if where else ""
    if isinstance(expected, np.ndarray):
        if got is None or np.isscalar(got) and not isinstance(got, (list, tuple)):
            return f"expected an array ({_describe_array(expected)}){at}, got {type(got).__name__} {_short(got)}"
        try:
            g = np.asarray(got)
        except Exception:
            return f"expected an array{at}, got {type(got).__name__}"
        if g.shape != expected.shape:
            return (f"shape{at}: expected {tuple(expected.shape)}, got {tuple(g.shape)} "
                    f"(expected {_describe_array(expected)})")
        if expected.dtype == bool or g.dtype == bool:
            bad = expected != g
        elif np.issubdtype(expected.dtype, np.integer):
            bad = expected != g
        else:
            e64, g64 = expected.astype(np.float64), g.astype(np.float64)
            same_inf = (e64 == g64) | (np.isnan(e64) & np.isnan(g64))
            with np.errstate(invalid="ignore"):
                close = np.isfinite(e64) & (np.abs(e64 - g64) <= atol + rtol * np.abs(e64))
            bad = ~(same_inf | close)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"{int(bad.sum())} of {bad.size} values differ{at} ({_describe_array(expected)}); "
                    f"first at index {idx}: expected {_short(expected[idx])}, got {_short(g[idx])}")
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list, np.ndarray)):
            return f"expected a {type(expected).__name__} of {len(expected)}{at}, got {type(got).__name__} {_short(got)}"
        if len(got) != len(expected):
            return (f"expected {len(expected)} items{at}, got {len(got)}: expected {_short(expected)}, "
                    f"got {_short(list(got))}")
        for i, (e, g) in enumerate(zip(expected, got)):
            d = difference(e, g, rtol, atol, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"expected a dict{at}, got {type(got).__name__}"
        if set(got) != set(expected):
            return f"keys{at}: expected {sorted(expected)}, got {sorted(got)}"
        for k in expected:
            d = difference(expected[k], got[k], rtol, atol, f"{where}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(expected, bool):
        ok = isinstance(got, (bool, np.bool_)) and bool(got) == expected
        return None if ok else f"expected {expected!r}{at}, got {_short(got)}"
    if expected is None or isinstance(expected, str):
        return None if got == expected else f"expected {expected!r}{at}, got {_short(got)}"
    if isinstance(expected, (int, np.integer)):
        if isinstance(got, (float, np.floating)) and float(got).is_integer():
            got = int(got)
        if not isinstance(got, (int, np.integer)) or isinstance(got, bool) or int(got) != int(expected):
            extra = ""
            if isinstance(got, (int, np.integer, float)) and expected and got:
                extra = f" ({float(got) / float(expected):.4g}x the expected)"
            return f"expected {_short(expected)}{at}, got {_short(got)}{extra}"
        return None
    if isinstance(expected, (float, np.floating)):
        try:
            g = float(got)
        except (TypeError, ValueError):
            return f"expected a number{at}, got {type(got).__name__}"
        if not abs(g - float(expected)) <= atol + rtol * abs(float(expected)):
            return f"expected {_short(expected)}{at}, got {_short(g)}"
        return None
    return None if got == expected else f"expected {_short(expected)}{at}, got {_short(got)}"


class Exercise:
    """One exercise: its number and function name, its cases, and how to compare."""

    def __init__(self, number: str, name: str, cases: Callable[[], list[Case]], hint: str = "",
                 rtol: float = 1e-5, atol: float = 1e-6,
                 compare: Callable[[Any, Any], str | None] | None = None):
        self.number, self.name, self._cases, self.hint = number, name, cases, hint
        self.rtol, self.atol, self.compare = rtol, atol, compare
        self._cached: list[Case] | None = None

    def cases(self) -> list[Case]:
        if self._cached is None:
            self._cached = self._cases()
        return self._cached

    def _head(self) -> str:
        return f"{self.number} {self.name}"

    def verdict(self, fn: Callable) -> Verdict:
        if not callable(fn):
            return Verdict(FAILED, f"{self._head()}: expected a function, got {type(fn).__name__}")
        cases = self.cases()
        for n, case in enumerate(cases):
            try:
                got = fn(*_copies(case.args), **case.kwargs)
            except NotImplementedError:
                return Verdict(NOT_ATTEMPTED, f"{self._head()}: not attempted yet (the function "
                                              f"still raises NotImplementedError)")
            except Exception as e:
                msg = str(e).strip().splitlines()
                return Verdict(FAILED, f"{self._head()}: FAILED on case {n + 1}/{len(cases)} "
                                       f"({case.label}): raised {type(e).__name__}: "
                                       f"{msg[0][:160] if msg else ''}")
            d = (self.compare(case.expected, got) if self.compare
                 else difference(case.expected, got, self.rtol, self.atol))
            if d:
                hint = f" | hint: {self.hint}" if self.hint else ""
                return Verdict(FAILED, f"{self._head()}: FAILED on case {n + 1}/{len(cases)} "
                                       f"({case.label}): {d}{hint}")
        return Verdict(PASSED, f"{self._head()}: passed, all {len(cases)} cases match")

    def __call__(self, fn: Callable) -> None:
        print(self.verdict(fn).message)


def _copies(args: tuple) -> tuple:
    """The arguments with every array copied: a function that writes into its input cannot
    change the cases (or the expected values computed from them)."""
    return tuple(np.array(a) if isinstance(a, np.ndarray) else a for a in args)

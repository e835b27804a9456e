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


# ---- the precision an answer was computed in ---------------------------------------------------
# A student given float32 inputs may compute in float32 (the inputs' own dtype) and return float32,
# or float32 values inside a list (`.tolist()` makes them Python floats). The answer is judged in
# the precision it carries: its unit roundoff u is that of its dtype when that is narrower than
# float64 (float16, bfloat16, float32), else float32's when every value is exactly a float32 (the
# values say they were computed in float32), else float64's. A computation of `steps` roundings,
# each of relative size <= u, is off by at most about steps * u relative to its largest value (the
# classical bound gamma_n = n u / (1 - n u) for n roundings, normwise); so a float32 answer is
# accepted within max(the exercise's own tolerance, steps * u * max|expected|). `steps` is the
# exercise's (derived beside it) or, by default, 2 n + 16 for inputs of at most n numbers: two
# reductions over them (a sum and a renormalising sum, say) plus a few elementwise operations.
# Exercises with no tolerance at all (rtol = atol = 0: copies, bit-exact rounding) stay exact.
U64, U32 = 2.0 ** -53, 2.0 ** -24


def _finfo(dtype):
    try:
        return np.finfo(dtype)
    except (TypeError, ValueError):
        import ml_dtypes                        # bfloat16 and friends

        return ml_dtypes.finfo(dtype)


def _is_float_dtype(dtype) -> bool:
    if np.issubdtype(dtype, np.floating):
        return True
    try:
        return _finfo(dtype).bits < 64 and dtype.kind == "V"
    except (TypeError, ValueError, ImportError):
        return False


def unit_roundoff(g: np.ndarray) -> float:
    """The unit roundoff of the precision `g` (a float array) was computed in (see above)."""
    if _is_float_dtype(g.dtype) and _finfo(g.dtype).bits < 64:
        return float(_finfo(g.dtype).eps) / 2
    g64 = g.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        as32 = g64.astype(np.float32).astype(np.float64)
    fin = np.isfinite(g64)
    return U32 if g64.size and (as32[fin] == g64[fin]).all() else U64


def _not_real(g: np.ndarray, at: str) -> str | None:
    """Why `g` cannot be a real-valued answer (None if it can): complex, text, objects."""
    if g.dtype.kind == "c":
        return (f"your answer{at} holds complex numbers ({g.dtype}); the answer is real: take "
                f"the real part only where the maths says the imaginary part is zero")
    if g.dtype.kind in "US":
        return f"your answer{at} holds text ({g.dtype}), not numbers"
    if g.dtype.kind == "O":
        return (f"your answer{at} is not an array of numbers (it holds "
                f"{type(g.flat[0]).__name__ if g.size else 'objects'}, or numbers too large "
                f"for a float)")
    if g.dtype.kind not in "biuf" and not _is_float_dtype(g.dtype):
        return f"your answer{at} is not numeric ({g.dtype})"
    return None


def _scalar(x):
    """A 0-d array (or numpy scalar) as the Python number it holds; anything else unchanged."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x[()]
    return x


def _as_float(x) -> tuple[float | None, str]:
    """(float value, "") or (None, why the answer is no real number)."""
    if isinstance(x, (bool, np.bool_)):
        return None, f"a {type(x).__name__}"
    if isinstance(x, (complex, np.complexfloating)):
        return None, f"a complex number {x!r:.40}; the answer is real"
    if isinstance(x, (str, bytes)):
        return None, f"text {x!r:.40}, not a number"
    try:
        return float(x), ""
    except OverflowError:
        return None, "an integer too large for any float"
    except (TypeError, ValueError):
        return None, f"{type(x).__name__} {_short(x)}, not a number"


def _precision_of_scalar(x) -> float:
    if isinstance(x, np.floating) or (isinstance(x, np.generic) and _is_float_dtype(x.dtype)):
        return unit_roundoff(np.asarray(x))
    if isinstance(x, float):
        return unit_roundoff(np.asarray([x], dtype=np.float64))
    return U64


def difference(expected, got, rtol: float = 1e-5, atol: float = 1e-6, where: str = "",
               steps: int = 16) -> str | None:
    """None if `got` matches `expected`; otherwise a short description of the first difference.
    Floats are judged in the precision the answer carries (see unit_roundoff), within `steps`
    roundings of it; containers may be lists, tuples or arrays; 0-d arrays count as scalars."""
    at = f" at {where}" if where else ""
    got = _scalar(got)
    lowp = rtol > 0 or atol > 0                       # an exact exercise stays exact
    if isinstance(expected, np.ndarray):
        if got is None or np.isscalar(got) and not isinstance(got, (list, tuple)):
            return f"expected an array ({_describe_array(expected)}){at}, got {type(got).__name__} {_short(got)}"
        try:
            g = np.asarray(got)
        except (ValueError, TypeError, OverflowError):
            return f"expected an array{at}, got {type(got).__name__} that is not a regular array"
        bad_kind = _not_real(g, at)
        if bad_kind:
            return bad_kind
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
            r, a = rtol, atol
            u = unit_roundoff(g) if lowp and g.dtype.kind not in "biu" else U64
            if u > U64:                                     # judged in the answer's precision
                fin = np.isfinite(e64)
                scale = float(np.abs(e64[fin]).max()) if fin.any() else 0.0
                r, a = max(rtol, steps * u), max(atol, steps * u * scale)
            with np.errstate(invalid="ignore"):
                close = np.isfinite(e64) & (np.abs(e64 - g64) <= a + r * np.abs(e64))
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
            d = difference(e, g, rtol, atol, f"{where}[{i}]", steps)
            if d:
                return d
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"expected a dict{at}, got {type(got).__name__}"
        if set(got) != set(expected):
            return f"keys{at}: expected {sorted(expected)}, got {sorted(got)}"
        for k in expected:
            d = difference(expected[k], got[k], rtol, atol, f"{where}[{k!r}]", steps)
            if d:
                return d
        return None
    if isinstance(expected, bool):
        ok = isinstance(got, (bool, np.bool_)) and bool(got) == expected
        return None if ok else f"expected {expected!r}{at}, got {_short(got)}"
    if expected is None or isinstance(expected, str):
        try:
            same = bool(got == expected)
        except (TypeError, ValueError):
            same = False
        return None if same else f"expected {expected!r}{at}, got {_short(got)}"
    if isinstance(expected, (int, np.integer)):
        if isinstance(got, (float, np.floating)) and float(got).is_integer():
            got = int(got)
        if not isinstance(got, (int, np.integer)) or isinstance(got, (bool, np.bool_)):
            v, why = _as_float(got)
            what = why or f"{type(got).__name__} {_short(got)}"
            return f"expected the integer {_short(expected)}{at}, got {what}"
        if int(got) != int(expected):
            extra = ""
            if expected and got:
                try:
                    extra = f" ({float(got) / float(expected):.4g}x the expected)"
                except OverflowError:
                    extra = " (far too large)"
            return f"expected {_short(expected)}{at}, got {_short(got)}{extra}"
        return None
    if isinstance(expected, (float, np.floating)):
        g, why = _as_float(got)
        if g is None:
            return f"expected a number{at}, got {why}"
        e = float(expected)
        r, a = rtol, atol
        u = _precision_of_scalar(got) if lowp else U64
        if u > U64:
            r, a = max(rtol, steps * u), max(atol, steps * u * abs(e))
        if not (abs(g - e) <= a + r * abs(e) or (np.isinf(e) and g == e) or (np.isnan(e) and np.isnan(g))):
            return f"expected {_short(expected)}{at}, got {_short(g)}"
        return None
    try:
        same = bool(got == expected)
    except (TypeError, ValueError):
        same = False
    return None if same else f"expected {_short(expected)}{at}, got {_short(got)}"


def default_steps(args: tuple) -> int:
    """Roundings a low-precision computation on these inputs may take: 2 n + 16 for inputs of at
    most n numbers (see the precision note above)."""
    def count(a) -> int:
        if isinstance(a, np.ndarray):
            return a.size
        if isinstance(a, (list, tuple)):
            return sum(count(x) for x in a)
        return 1

    return 2 * max((count(a) for a in args), default=1) + 16


class Exercise:
    """One exercise: its number and function name, its cases, and how to compare."""

    def __init__(self, number: str, name: str, cases: Callable[[], list[Case]], hint: str = "",
                 rtol: float = 1e-5, atol: float = 1e-6,
                 compare: Callable[[Any, Any], str | None] | None = None,
                 steps: Callable[[Case], int] | None = None):
        self.number, self.name, self._cases, self.hint = number, name, cases, hint
        self.rtol, self.atol, self.compare = rtol, atol, compare
        self.steps = steps or (lambda case: default_steps(case.args))
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
            try:
                d = (self.compare(case.expected, got) if self.compare
                     else difference(case.expected, got, self.rtol, self.atol,
                                     steps=self.steps(case)))
            except Exception as e:                  # an answer no comparison foresaw
                d = f"your answer cannot be compared ({type(e).__name__}: {str(e)[:80]})"
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

"""llamanb.platform.calibration on synthetic models whose constants are known: the fits recover them, the
split is the one asked for, and errors, summaries, tables, ranges and sensitivities equal values
computed by hand here."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llamanb.platform import calibration as cal
from llamanb.errors import LlamanbError

EPS = np.finfo(float).eps


def test_split_keeps_order_and_refuses_typos():
    names = ["a", "b", "c", "d", "e"]
    assert cal.split(names, ("d", "a")) == (["d", "a"], ["b", "c", "e"])
    assert cal.split(names, ()) == ([], names)
    for bad in (("a", "x"), ("a", "a")):
        with pytest.raises(LlamanbError):
            cal.split(names, bad)
    with pytest.raises(LlamanbError):
        cal.split(["a", "a"], ("a",))


def test_solve_linear_recovers_known_constants_of_a_launch_model():
    """A synthetic kernel model, seconds = launches x t_launch + bytes / rate + flops / peak, with
    known constants: three figures fix them, a fourth is predicted. Tolerance: the solve's
    backward error is a few eps, so the forward error is within cond(A_scaled) x n x eps of each
    constant (columns scaled to unit size, the same scaling the rank test uses)."""
    truth = np.array([76e-6, 1 / 38e9, 1 / 7.2e12])          # launch_s, 1/GB/s, 1/FLOP/s
    A = np.array([[8, 109e6, 0], [6, 12.6e6, 0], [8, 4.2e6, 2.3e11]])
    b = A @ truth
    x = cal.solve_linear(A, b)
    scale = np.abs(A).max(axis=0)
    bound = np.linalg.cond(A / scale) * 3 * 4 * EPS
    assert np.all(np.abs(x / truth - 1) <= bound)
    new = np.array([16, 525e6, 0])                              # a held-back figure
    assert new @ x == pytest.approx(new @ truth, rel=bound)


def test_solve_linear_refuses_what_does_not_fix_every_constant():
    with pytest.raises(LlamanbError, match="one figure per constant"):
        cal.solve_linear(np.ones((2, 3)), np.ones(2))
    with pytest.raises(LlamanbError, match="do not fix"):         # rows 1 and 2 measure the same
        cal.solve_linear([[1, 1e6, 0], [2, 2e6, 0], [0, 0, 1e9]], [1, 2, 3])


@pytest.mark.parametrize("increasing", [True, False])
def test_bisect_linear_with_a_tolerance(increasing):
    """f(x) = +-x^3 on [0, 10], target +-8: the bracket holds 2, is at most tol wide, and took
    ceil(log2(10 / tol)) halvings (the count, plus the two end checks)."""
    calls = []

    def f(x):
        calls.append(x)
        return x ** 3 if increasing else -x ** 3
    lo, hi = cal.bisect(f, 8 if increasing else -8, 0.0, 10.0, increasing=increasing, tol=1e-6)
    assert lo <= 2 <= hi and hi - lo <= 1e-6
    assert len(calls) == 2 + math.ceil(math.log2(10 / 1e-6))


def test_bisect_log_space_decreasing():
    """f(x) = 1/x on [1e-3, 1e3], target 0.25: 100 halvings of the log bracket leave its geometric
    mean at 4 to within a few ulps (the bracket's width underflows to adjacent floats)."""
    lo, hi = cal.bisect(lambda x: 1 / x, 0.25, 1e-3, 1e3, increasing=False, log=True, iterations=100)
    assert math.sqrt(lo * hi) == pytest.approx(4, rel=8 * EPS)


def test_bisect_refuses_a_bracket_without_the_target():
    with pytest.raises(LlamanbError, match="eta: no value"):
        cal.bisect(lambda x: x, 2.0, 0.0, 1.0, what="eta")
    with pytest.raises(LlamanbError, match="bracket"):
        cal.bisect(lambda x: x, 0.5, 0.0, 1.0, log=True)
    with pytest.raises(LlamanbError, match="bracket"):
        cal.bisect(lambda x: x, 0.5, 1.0, 0.0)


def test_errors_and_signed_percentages_by_hand():
    assert cal.rel_error(110, 100) == pytest.approx(0.10)
    assert cal.rel_error(75, 100) == -0.25
    with pytest.raises(LlamanbError):
        cal.rel_error(1, 0)
    # the sign of a rounded zero is the BLAS kernel's rounding, not a claim
    assert [cal.signed_pct(x) for x in (-1e-17, 1e-17, 0.0, -0.0)] == ["0.0%"] * 4
    assert cal.signed_pct(-0.0004) == "0.0%" and cal.signed_pct(0.0006) == "+0.1%"
    assert cal.signed_pct(-0.052) == "-5.2%" and cal.signed_pct(0.004, 0) == "0%"
    assert cal.signed_pct(-0.52, 0) == "-52%"


CHECKS = [cal.Check("fit a", 2.0, 2.0, "calibration"),
          cal.Check("held b", 100.0, 110.0, "validation"),
          cal.Check("held c", 50.0, 40.0, "validation", "ms"),
          cal.Check("held d", 10.0, 13.0, "validation")]


def test_summary_by_hand():
    s = cal.summary(CHECKS, band=0.25)
    assert set(s) == {"calibration", "validation"}
    assert (s["calibration"].n, s["calibration"].low, s["calibration"].high) == (1, 0.0, 0.0)
    v = s["validation"]
    assert v.n == 3 and v.outside == ("held d",)                 # +30 %; -20 % and +10 % inside
    assert (v.low, v.high) == (pytest.approx(-0.2), pytest.approx(0.3))
    assert v.worst == pytest.approx(0.3)
    assert cal.summary(CHECKS, band=0.15)["validation"].outside == ("held c", "held d")
    with pytest.raises(LlamanbError, match="role"):
        cal.Check("x", 1, 1, "training")


def test_report_sections_and_lines_by_hand():
    """Columns: name padded to `width`, published and model right-aligned in 12, error in 8, the
    extra column in 10; the spaces below are counted by hand."""
    text = cal.report(CHECKS, width=10, extra=("note", lambda c: c.unit))
    want = [cal.TITLES["calibration"],
            "figure       published       model   error      note",
            "fit a" + " " * 14 + "2 s" + " " * 9 + "2 s" + " " * 4 + "0.0%" + " " * 9 + "s",
            "",
            cal.TITLES["validation"],
            "figure       published       model   error      note",
            "held b" + " " * 11 + "100 s" + " " * 7 + "110 s  +10.0%" + " " * 9 + "s",
            "held c" + " " * 11 + "50 ms" + " " * 7 + "40 ms  -20.0%" + " " * 8 + "ms",
            "held d" + " " * 12 + "10 s" + " " * 8 + "13 s  +30.0%" + " " * 9 + "s"]
    assert text.splitlines() == want
    assert cal.report(CHECKS[1:2], width=10).splitlines()[0] == cal.TITLES["validation"]


def test_spread_by_hand():
    s = cal.spread([3.0, 1.0, 2.0], 2.5)
    assert (s.low, s.high, s.inside) == (1.0, 3.0, True)
    assert s.errors == (pytest.approx(1 / 2.5 - 1), pytest.approx(3 / 2.5 - 1))
    assert not cal.spread([1.0, 2.0], 4.0).inside
    with pytest.raises(LlamanbError):
        cal.spread([], 1.0)


def test_sensitivity_is_the_exponent_of_a_power_law():
    """y = k a^2 / b: d log y / d log a = 2, d log y / d log b = -1, exactly for any step (a power
    law's log is linear in the inputs' logs); z = a + b is not a power law: its elasticity at a
    finite step is log(z'/z) / log(1 + rel), computed here by hand."""
    def predict(v):
        return {"y": 3 * v["a"] ** 2 / v["b"], "z": v["a"] + v["b"], "const": 7.0}
    s = cal.sensitivity(predict, {"a": 2.0, "b": 5.0}, rel=0.1)
    assert s["a"]["y"] == pytest.approx(2, rel=1e-12) and s["b"]["y"] == pytest.approx(-1, rel=1e-12)
    assert s["a"]["const"] == 0 == s["b"]["const"]
    assert s["a"]["z"] == pytest.approx(math.log(7.2 / 7) / math.log(1.1), rel=1e-12)
    with pytest.raises(LlamanbError):
        cal.sensitivity(predict, {"a": 1.0, "b": 1.0}, rel=0)

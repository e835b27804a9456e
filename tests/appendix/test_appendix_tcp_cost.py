"""What appendix A §2 (and chapter 08 §10's paragraph) says about Furiosa's published
throughput: both figures above the compiler-cycle range, by the ratios quoted; the retracted
calibrated roofline's held-back error over the four batch/KV readings, and its sensitivity. A
failure here means the text is stale; the models are tested in tests/tcp/."""
from __future__ import annotations

import pytest

from llamanb.platform import calibration as cal
from llamanb.tcp import cost, predict
from llamanb.tcp.cost import PUBLISHED, Assumptions, estimate, furiosa, prediction_table


def test_both_published_figures_lie_above_their_ranges():
    rs = {r["model"]: r for r in predict.ranges()}
    assert all(not r["inside"] and r["published"] > r["high"] for r in rs.values())
    r70, r8 = rs["Llama 3.1 70B"], rs["Llama 3.1 8B"]
    assert (round(r70["published"] / r70["high"], 1), round(r70["published"] / r70["low"], 1)) == (1.1, 1.8)
    assert (round(r8["published"] / r8["high"], 1), round(r8["published"] / r8["low"], 2)) == (1.3, 1.65)


def test_the_retracted_fit_reproduces_its_figure_and_swings_with_the_readings():
    """Calibration row first, reproduced to eta's 4-decimal rounding; the held-back 8B error over
    batch (paged, full) x KV (bf16, fp8): -19 %, +28 %, -30 %, +22 %, as the text says."""
    table = prediction_table()
    assert [r["role"] for r in table] == ["calibration", "validation"]
    for r in table:
        assert r["estimate"] == pytest.approx(estimate(
            next(p for p in PUBLISHED if p["model"] == r["model"]), furiosa()).tok_s)
    assert abs(table[0]["error"]) < 1e-3 and cal.signed_pct(table[0]["error"]) == "0.0%"
    errs = {}
    for rule in ("paged", "full"):
        for kv in ("bf16", "fp8"):
            fit_row, held = cost.checks(Assumptions(batch=rule, kv=kv))
            assert fit_row.role == "calibration" and held.role == "validation"
            errs[rule, kv] = cal.signed_pct(held.error, 0)
            assert 0.3 < furiosa(Assumptions(batch=rule, kv=kv)).eta < 1.0
    assert errs == {("paged", "bf16"): "-19%", ("paged", "fp8"): "+28%",
                    ("full", "bf16"): "-30%", ("full", "fp8"): "+22%"}


def test_the_held_back_prediction_moves_one_for_one_with_the_calibration_figure():
    s = cost.sensitivity(rel=0.01)
    assert f"{s['Llama 3.1 70B']['Llama 3.1 8B']:+.2f}" == "+1.01"

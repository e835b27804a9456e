"""llamanb.cuda.error_bound: every launch of a simulated prefill and decodes within its own derived
rounding bound against float64 of its inputs, and a real error -- one output value off by 1e-5
relative, a copied value changed -- out of it."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba_cuda", reason="numba-cuda not installed (pip install 'llamanb[cuda]')")

from llamanb.cuda import runtime  # noqa: E402


@pytest.fixture(scope="module")
def log():
    runtime.load(simulated=True)
    from llamanb import Engine
    from llamanb.cuda.error_bound import recorded
    from llamanb.cuda.random_model import random_model
    from llamanb.model.config import LlamaConfig

    cfg = LlamaConfig(name="tiny-random", n_layers=1, hidden=32, n_heads=2, n_kv_heads=1,
                      head_dim=16, ffn=64, vocab=64, rope_theta=10000.0, max_seq=32,
                      tie_embeddings=True, eos_ids=(1,))
    sim = Engine(random_model(cfg, seed=1, std=0.3), "cuda-simulated")
    cache = sim.new_cache(16)
    with recorded(sim.backend) as entries:
        logits = sim.prefill([5, 17, 33], cache)
        sim.decode(int(np.argmax(logits)), cache)
    assert sim.backend.k.rmsnorm.__class__.__name__ != "_Recording"      # restored
    return entries


def test_every_launch_within_its_bound(log):
    from llamanb.cuda.error_bound import launch_error_ratio

    names = {e[0] for e in log}
    assert names == {"rmsnorm", "rope", "fill_kv", "qkt", "softmax_rows", "softmax_v", "silu_mul"}
    assert all(launch_error_ratio(*e) <= 1.0 for e in log)


OUT = {"rmsnorm": 2, "rope": 0, "qkt": 4, "softmax_rows": 0, "softmax_v": 4, "silu_mul": 1}


@pytest.mark.parametrize("name", sorted(OUT))
def test_one_value_off_by_1e_5_relative_is_out_of_bound(log, name):
    from llamanb.cuda.error_bound import launch_error_ratio

    _, before, after = next(e for e in log if e[0] == name)
    out = after[OUT[name]].copy()
    # row 0's largest computed value (rope: among the rotated columns; softmax_rows, qkt: key 0,
    # the one key row 0 sees)
    width = (before[3] * before[4] if name == "rope" else 1 if name in ("qkt", "softmax_rows")
             else out.shape[1])
    col = int(np.argmax(np.abs(out[0, :width])))
    out[0, col] *= np.float32(1 + 1e-5)
    assert launch_error_ratio(name, before, after[:OUT[name]] + [out] + after[OUT[name] + 1:]) > 1


def test_a_changed_copy_and_a_nan_are_infinite(log):
    from llamanb.cuda.error_bound import launch_error_ratio

    _, before, after = next(e for e in log if e[0] == "fill_kv")
    kt = after[5].copy()
    idx = tuple(np.argwhere(kt != before[5])[0])           # a key fill_kv wrote: one ulp off
    kt[idx] = np.nextafter(kt[idx], np.float32(np.inf))
    assert launch_error_ratio("fill_kv", before, after[:5] + [kt] + after[6:]) == float("inf")
    _, before, after = next(e for e in log if e[0] == "silu_mul")
    out = after[1].copy()
    out[0, 0] = np.nan
    assert launch_error_ratio("silu_mul", before, [after[0], out]) == float("inf")


def test_gemm_nt_launch_bound():
    runtime.load(simulated=True)
    from llamanb.cuda import kernels
    from llamanb.cuda.error_bound import launch_error_ratio

    k = kernels.build(kernels.SIM_TILE)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 9)).astype(np.float32)
    w = rng.standard_normal((5, 9)).astype(np.float32)
    c0 = rng.standard_normal((3, 5)).astype(np.float32)
    c = c0.copy()
    k.gemm_nt[(2, 1), (k.tile, k.tile)](a, w, c, 1)
    assert launch_error_ratio("gemm_nt", [a, w, c0, 1], [a, w, c, 1]) <= 1.0
    c[1, 2] = c0[1, 2]                                  # the accumulate forgotten in one place
    assert launch_error_ratio("gemm_nt", [a, w, c0, 1], [a, w, c, 1]) > 1.0

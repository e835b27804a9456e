"""The cuda-simulated backend (llamanb.cuda.backend) on the engine seam, in numba-cuda's CUDA
simulator: a tiny random Llama (GQA group 2, two layers) against the numpy engine and the float64
forward, a mixed continuous-batching step, the serving loop, the host KV store kept in step;
and `verify --backend cuda` on a machine without a GPU."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba_cuda", reason="numba-cuda not installed (pip install 'llamanb[cuda]')")

from llamanb import Engine  # noqa: E402
from llamanb.model.config import LlamaConfig  # noqa: E402
from llamanb.cuda import runtime  # noqa: E402
from llamanb.engine.step import Step  # noqa: E402

from conftest import REPO_ROOT, run_cli  # noqa: E402


TINY = LlamaConfig(name="tiny-random", n_layers=2, hidden=96, n_heads=2, n_kv_heads=1,
                   head_dim=16, ffn=128, vocab=272, rope_theta=10000.0, max_seq=64,
                   tie_embeddings=False, eos_ids=(2,))


@pytest.fixture(scope="module")
def engines():
    from llamanb.cuda.random_model import random_model

    runtime.load(simulated=True)
    model = random_model(TINY, seed=3, std=0.1)      # std 0.1: attention far from uniform
    return model, Engine(model), Engine(model, "cuda-simulated")


def greedy_alone(engine, prompt, n):
    cache = engine.new_cache(len(prompt) + n)
    logits, out = engine.prefill(prompt, cache), []
    for _ in range(n):
        out.append(int(np.argmax(logits)))
        if len(out) < n:
            logits = engine.decode(out[-1], cache)
    return out


def test_prefill_and_decode_track_numpy_and_float64(engines):
    """The simulated backend's error against the float64 forward is of the numpy engine's size
    (within 3x of it, plus 1e-5 for the logits' scale ~1): measured, not tuned, on this machine."""
    from llamanb.model.reference import forward

    model, en, ec = engines
    assert ec.backend.emulated and "simulator" in ec.backend.description
    ids = [5, 17, 33]
    cn, cc = en.new_cache(16), ec.new_cache(16)
    steps = [(en.prefill(ids, cn), ec.prefill(ids, cc)), (en.decode(200, cn), ec.decode(200, cc))]
    ref = forward(model.weights, ids + [200], rows=[2, 3])            # [2, V] float64
    for (ln, lc), r in zip(steps, ref):
        en_err, ec_err = np.abs(ln - r).max(), np.abs(lc - r).max()
        assert ec_err <= 3 * en_err + 1e-5, (ec_err, en_err)
        assert int(np.argmax(lc)) == int(np.argmax(r))
    # the engine's host store holds what the device wrote: the same keys as numpy's (float32-close)
    assert np.allclose(cc.keys(1, 0, 4), cn.keys(1, 0, 4), rtol=0, atol=1e-5)


def test_mixed_step_equals_each_sequence_alone(engines):
    """One step: slot 0 prefills 2 tokens, slot 2 decodes one (its 2-token prompt prefilled
    earlier), slot 1 prefills 1: each row's logits as on the numpy engine alone."""
    model, en, ec = engines
    cache = ec.new_cache(16, slots=3)
    ec.prefill([40, 41], cache, slot=2)
    step = Step.build([(0, 0, [7, 8]), (2, 2, [44]), (1, 0, [60])])
    got = ec.step(step, cache)                                          # [3, V]
    want = []
    for parts in ([(0, 0, [7, 8])], [(0, 0, [40, 41, 44])], [(0, 0, [60])]):
        want.append(en.step(Step.build(parts), en.new_cache(16))[0])
    # rows alone vs in a batch: per-row arithmetic is the same kernels; the GEMM's rows differ
    # only by BLAS blocking (host gemm under the simulator), so compare at the float64 scale
    assert np.abs(got - np.array(want)).max() <= 1e-5
    assert [int(np.argmax(g)) for g in got] == [int(np.argmax(w)) for w in want]
    assert cache.lengths.tolist() == [2, 1, 3]


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_reused_slot_written_by_another_backend_is_uploaded(engines, paged):
    """A slot the cuda backend filled (6 positions), freed, then refilled by the numpy engine
    (2 positions) in the same store: the cuda backend's next decode must attend over the numpy
    engine's keys, not its own stale device copy of the old sequence. Against the float64
    forward of the new sequence, at the numpy engine's error size (as in the first test)."""
    from llamanb.model.reference import forward

    model, en, ec = engines
    # laid out for the numpy engine (its key tiles); any store serves the cuda backend
    cache = en.new_cache(16, block=4, n_blocks=8) if paged else en.new_cache(16)
    ec.prefill([9, 10, 11, 12, 13, 14], cache)
    cache.free(0)
    en.prefill([70, 71], cache)                        # the same store, another backend
    got = ec.decode(72, cache)
    ref = forward(model.weights, [70, 71, 72], rows=[2])[0]
    cn = en.new_cache(16)
    en.prefill([70, 71], cn)
    en_err = np.abs(en.decode(72, cn) - ref).max()
    assert np.abs(got - ref).max() <= 3 * en_err + 1e-5, (np.abs(got - ref).max(), en_err)
    # and the slot's own continuation is not re-uploaded by mistake: a truncated sequence the
    # cuda backend wrote itself continues from its device copy, still right
    cache2 = ec.new_cache(16)
    ec.prefill([9, 10, 11, 12], cache2)
    cache2.truncate(0, 2)
    got2 = ec.decode(72, cache2)
    ref2 = forward(model.weights, [9, 10, 72], rows=[2])[0]
    assert np.abs(got2 - ref2).max() <= 3 * en_err + 1e-5


def test_continuous_batching_tokens_equal_alone(engines):
    from llamanb.engine.generate import SamplingParams
    from llamanb.serve import BatchRunner

    model, en, ec = engines
    work = [([5, 6], 2), ([100], 1)]
    runner = BatchRunner(ec, slots=2, block=4, kv_positions=32, token_budget=128)
    reqs = [runner.add(p, max_new_tokens=n, params=SamplingParams(), stop_ids=()) for p, n in work]
    runner.run()
    assert [list(r.output) for r in reqs] == [greedy_alone(en, p, n) for p, n in work]
    assert any(len(rec.rows) == 2 for rec in runner.history)           # two requests in a step


def test_projections_through_the_gemm_kernel(engines):
    """gemm='kernel': every projection through gemm_nt in the simulator (slow there: one decode
    row of a one-layer model), against the host-projection backend and the numpy engine."""
    from llamanb.cuda.random_model import random_model

    cfg = LlamaConfig(name="tiny-1l", n_layers=1, hidden=32, n_heads=2, n_kv_heads=1,
                      head_dim=16, ffn=32, vocab=40, rope_theta=10000.0, max_seq=16,
                      tie_embeddings=True, eos_ids=(2,))
    model = random_model(cfg, seed=4, std=0.2)
    ek, en = Engine(model, "cuda-simulated", gemm="kernel"), Engine(model)
    assert "projections: kernel" in ek.backend.description
    from llamanb.model.reference import forward

    ck, cn = ek.new_cache(4), en.new_cache(4)
    lk, ln = ek.prefill([7], ck), en.prefill([7], cn)
    ref = forward(model.weights, [7], rows=[0])[0]
    # as above: within 3x the numpy engine's own float32 error against float64, plus 1e-5
    assert np.abs(lk - ref).max() <= 3 * np.abs(ln - ref).max() + 1e-5
    assert int(np.argmax(lk)) == int(np.argmax(ref))


def test_verify_backend_cuda_without_gpu_is_one_line(llamanb_cache):
    """On a machine without an NVIDIA GPU: one line naming what is missing, exit 2, before any
    model is loaded."""
    from llamanb.cuda.readiness import cuda_missing

    if not cuda_missing():
        pytest.skip("numba-cuda and an NVIDIA GPU are present here")
    r = run_cli(["verify", "--backend", "cuda"], cache=llamanb_cache)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "NVIDIA GPU" in lines[0] and "cuda-simulated" in lines[0] and not r.stdout


def test_cuda_backend_without_gpu_is_one_line():
    """Past the CLI (a driver library but no device, say): the backend itself refuses in one
    line. Run in a fresh process, this one holds numba in simulator mode."""
    code = ("from llamanb.cuda import runtime\nfrom llamanb.errors import LlamanbError\n"
            "try:\n    runtime.load(simulated=False)\nexcept LlamanbError as e:\n"
            "    print(e)\nelse:\n    print('GPU')\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    if r.stdout.strip() == "GPU":
        pytest.skip("a GPU is present here")
    line = r.stdout.strip()
    assert r.returncode == 0 and "\n" not in line, r.stderr
    assert "needs an NVIDIA GPU" in line and "cuda-simulated" in line


def test_step_past_the_grid_y_limit_is_one_line(engines, monkeypatch):
    """qkt and softmax_v launch one grid row per (row, head); CUDA allows 65535 (gridDim.y). A
    longer step is refused in one line naming the chunk that fits (here the limit is lowered
    to 5: a 3-token prefill with 2 heads is 6 pairs), before anything is written."""
    from llamanb.cuda import backend
    from llamanb.errors import LlamanbError

    model, en, ec = engines
    monkeypatch.setattr(backend, "GRID_Y_MAX", 5)
    cache = ec.new_cache(8)
    with pytest.raises(LlamanbError, match="3 rows x 2 heads exceeds.*chunks of at most 2 tokens"):
        ec.prefill([5, 6, 7], cache)
    assert cache.lengths.tolist() == [0]

"""scripts/gpu_check.py --dry-run: the prepared GPU check, run end to end with no GPU (the
cuda-simulated backend, a tiny config, torch on the CPU), so that the script a GPU session will
run has run somewhere. Its agreement checks are real (the same random weights in the numpy engine,
the simulated kernels and transformers); its timings are labelled meaningless."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

pytest.importorskip("numba_cuda", reason="numba-cuda not installed (pip install 'llamanb[cuda]')")
pytest.importorskip("transformers")


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(PYTHONPATH=str(REPO_ROOT), OUT=str(tmp_path), OMP_NUM_THREADS="2")
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_check.py"), "--dry-run"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "gpu_check.json").read_text())
    agree = [x for x in rows if "same weights" in x["check"]]
    assert len(agree) == 2                                   # both shapes' code paths ran
    for x in agree:
        # Same float32 weights, three float32 evaluations: each logit is a few sums of at most
        # 64 products (one layer, hidden 32, ffn 32), so they differ by O(64 u) of the logits'
        # scale, u = 2^-24; a weight mapped to the wrong place (q/k/v or gate/up swapped, an
        # untied head) moves logits by O(their scale). 2^-10 of the scale lies between the two.
        assert x["greedy_equal_numpy"]
        bound = 2.0 ** -10 * x["logit_scale"]
        assert x["max_abs_logit_diff_numpy"] <= bound and x["max_abs_logit_diff_hf_prefill"] <= bound
    speed = [x for x in rows if x["check"].endswith("DRY RUN, meaningless")]
    assert len(speed) == 2 and all(x["device"] == "CUDA simulator on the CPU" for x in speed)

"""scripts/gpu_check.sh and scripts/gpu_check.py without a GPU: the argument handling, the one
timeout, the JSON written to $OUT, and `--dry-run` -- every check of the GPU run executed end to
end on numba-cuda's simulator at tiny shapes, torch on the CPU, numpy standing in for cuBLAS --
so that the script a GPU session will run has run somewhere. The dry run's agreement checks are
real (the same random weights through the simulated kernels and through transformers); its
timings are labelled meaningless."""
from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu_check.sh"


def run_sh(args, tmp_path, timeout=600, **env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "OUT")}
    env.update(PYTHON=sys.executable, OUT=str(tmp_path / "out"), OMP_NUM_THREADS="2")
    env.update(env_extra)
    return subprocess.run(["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def gpu_check_module():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("args, says", [(["--bogus"], "unknown argument '--bogus'"),
                                        (["--probe", "x"], "unknown argument 'x'")])
def test_sh_bad_argument_is_one_line_and_writes_nothing(tmp_path, args, says):
    r = run_sh(args, tmp_path)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not r.stdout


def test_sh_missing_interpreter_and_bad_timeout_are_one_line(tmp_path):
    r = run_sh(["--probe"], tmp_path, PYTHON=str(tmp_path / "no-python"))
    assert r.returncode == 2 and "no Python interpreter" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run_sh(["--probe"], tmp_path, GPU_CHECK_TIMEOUT="5s")
    assert r.returncode == 2 and "whole seconds" in r.stderr


def test_sh_one_timeout_stops_a_hang(tmp_path):
    """An interpreter that hangs (here: a script that sleeps) is stopped by the one timeout
    around everything: exit 124, said in one line, well before the sleep ends."""
    fake = tmp_path / "python-that-hangs"
    fake.write_text("#!/bin/sh\nsleep 60\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    r = run_sh(["--probe"], tmp_path, timeout=40, PYTHON=str(fake), GPU_CHECK_TIMEOUT="2")
    assert r.returncode == 124, (r.stdout, r.stderr)
    assert "stopped by the 2 s timeout" in r.stderr


@pytest.mark.parametrize("argv, says", [(["--budget", "x"], "--budget needs seconds"),
                                        (["--budget", "-1"], "seconds > 0"),
                                        (["--out"], "--out needs a value"),
                                        (["--fast"], "unknown argument '--fast'")])
def test_py_bad_arguments_exit_2_in_one_line(argv, says, capsys):
    mod = gpu_check_module()
    with pytest.raises(SystemExit) as e:
        mod.Args(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_report_rewrites_whole_json_after_each_record(tmp_path):
    """Each record leaves a complete JSON list (renamed into place), so a run the timeout cuts
    short still leaves valid JSON with every finished check; and no temporary file behind."""
    mod = gpu_check_module()
    rep = mod.Report(str(tmp_path / "o"), dry=True)
    rep(check="a", ok=True)
    assert json.loads((tmp_path / "o" / "gpu_check.json").read_text()) == [
        {"check": "a", "ok": True, "dry_run": True}]
    rep(check="b", ok=False)
    rows = json.loads((tmp_path / "o" / "gpu_check.json").read_text())
    assert [r["check"] for r in rows] == ["a", "b"] and not rep.ok
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["gpu_check.json"]


pytest.importorskip("numba_cuda", reason="numba-cuda not installed (pip install 'llamanb[cuda]')")


def test_sh_probe_dry_run(tmp_path):
    """--probe: the versions first, then one kernel launch, nothing else."""
    r = run_sh(["--probe", "--dry-run"], tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[0].startswith("interpreter: ")
    rows = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert [x["check"] for x in rows] == ["versions", "one kernel launch (silu_mul vs numpy)"]
    assert rows[0]["numpy"] and rows[0]["numba-cuda"] and all(x["dry_run"] for x in rows)


@pytest.mark.slow
def test_sh_full_dry_run(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    r = run_sh(["--dry-run"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rows = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert all(x["ok"] for x in rows if "ok" in x) and all(x["dry_run"] for x in rows)
    names = [x["check"] for x in rows]
    assert names[0] == "versions"

    def having(*words):
        return [x for x in rows if all(w in x["check"] for w in words)]
    # gemm_nt against the stand-in for cuBLAS, both within gamma_K sum|a w| of float64
    g = having("gemm_nt vs")
    assert g and all(x["err_over_gamma_sum_abs_gemm_nt"] <= 1 for x in g)
    # teacher forcing: both shapes' code paths with the host projections, one through gemm_nt;
    # one error per step (the prompt's last row + each decode step) and each argmax agreeing
    tf = having("teacher-forced")
    assert sorted(x["check"].split("gemm=")[1] for x in tf) == ["auto", "auto", "kernel"]
    for x in tf:
        assert len(x["rel_logit_err_per_step"]) == x["steps"] == x["decode_steps"] + 1
        # the same float32 weights through two float32 evaluations of a 2-layer, hidden-32 model:
        # each logit is a few sums of <= 64 products, O(64 u) ~ 4e-6 of the logits' scale apart;
        # a weight mapped to the wrong place moves logits by O(their scale)
        assert x["max_rel_logit_err"] <= 2.0 ** -10 and x["argmax_agree_steps"] == x["steps"]
    mb = having("mixed batch")
    assert len(mb) == 1 and mb[0]["argmax_agree"] == mb[0]["rows"] == 9
    assert mb[0]["max_rel_logit_err"] <= 2.0 ** -10
    sp = having("tokens/s")
    assert len(sp) == 4 and all("DRY RUN: timings meaningless" in x["check"] for x in sp)
    assert all(x["timings_meaningful"] is False for x in sp)


def test_launch_configs_become_cupy_tuples():
    """CuPy's RawKernel takes grid and block as tuples; llamanb.cuda.launch gives ints for 1-D
    launches. The GPU-only C++ check converts them (it cannot run here, this can)."""
    from llamanb.cuda import launch

    dims = gpu_check_module()._dims
    assert dims(launch.gemm_nt(37, 129, 16)) == ((9, 3), (16, 16))
    assert dims(launch.row_warps(24, 16)) == ((3,), (256,))
    assert dims(launch.argmax_decode(6, 16)) == ((6,), (256,))

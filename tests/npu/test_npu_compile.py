"""compile(spec): an artifact directory in the cache, built once (a second call is a hit, counted),
written atomically; the real path (mlir-air + Peano) driven through fakes injected in sys.modules."""
from __future__ import annotations

import json
import os
import stat
import sys
import types

import pytest

from llamanb.model.config import SMOLLM2_135M as S
from llamanb.errors import LlamanbError
from llamanb.npu.compiler import compile as C
from llamanb.npu.compiler.builders import gemv, rmsnorm
from llamanb.npu.compiler.groups import decode_groups
from llamanb.npu.compiler.plan import read_plan
from llamanb.npu.compiler.stitch import Member, stitch


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def small_group():
    n = rmsnorm(1, 64, 1e-5, herd_xy=(1, 1), flat_out=True)
    return stitch("rms_gemv", [Member(n, {"x": "x", "w": "w", "y": "xn"}, "n"),
                               Member(gemv(64, 64), {"a": "a", "x": "xn", "y": "y"}, "p")])


def test_emulated_artifact_and_cache_hit(cache):
    g = small_group()
    before = dict(C.STATS)
    art = C.compile(g, mode="emulated")
    assert art.path.parent == cache / "npu-artifacts" and not art.cache_hit
    m = json.loads((art.path / "manifest.json").read_text())
    assert m["mode"] == "emulated" and "emulated" in m["note"] and "emulated" in str(art)
    assert (art.path / "module.mlir").read_text() == g.text
    plan = json.loads((art.path / "plan.json").read_text())
    assert len(plan["launches"]) == len(read_plan(g.text).launches) == m["launches"]
    assert [a["role"] for a in m["args"]] == [a.role for a in g.args]
    assert [x["object"] for x in m["links"]] == ["mv.o"]
    assert m["host_build"] in (None, "host-kernels.so")
    assert C.STATS["compiled"] == before["compiled"] + 1
    mtime = os.stat(art.path / "manifest.json").st_mtime_ns
    again = C.compile(g, mode="emulated")
    assert again.cache_hit and again.path == art.path
    assert C.STATS["compiled"] == before["compiled"] + 1 and C.STATS["hits"] == before["hits"] + 1
    assert os.stat(art.path / "manifest.json").st_mtime_ns == mtime
    # nothing else was left in the cache directory
    assert sorted(p.name for p in art.path.parent.iterdir()) == [art.path.name]
    assert C.load(art.path).key == art.key


def test_different_text_different_artifact(cache):
    a = C.compile(rmsnorm(1, 64, 1e-5, herd_xy=(1, 1)), mode="emulated")
    b = C.compile(rmsnorm(1, 64, 1e-6, herd_xy=(1, 1)), mode="emulated")
    assert a.key != b.key and a.path != b.path


def test_interrupted_compile_leaves_nothing(cache, monkeypatch):
    def boom(spec, tmp):
        (tmp / "half-written").write_text("x")
        raise KeyboardInterrupt

    monkeypatch.setattr(C, "_compile_emulated", boom)
    with pytest.raises(KeyboardInterrupt):
        C.compile(small_group(), mode="emulated")
    root = cache / "npu-artifacts"
    assert not root.exists() or list(root.iterdir()) == []


def test_bad_input_is_a_one_line_error(cache, tmp_path):
    with pytest.raises(LlamanbError, match="mode"):
        C.compile(small_group(), mode="fast")
    with pytest.raises(LlamanbError, match="KernelSpec"):
        C.compile("not a spec")
    with pytest.raises(LlamanbError, match="not an NPU artifact"):
        C.load(tmp_path)


# ---- the real path, with fakes -----------------------------------------------------------------
@pytest.fixture
def fake_toolchain(tmp_path, monkeypatch):
    """The contract fakes of mlir-air and Peano (tests/npu/npu_fakes.py), with a clang++ that also
    records its command lines."""
    import npu_fakes

    log: list = []
    npu_fakes.install(monkeypatch, tmp_path, log)
    argv = tmp_path / "argv.txt"
    clang = tmp_path / "peano" / "bin" / "clang++"
    clang.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fake peano 1.0"; exit 0; fi\n'
                     f'echo "$@" >> {argv}\n'
                     'while [ $# -gt 1 ]; do if [ "$1" = "-o" ]; then echo obj > "$2"; fi; shift; '
                     'done\n')
    return {"log": log, "argv": argv}


def test_real_path_with_fakes(cache, fake_toolchain):
    g = decode_groups(S)["o_gemv_ffn"].spec
    assert C.resolve_mode("auto")[0] == "xrt"
    art = C.compile(g)
    m = art.manifest
    import npu_fakes
    assert m["mode"] == "xrt" and m["toolchain"]["mlir-air"] == f"mlir-air {npu_fakes.MLIR_AIR_VERSION}"
    log = fake_toolchain["log"]
    assert [x[1] for x in log if x[0] == "parse"] == [len(g.text)]
    assert art.elf == art.path / "o_gemv_ffn.elf" and art.kernel == "main:o_gemv_ffn"
    assert m["backend_kwargs"]["omit_pingpong"] == "all"           # the group's preset
    aircc = next(x[1] for x in log if x[0] == "aircc")
    assert "--omit-ping-pong-transform=all" in aircc and "npu2" in aircc
    # one object per linked kernel, also staged in air_project/; the second-K matvec is mv.cc
    # under another symbol
    objs = {x["object"] for x in m["links"]}
    assert set(m["objects"]) == objs and all((art.path / o).is_file() for o in objs)
    assert all((art.path / "air_project" / o).is_file() for o in objs)
    argv = fake_toolchain["argv"].read_text().splitlines()
    down = [ln for ln in argv if f"mv_k{S.ffn}.o" in ln]
    assert len(down) == 1 and f"-Dmatvec_bf16=matvec_bf16_k{S.ffn}" in down[0]
    n = len([x for x in log if x[0] == "aircc"])
    assert C.compile(g).cache_hit and len([x for x in log if x[0] == "aircc"]) == n


def test_auto_without_air_is_emulated(cache, monkeypatch):
    monkeypatch.setitem(sys.modules, "air", None)
    mode, why = C.resolve_mode("auto")
    assert mode == "emulated" and "mlir-air" in why
    art = C.compile(small_group())
    assert art.manifest["mode"] == "emulated" and "mlir-air" in art.manifest["why_mode"]

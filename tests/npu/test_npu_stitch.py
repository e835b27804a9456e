"""Stitching: a group verifies with upstream MLIR, its launch plan (read back from the text) runs
the members in order over shared DDR buffers, the emulated group equals the members run one by one
bit for bit and a float64 reference within bf16 rounding, and a wrong argument map shows."""
from __future__ import annotations

import re

import numpy as np
import pytest

from llamanb.model.config import SMOLLM2_135M as S
from llamanb.errors import LlamanbError
from llamanb.npu.compiler import verify as V
from llamanb.npu.compiler.builders import add, gemv, rmsnorm
from llamanb.npu.compiler.emulator import run
from llamanb.npu.compiler.plan import read_plan
from llamanb.npu.compiler.stitch import (Member, derive_roles, run_one_by_one, stitch, wrap_bare_herds)

needs_mlir = pytest.mark.skipif(not V.available(), reason="MLIR Python bindings not installed")

NORM = rmsnorm(1, S.hidden, S.rms_eps, herd_xy=(1, 1), flat_out=True)
PROJ = gemv(S.kv_dim, S.hidden)
MEMBERS = [Member(NORM, {"x": "x", "w": "norm_w", "y": "xn"}, "norm"),
           Member(PROJ, {"a": "wk", "x": "xn", "y": "k"}, "k")]
GROUP = stitch("rms_gemv", MEMBERS)


def arrays(seed=0):
    return GROUP.make_arrays(np.random.default_rng(seed))


def test_group_table_and_roles():
    names = {g for m in MEMBERS for g in m.argmap.values()}
    assert [a.name for a in GROUP.args] == ["x", "norm_w", "xn", "wk", "k"]
    assert len(GROUP.args) == len(names)
    roles = {a.name: a.role for a in GROUP.args}
    assert roles == {"x": "input", "norm_w": "weight", "xn": "intermediate", "wk": "weight",
                     "k": "output"}
    assert GROUP.links == ("mv.o",) and "%arg4" in GROUP.table()


@needs_mlir
def test_group_verifies_with_upstream_mlir():
    V.verify(GROUP.text)
    V.verify(wrap_bare_herds(NORM.text))


def test_plan_read_back_from_text():
    plan = read_plan(GROUP.text)
    assert len(plan.launches) == len(MEMBERS)
    assert len(plan.args) == len(GROUP.args)
    assert not any(lp.bare for lp in plan.launches)
    idx = {a.name: i for i, a in enumerate(GROUP.args)}
    assert plan.launches[0].args == tuple(sorted(idx[g] for g in ("x", "norm_w", "xn")))
    assert plan.launches[1].args == tuple(sorted(idx[g] for g in ("xn", "wk", "k")))
    # the external kernel is declared once and the herds keep their sizes
    assert plan.externs == {"matvec_bf16": "mv.o"}
    assert [h.size for lp in plan.launches for h in lp.herds] == [NORM.herd, PROJ.herd]


def test_wrapping_a_bare_herd_keeps_the_numbers():
    bare = read_plan(NORM.text)
    wrapped = wrap_bare_herds(NORM.text)
    plan = read_plan(wrapped)
    assert bare.launches[0].bare and not plan.launches[0].bare
    assert plan.launches[0].herds[0].size == bare.launches[0].herds[0].size
    a = NORM.make_arrays(np.random.default_rng(3))
    b = [x.copy() for x in a]
    run(NORM.text, *a)
    run(wrapped, *b)
    assert np.array_equal(a[2], b[2]) and np.abs(a[2]).max() > 0


def test_stitched_equals_one_by_one_bit_for_bit_and_float64():
    a, b = arrays(), arrays()
    report = run(GROUP, *a)
    assert report.launches == 2 and "emulated" in str(report)
    run_one_by_one(GROUP, MEMBERS, b)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    # independent float64 reference: normalise then project
    x, w, wk = (a[GROUP.arg_index(n)].astype(np.float64) for n in ("x", "norm_w", "wk"))
    xn = x / np.sqrt(np.mean(x * x) + S.rms_eps) * w
    k_ref = wk @ xn
    k = a[GROUP.arg_index("k")]
    err = np.abs(k - k_ref)
    # xn rounded to bf16 (2^-9 relative per element) feeds a K-long dot product: bound the error
    # by that rounding propagated through |wk| plus one bf16 rounding of the result
    bound = 2.0**-8 * (np.abs(wk) @ np.abs(xn)) + 2.0**-8 * np.abs(k_ref)
    assert np.all(err <= bound)


def test_corrupted_argument_map_changes_the_result():
    good = arrays()
    run(GROUP, *good)
    k = GROUP.arg_index("k")
    # 1. a wrong map entry: the projection reads the raw input instead of the normalised one
    bad_members = [MEMBERS[0], Member(PROJ, {"a": "wk", "x": "x", "y": "k"}, "k")]
    bad = stitch("rms_gemv", bad_members)
    arr = arrays()
    names = [a.name for a in bad.args]
    run(bad, *[arr[GROUP.arg_index(n)] for n in names])
    assert not np.array_equal(arr[k], good[k])
    # 2. the same corruption done to the stitched text: the second launch's %arg2 -> %arg0
    lines = GROUP.text.split("\n")
    i = [j for j, l in enumerate(lines) if '"air.launch"(' in l][1]
    lines[i] = lines[i].replace("%arg2", "%arg0")
    text = "\n".join(lines)
    assert read_plan(text).launches[1].args != read_plan(GROUP.text).launches[1].args
    arr = arrays()
    run(text, *arr)
    assert not np.array_equal(arr[k], good[k])


def test_same_kernel_twice_gets_distinct_names():
    # the K and V projections: one kernel twice on one input
    g = stitch("kv", [Member(PROJ, {"a": "wk", "x": "x", "y": "k"}, "k"),
                      Member(PROJ, {"a": "wv", "x": "x", "y": "v"}, "v")])
    assert [a.role for a in g.args] == ["weight", "input", "output", "weight", "output"]
    defs = re.findall(r"^\s*(%[\w.$-]+) = ", g.text, re.M)
    assert len(defs) == len(set(defs))
    syms = re.findall(r'sym_name = "([^"]+)"', g.text)
    assert len(syms) == len(set(syms))
    if V.available():
        V.verify(g.text)


def test_aliases_share_a_buffer_written_once():
    # residual add into h, then the norm reads h: one DDR buffer, roles follow
    res = add(1, S.hidden, flat=(False, False, True))
    g = stitch("add_norm", [Member(res, {"a": "x", "b": "o", "out": "h"}, "res"),
                            Member(NORM, {"x": "h", "w": "w", "y": "y"}, "norm")])
    roles = {a.name: a.role for a in g.args}
    assert roles == {"x": "input", "o": "input", "h": "intermediate", "w": "weight", "y": "output"}
    a = g.make_arrays(np.random.default_rng(1))
    b = [x.copy() for x in a]
    run(g, *a)
    g.model(*b)
    assert np.array_equal(a[g.arg_index("h")], b[g.arg_index("h")])


def test_derive_roles_rules():
    ev = [[("a", "input"), ("b", "output")], [("b", "input"), ("c", "weight"), ("d", "output")]]
    assert derive_roles(ev, ["a", "b", "c", "d"]) == {"a": "input", "b": "intermediate",
                                                     "c": "weight", "d": "output"}
    # read before it is written, never read after: the host reads what was written
    assert derive_roles([[("a", "input")], [("a", "output")]], ["a"]) == {"a": "output"}


def test_bad_groups_are_one_line_errors():
    with pytest.raises(LlamanbError, match="has no argument"):
        stitch("g", [Member(NORM, {"nope": "x"})])
    with pytest.raises(LlamanbError, match="already"):
        stitch("g", [Member(NORM, {"y": "h"}, "n"), Member(PROJ, {"a": "h"}, "p")])
    with pytest.raises(LlamanbError, match="declared twice"):
        stitch("g", [Member(PROJ, {}, "p1"), Member(gemv(S.hidden, S.ffn), {}, "p2")])
    with pytest.raises(LlamanbError, match="labelled"):
        stitch("g", [Member(PROJ, {}, "p"), Member(PROJ, {}, "p")])
    with pytest.raises(LlamanbError, match="no kernels"):
        stitch("g", [])

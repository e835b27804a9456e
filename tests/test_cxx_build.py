"""llamanb.platform.cxx_build: every source compiled to its own object in parallel, then linked; a source
the compiler rejects gives no library and a reason quoting its error; a cached build is reused."""
from __future__ import annotations

import ctypes

import pytest

from llamanb.platform import cxx_build

FLAGS = ("-std=c++17", "-O1", "-shared", "-fPIC")


def _sources(d, body_b: str):
    d.mkdir()
    (d / "a.cc").write_text('extern "C" int b_twice(int);\n'
                            'extern "C" int a_plus_one(int x) { return b_twice(x) + 1; }\n')
    (d / "b.cc").write_text(body_b)
    (d / "common.h").write_text("// a header: part of the key, not compiled on its own\n")
    return d


def test_sources_compile_apart_and_link_into_one_library(tmp_path):
    if cxx_build.compiler()[0] is None:
        pytest.skip("no C++ compiler")
    src = _sources(tmp_path / "k", 'extern "C" int b_twice(int x) { return 2 * x; }\n')
    built = cxx_build.build(src, tmp_path / "cache", FLAGS, "t")
    assert built is not None and not built.cache_hit, cxx_build.reason(src, FLAGS)
    lib = ctypes.CDLL(str(built.path))              # a's call into b resolved at the link
    assert lib.a_plus_one(20) == 41
    # nothing left behind but the library: no objects, no temporary files
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [built.path.name]
    again = cxx_build.build(src, tmp_path / "cache", FLAGS, "t")
    assert again.cache_hit and again.path == built.path and again.key == built.key


def test_a_rejected_source_gives_no_library_and_the_compilers_error(tmp_path):
    if cxx_build.compiler()[0] is None:
        pytest.skip("no C++ compiler")
    src = _sources(tmp_path / "k", 'extern "C" int b_twice(int x) { return 2 * undeclared_name; }\n')
    assert cxx_build.build(src, tmp_path / "cache", FLAGS, "t") is None
    why = cxx_build.reason(src, FLAGS)
    assert "could not build" in why and "undeclared_name" in why and "\n" not in why
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_largest_units_compile_first(tmp_path, monkeypatch):
    """Units start largest first (a unit that includes another .cc counts its bytes too), so the
    longest compile is not left to run alone at the end; the link still takes them in name order."""
    import os
    import subprocess

    d = tmp_path / "k"
    d.mkdir()
    (d / "a.cc").write_text("int a;\n")
    (d / "big.cc").write_text("int big;\n" + "// padding\n" * 400)
    (d / "c_again.cc").write_text('#define AGAIN\n#include "big.cc"\n')
    (d / "d.cc").write_text("int d;\n" + "// padding\n" * 40)
    started = []

    def fake_run(cmd, **kw):
        started.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)  # one at a time
    cc = sorted(d.glob("*.cc"))
    cxx_build._compile_and_link("c++", FLAGS, cc, tmp_path, str(tmp_path / "out.so"))
    compiled = [c[c.index("-c") + 1].rsplit("/", 1)[1] for c in started if "-c" in c]
    assert compiled[:2] == ["c_again.cc", "big.cc"] and compiled[2:] == ["d.cc", "a.cc"]
    link = started[-1]
    assert "-c" not in link and [a.rsplit("/", 1)[1] for a in link if a.endswith(".o")] == \
        ["0-a.o", "1-big.o", "2-c_again.o", "3-d.o"]

"""llamanb.platform.cxx_build: every source compiled to its own object in parallel, then linked; a source
the compiler rejects gives no library and a reason quoting its error; a cached build is reused."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

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
    # nothing left behind but the library, its record and the directory's ownership marker:
    # no objects, no temporary files
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == \
        sorted([built.path.name, built.path.name + ".json", ".llamanb-cache"])
    again = cxx_build.build(src, tmp_path / "cache", FLAGS, "t")
    assert again.cache_hit and again.path == built.path and again.key == built.key


def test_a_rejected_source_gives_no_library_and_the_compilers_error(tmp_path):
    if cxx_build.compiler()[0] is None:
        pytest.skip("no C++ compiler")
    src = _sources(tmp_path / "k", 'extern "C" int b_twice(int x) { return 2 * undeclared_name; }\n')
    assert cxx_build.build(src, tmp_path / "cache", FLAGS, "t") is None
    why = cxx_build.reason(src, FLAGS)
    assert "could not build" in why and "undeclared_name" in why and "\n" not in why
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".llamanb-cache"]


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


# ---- a damaged or half-built library in the cache ------------------------------------------------
LOAD_AND_CALL = """
import sys
from pathlib import Path
from llamanb.platform import cxx_build
lib = cxx_build.load(Path(sys.argv[1]), ("-std=c++17", "-O1", "-shared", "-fPIC"), "t", Path(sys.argv[2]))
print(lib.a_plus_one(20))
"""


def _load_in_child(src, cache):
    """Load (building if needed) and call the library in a fresh process: a damaged .so that
    reached ctypes would kill it (SIGBUS, exit 135 from a shell) or raise OSError there."""
    from conftest import REPO_ROOT

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-c", LOAD_AND_CALL, str(src), str(cache)],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("damage", ["truncated", "empty", "no record", "flipped bytes"])
def test_a_damaged_library_is_built_again_before_it_is_loaded(tmp_path, damage):
    if cxx_build.compiler()[0] is None:
        pytest.skip("no C++ compiler")
    src = _sources(tmp_path / "k", 'extern "C" int b_twice(int x) { return 2 * x; }\n')
    built = cxx_build.build(src, tmp_path / "cache", FLAGS, "t")
    whole = built.path.read_bytes()
    if damage == "truncated":
        built.path.write_bytes(whole[: len(whole) // 2])
    elif damage == "empty":
        built.path.write_bytes(b"")
    elif damage == "no record":                 # a library of an older llamanb, or not llamanb's
        cxx_build.record_path(built.path).unlink()
    else:
        mid = len(whole) // 2
        built.path.write_bytes(whole[:mid] + bytes(b ^ 0xFF for b in whole[mid:mid + 64])
                               + whole[mid + 64:])
    p = _load_in_child(src, tmp_path / "cache")
    assert p.returncode == 0 and p.stdout.strip() == "41", (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("llamanb: the cached kernel library ") and "is damaged" in lines[0] \
        and lines[0].endswith("building it again"), lines[0]
    assert built.path.read_bytes() == whole and cxx_build.library_problem(built.path) is None
    again = _load_in_child(src, tmp_path / "cache")          # whole again: nothing said
    assert again.returncode == 0 and again.stderr == "", again.stderr


def test_a_compiler_that_writes_nothing_leaves_no_library(tmp_path, monkeypatch):
    """A compiler that exits 0 without writing its output (seen: a 0-byte .so under the final
    name, loaded next time): no library, a reason saying so, nothing under the final name."""
    fake = tmp_path / "bin" / "fake-c++"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'fake c++ 1.0'\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LLAMANB_CXX", str(fake))
    src = _sources(tmp_path / "k", 'extern "C" int b_twice(int x) { return 2 * x; }\n')
    assert cxx_build.build(src, tmp_path / "cache", FLAGS, "t") is None
    why = cxx_build.reason(src, FLAGS)
    assert "exited 0 but wrote no shared library" in why and "\n" not in why, why
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".llamanb-cache"]


HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_a_killed_builds_leftovers_are_swept_by_the_next_build(tmp_path):
    """A build killed outright leaves `<lib>.<8>.tmp` and `<lib>.obj.<8>/`; the next build
    removes them, but not a live build's (it holds their lock), nor anything else."""
    if cxx_build.compiler()[0] is None:
        pytest.skip("no C++ compiler")
    src = _sources(tmp_path / "k", 'extern "C" int b_twice(int x) { return 2 * x; }\n')
    cache = tmp_path / "cache"
    cache.mkdir()
    name = cxx_build.library_name("t", cxx_build.build_key(cxx_build.compiler()[0], src, FLAGS))
    dead_so, live_so = cache / f"{name}.ab12cd34.tmp", cache / f"{name}.zz99yy88.tmp"
    dead_objs, live_objs = cache / f"{name}.obj.qw12er34", cache / f"{name}.obj.as56df78"
    for f in (dead_so, live_so):
        f.write_bytes(b"\x7fELF half")
    for d in (dead_objs, live_objs):
        d.mkdir()
        (d / "0-a.o").write_bytes(b"obj")
    mine = cache / "notes.tmp"
    mine.write_text("the user's")
    holders = [subprocess.Popen([sys.executable, "-c", HOLD, str(p)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for p in (live_so, live_objs)]
    try:
        for h in holders:
            assert h.stdout.readline().strip() == "locked"
        built = cxx_build.build(src, cache, FLAGS, "t")
        assert built is not None and not built.cache_hit
        assert not dead_so.exists() and not dead_objs.exists()
        assert live_so.is_file() and (live_objs / "0-a.o").is_file()
        assert mine.read_text() == "the user's"
    finally:
        for h in holders:
            h.kill()
            h.wait()
    assert sorted(p.name for p in cxx_build.sweep_abandoned(cache)) == sorted([live_so.name,
                                                                               live_objs.name])

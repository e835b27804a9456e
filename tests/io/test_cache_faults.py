"""Faults of the places llamanb writes, made for real: the cache variable pointing at a regular
file, below one, somewhere that cannot be created, a read-only filesystem, a full one; `bench
--json` and `verify --save` to a read-only place; a truncated GGUF. Each is one line on stderr,
exit code 2, said before any work, and leaves nothing behind.

Read-only and full filesystems are small tmpfs mounts (`mount -t tmpfs -o size=...`); where this
process may not mount (not root, no CAP_SYS_ADMIN) those cases skip and say why.

The commands run in this process (conftest.run_cli_here: llamanb.cli.main(argv), what `python -m
llamanb` runs, its exit status and stderr captured as a child's)."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import make_tiny_checkpoint, run_cli_here, write_tiny_gguf

from llamanb.errors import LlamanbError


def one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("llamanb: error: "), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults") / "tiny"
    hf = make_tiny_checkpoint(d, n_heads=4, n_kv_heads=2, tie=True, seed=0)
    return d, hf


def _need(model_dir) -> int:
    from llamanb.io.store import conversion_bytes, open_source

    return conversion_bytes(open_source(model_dir).config)


@pytest.fixture
def mount_tmpfs(tmp_path):
    """mount_tmpfs(name, options) -> a fresh tmpfs mounted at tmp_path/name (unmounted after)."""
    mounted = []

    def mount(name: str, options: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): "
                        "read-only and full filesystems are not testable on this machine")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _generate(model, cache, *extra):
    return run_cli_here(["generate", "--model", model, "--raw", "--prompt", "w3 w4", "--max-new-tokens",
                    "2", *extra], cache=cache)


# ---- the cache location -------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["regular file", "below a file", "cannot be created"])
def test_cache_path_faults(tmp_path, tiny, case):
    model, _ = tiny
    f = tmp_path / "a-file"
    f.write_text("not a directory")
    cache = {"regular file": f, "below a file": f / "cache",
             "cannot be created": Path("/proc/llamanb-cache")}[case]
    line = one_line(_generate(model, cache))
    assert str(cache) in line and "LLAMANB_CACHE" in line
    assert {"regular file": "it is a regular file", "below a file": "Not a directory",
            "cannot be created": "cannot be created"}[case] in line
    from llamanb.platform.paths import megabytes

    assert f"needs about {megabytes(_need(model))}" in line
    assert f.read_text() == "not a directory"                # nothing touched


def test_read_only_cache(tmp_path, tiny, mount_tmpfs):
    model, _ = tiny
    ro = mount_tmpfs("ro", "size=16m,ro")
    line = one_line(_generate(model, ro))
    assert str(ro) in line and "Read-only file system" in line and "LLAMANB_CACHE" in line
    line = one_line(_generate(model, ro / "sub"))            # a cache to create on it
    assert "cannot be created (Read-only file system)" in line


def test_full_disk_is_said_before_any_work(tmp_path, smollm_gguf_path, mount_tmpfs):
    """The embedded model needs ~538 MB converted; a 1 MB filesystem is refused up front, in about
    the time it takes to read the GGUF's header, and keeps nothing."""
    small = mount_tmpfs("small", "size=1m")
    t0 = time.perf_counter()
    line = one_line(run_cli_here(["generate", "--prompt", "hi", "--max-new-tokens", "1"], cache=small))
    took = time.perf_counter() - t0
    assert "No space left" in line and "MB free" in line and "needs about 538 MB" in line, line
    assert os.listdir(small) == []
    print(f"refused in {took:.1f} s: {line}")


def _fill(fs: Path) -> None:
    """Write until the filesystem is full (ENOSPC for real)."""
    with open(fs / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def test_disk_full_during_conversion_is_one_line_and_leaves_nothing(tiny, mount_tmpfs,
                                                                    monkeypatch):
    """A filesystem that fills while the conversion writes (the up-front check passed): the
    OSError from the write is one LlamanbError naming the cache and the room, and the temporary
    directory is gone."""
    from llamanb.io.store import convert, open_source

    model, _ = tiny
    fs = mount_tmpfs("fills", "size=1m")
    monkeypatch.setenv("LLAMANB_CACHE", str(fs))
    _fill(fs)
    with pytest.raises(LlamanbError) as e:
        convert(open_source(model), fs / "tiny-0123456789abcdef")
    msg = str(e.value)
    assert "No space left on device" in msg and str(fs) in msg and "needs about" in msg
    assert "\n" not in msg
    assert sorted(os.listdir(fs)) == ["filler"]


def test_a_full_disk_does_not_stop_a_derived_layout(tiny, mount_tmpfs, monkeypatch):
    """The cache took the conversion, then filled: a backend's derived layout (its packed
    weights) is built in memory, so it still works and the cache entry gains no file (the cache
    holds the weights once)."""
    import numpy as np

    from llamanb.io.store import load_model

    model, _ = tiny
    fs = mount_tmpfs("derived", "size=2m")
    monkeypatch.setenv("LLAMANB_CACHE", str(fs))
    m = load_model(model)
    _fill(fs)
    before = sorted(os.listdir(m.cache_dir))
    got = m.weights.derived("panels-test", {"w": ((512, 512), lambda: np.ones((512, 512), np.float32))})
    assert got["w"].shape == (512, 512) and float(got["w"].sum()) == 512 * 512
    assert sorted(os.listdir(m.cache_dir)) == before


# ---- output files named by options: checked before anything runs -----------------------------------
def test_bench_json_to_a_read_only_place_fails_before_measuring(tmp_path, mount_tmpfs):
    ro = mount_tmpfs("ro-json", "size=1m,ro")
    t0 = time.perf_counter()
    line = one_line(run_cli_here(["bench", "--no-transformers", "--json", ro / "out.json"],
                            cache=tmp_path / "cache"))
    assert "--json" in line and "Read-only file system" in line and "before anything runs" in line
    assert time.perf_counter() - t0 < 60                     # refused, not measured
    assert not (tmp_path / "cache").exists()                 # no model was even converted
    line = one_line(run_cli_here(["verify", "--live", "--save", ro / "ref.json"], cache=tmp_path / "c"))
    assert "--save" in line and "Read-only file system" in line


def test_bench_json_written_whole(tmp_path):
    """report.write_json writes a temporary and renames it: no temporary stays beside the file."""
    import json

    from llamanb.bench.report import write_json

    write_json(str(tmp_path / "r.json"), {"a": [1, 2]})
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": [1, 2]}
    assert os.listdir(tmp_path) == ["r.json"]


# ---- a GGUF cut short ----------------------------------------------------------------------------
@pytest.mark.parametrize("cut", ["header", "tensor-data", "last-byte"])
def test_truncated_gguf_says_truncated_with_the_sizes(tmp_path, tiny, cut):
    import gguf

    _, hf = tiny
    whole = tmp_path / "whole.gguf"
    write_tiny_gguf(whole, hf, qtype="Q8_0")
    data = whole.read_bytes()
    start = gguf.GGUFReader(str(whole)).data_offset
    n = {"header": 200, "tensor-data": (start + len(data)) // 2, "last-byte": len(data) - 1}[cut]
    (tmp_path / "cut.gguf").write_bytes(data[:n])
    line = one_line(_generate(tmp_path / "cut.gguf", tmp_path / "cache"))
    assert "truncated GGUF file" in line and f"{n:,} bytes" in line
    if cut != "header":                                      # the gguf package's own reading
        assert f"need {len(data):,}" in line and f"({len(data) - n:,} missing" in line
    else:
        assert "inside its header" in line


# ---- arguments before output -----------------------------------------------------------------------
def test_info_with_a_bad_argument_prints_nothing_else(tmp_path):
    p = run_cli_here(["info", "--preset", "gpt-5"], cache=tmp_path / "cache")
    assert "unknown preset" in one_line(p) and p.stdout == ""


def test_no_command_is_one_line_naming_the_commands(tmp_path):
    line = one_line(run_cli_here([], cache=tmp_path / "cache"))
    assert "name a command: generate | chat | verify" in line

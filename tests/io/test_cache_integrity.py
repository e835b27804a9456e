"""The cache is llamanb's own and checked before use: entries keyed by the source's bytes, a
marker in every directory it creates, pruning that touches only what it wrote, damaged entries
found (sizes and checksums recorded when written) and converted again in one line."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, make_tiny_checkpoint, run_cli_here

from llamanb.io.store import entry_problem, load_model
from llamanb.platform import cache_files


@pytest.fixture
def tiny_dir(tmp_path):
    d = tmp_path / "ck"
    make_tiny_checkpoint(d, n_heads=4, n_kv_heads=2, tie=True, seed=3)
    return d


def _llamanb_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("llamanb:")]


# ---- keyed by content ------------------------------------------------------------------------------
def test_a_copy_of_the_same_bytes_finds_the_entry(tiny_dir, fresh_cache, tmp_path):
    """A new clone (another path, new mtimes) reuses the entry; changed bytes do not."""
    first = load_model(tiny_dir)
    clone = tmp_path / "clone" / "ck"
    shutil.copytree(tiny_dir, clone)                    # new path, inode and mtime
    for f in clone.iterdir():
        os.utime(f, ns=(1, 1))
    again = load_model(clone)
    assert again.converted is False and again.cache_dir == first.cache_dir
    info = json.loads((first.cache_dir / "llamanb.json").read_text())
    assert info["sources"] == [str(tiny_dir.absolute()), str(clone.absolute())]
    cfg = json.loads((clone / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-6
    (clone / "config.json").write_text(json.dumps(cfg))
    assert load_model(clone).cache_dir != first.cache_dir


def test_the_source_digest_is_remembered(smollm_gguf_path, tmp_path, monkeypatch):
    """The embedded GGUF is hashed once; a re-run with the same file pays a stat."""
    from llamanb.io import cache_keys

    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path))
    t0 = time.perf_counter()
    key = cache_keys.entry_key(smollm_gguf_path)
    t1 = time.perf_counter()
    assert cache_keys.file_digest(smollm_gguf_path, cache_keys._read_memo(tmp_path))[1] is False
    t2 = time.perf_counter()
    assert cache_keys.entry_key(smollm_gguf_path) == key
    t3 = time.perf_counter()
    print(f"{smollm_gguf_path.stat().st_size / 1e6:.0f} MB GGUF: hashed in {t1 - t0:.2f} s, "
          f"remembered in {(t3 - t2) * 1e3:.2f} ms")
    assert t3 - t2 < 0.1


# ---- damaged entries --------------------------------------------------------------------------------
def test_50_mb_zeroed_inside_the_embedded_weights_is_found(smollm, tmp_path):
    """The sampled checksum finds 50 MB of zeros written inside the 538 MB weights (before: a
    silent wrong answer), and the check of an intact entry costs milliseconds."""
    entry = tmp_path / smollm.cache_dir.name
    shutil.copytree(smollm.cache_dir, entry)
    t0 = time.perf_counter()
    assert entry_problem(entry) is None
    took = time.perf_counter() - t0
    st = entry / "model.safetensors"
    with open(st, "r+b") as f:
        f.seek(st.stat().st_size // 3)
        f.write(b"\0" * (50 << 20))
    assert "model.safetensors does not match its checksum" in entry_problem(entry)
    print(f"load-time check of the intact {st.stat().st_size / 1e6:.0f} MB entry: {took * 1e3:.1f} ms")


@pytest.mark.parametrize("damage", ["weights truncated", "weights zeroed", "tokenizer truncated",
                                    "config emptied"])
def test_a_damaged_entry_is_converted_again_in_one_line(tiny_dir, tmp_path, damage):
    """Through the command line: one line on stderr, the answer the intact entry gives, exit 0."""
    cache = tmp_path / "cache"
    args = ["generate", "--model", tiny_dir, "--raw", "--prompt", "w3 w4", "--max-new-tokens", "4"]
    intact = run_cli_here(args, cache=cache)
    assert intact.returncode == 0, intact.stderr
    (entry,) = [d for d in cache.iterdir() if d.is_dir()]
    name, cut = {"weights truncated": ("model.safetensors", "cut"),
                 "weights zeroed": ("model.safetensors", "zero"),
                 "tokenizer truncated": ("tokenizer.json", "cut"),
                 "config emptied": ("config.json", "empty")}[damage]
    f = entry / name
    data = f.read_bytes()
    f.write_bytes({"cut": data[: len(data) // 2], "empty": b"",
                   "zero": data[:4096] + b"\0" * (len(data) - 8192) + data[-4096:]}[cut])
    p = run_cli_here(args, cache=cache)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    (line,) = _llamanb_lines(p.stderr)
    assert line.startswith(f"llamanb: the cache entry {entry} is damaged ({name} ") \
        and line.endswith("converting the model again"), line
    assert p.stdout == intact.stdout
    assert f.read_bytes() == data
    assert _llamanb_lines(run_cli_here(args, cache=cache).stderr) == []


def test_a_damaged_entry_in_a_read_only_cache_is_one_line(tiny_dir, tmp_path):
    """Where the damaged entry cannot be replaced (a read-only cache): one LlamanbError line,
    exit 2; an intact read-only cache loads."""
    cache = tmp_path / "cache"
    load_model_in(cache, tiny_dir)
    (entry,) = [d for d in cache.iterdir() if d.is_dir()]
    r = subprocess.run(["mount", "--bind", str(cache), str(cache)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot bind-mount here: a read-only cache is not testable")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(cache)], check=True)
        args = ["generate", "--model", tiny_dir, "--raw", "--prompt", "w3", "--max-new-tokens", "2"]
        ok = run_cli_here(args, cache=cache)
        assert ok.returncode == 0 and _llamanb_lines(ok.stderr) == [], ok.stderr
        subprocess.run(["mount", "-o", "remount,bind,rw", str(cache)], check=True)
        st = entry / "model.safetensors"
        st.write_bytes(st.read_bytes()[:100])
        subprocess.run(["mount", "-o", "remount,bind,ro", str(cache)], check=True)
        p = run_cli_here(args, cache=cache)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        lines = _llamanb_lines(p.stderr)
        assert lines[-1].startswith("llamanb: error: ") and "cannot be replaced" in lines[-1] \
            and "Read-only file system" in lines[-1], lines
    finally:
        subprocess.run(["umount", "-l", str(cache)], capture_output=True)


def load_model_in(cache: Path, model) -> None:
    p = run_cli_here(["info", "--model", model], cache=cache)
    assert p.returncode == 0, p.stderr


def test_two_processes_converting_at_once_end_with_one_whole_entry(tiny_dir, tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, LLAMANB_CACHE=str(cache), PYTHONPATH=str(REPO_ROOT))
    procs = [subprocess.Popen([sys.executable, "-m", "llamanb", "info", "--model", str(tiny_dir)],
                              env=env, cwd=str(REPO_ROOT), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-1500:] for o in outs]
    entries = [d for d in cache.iterdir() if not d.name.startswith(".") and d.is_dir()]
    assert len(entries) == 1 and entry_problem(entries[0]) is None
    assert not [n for n in os.listdir(cache) if n.startswith(".") and n != cache_files.MARKER]


# ---- owned: list and prune touch only what llamanb wrote ----------------------------------------------
def _users_files(cache: Path) -> dict[str, bytes]:
    cache.mkdir(parents=True, exist_ok=True)
    files = {"notes.txt": b"mine", "photos/cat.jpg": b"\xff\xd8 a cat",
             "Model-0123456789abcdef/config.json": b"{}",          # looks like an entry: not one
             "cpu/cpu-kernels-" + "0" * 24 + ".so": b"not an ELF",  # nor this
             ".hidden-0123456789abcdef.abcdefgh/x": b"a dot dir"}
    for rel, data in files.items():
        (cache / rel).parent.mkdir(parents=True, exist_ok=True)
        (cache / rel).write_bytes(data)
    return files


def test_clean_cache_keeps_the_users_files(tiny_dir, tmp_path):
    """`make clean-cache` with LLAMANB_CACHE at a directory that also holds the user's files:
    llamanb's entries go, every other file stays (before: rm -rf took them all)."""
    cache = tmp_path / "mixed"
    files = _users_files(cache)
    load_model_in(cache, tiny_dir)
    assert any(cache_files.marked(d) == "model" for d in cache.iterdir())
    env = dict(os.environ, LLAMANB_CACHE=str(cache), PYTHONPATH=str(REPO_ROOT))
    r = subprocess.run(["make", "-s", "-C", str(REPO_ROOT), "clean-cache", f"PYTHON={sys.executable}",
                        f"VENV={tmp_path / 'no-venv'}"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "removed 1 entry" in r.stdout, r.stdout
    left = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert left == sorted(files), left
    assert all((cache / rel).read_bytes() == data for rel, data in files.items())


def test_clean_cache_removes_the_directory_llamanb_made(tiny_dir, tmp_path):
    cache = tmp_path / "made-by-llamanb" / "cache"
    load_model_in(cache, tiny_dir)
    assert cache_files.marked(cache) == "root"
    p = run_cli_here(["cache", "prune", "--all"], cache=cache)
    assert p.returncode == 0, p.stderr
    assert not cache.exists() and (tmp_path / "made-by-llamanb").is_dir()


def test_cache_lists_entries_and_prunes_those_whose_source_is_gone(tiny_dir, tmp_path):
    cache = tmp_path / "cache"
    gone = tmp_path / "gone"
    make_tiny_checkpoint(gone, n_heads=4, n_kv_heads=2, tie=True, seed=5)
    load_model_in(cache, tiny_dir)
    load_model_in(cache, gone)
    _users_files(cache)
    listed = run_cli_here(["cache"], cache=cache)
    assert listed.returncode == 0, listed.stderr
    assert "2 entries" in listed.stdout and str(tiny_dir.absolute()) in listed.stdout
    assert "[prune" not in listed.stdout and "last used" in listed.stdout
    shutil.rmtree(gone)
    listed = run_cli_here(["cache", "list"], cache=cache)
    assert "[prune: its source is gone or changed" in listed.stdout, listed.stdout
    p = run_cli_here(["cache", "prune"], cache=cache)
    assert p.returncode == 0 and "removed 1 entry" in p.stdout, p.stdout
    models = [d for d in cache.iterdir() if cache_files.marked(d) == "model"]
    assert len(models) == 1 and str(tiny_dir.absolute()) in (models[0] / "llamanb.json").read_text()
    assert (cache / "notes.txt").read_bytes() == b"mine"


def test_prune_removes_a_library_whose_sources_changed(tmp_path, monkeypatch):
    from llamanb.io.cache_inventory import prune
    from llamanb.platform import cxx_build

    if cxx_build.compiler()[0] is None:
        pytest.skip("no C++ compiler")
    cache = tmp_path / "cache"
    monkeypatch.setenv("LLAMANB_CACHE", str(cache))
    src = tmp_path / "k"
    src.mkdir()
    (src / "a.cc").write_text('extern "C" int one() { return 1; }\n')
    flags = ("-std=c++17", "-O1", "-shared", "-fPIC")
    old = cxx_build.build(src, cache / "cpu", flags, "t")
    (src / "a.cc").write_text('extern "C" int one() { return 2 - 1; }\n')
    new = cxx_build.build(src, cache / "cpu", flags, "t")
    removed, _ = prune(cache)
    assert [e.path for e in removed] == [old.path]
    assert new.path.is_file() and not old.path.exists()
    assert not cxx_build.record_path(old.path).exists()


def test_cache_command_on_a_file_is_one_line(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    p = run_cli_here(["cache", "prune", "--all"], cache=f)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "not a directory" in p.stderr and f.read_text() == "x"

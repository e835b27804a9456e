"""The conversion cache: convert once, memory-map afterwards, HF-loadable, robust to debris."""
from __future__ import annotations

import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT, TINY_VOCAB, hf_logits, make_tiny_checkpoint

from llamanb.engine.engine import Engine
from llamanb.errors import LlamanbError
from llamanb.io.store import load_model, sweep_abandoned
from llamanb.platform.cache_files import mark


def _reaches_memmap(a: np.ndarray) -> bool:
    return _mapping_of(a) is not None


def _mapping_of(a: np.ndarray):
    """The np.memmap or mmap.mmap an array's memory comes from, if any."""
    while a is not None:
        if isinstance(a, (np.memmap, mmap.mmap)):
            return a
        a = a.obj if isinstance(a, memoryview) else getattr(a, "base", None)
    return None


@pytest.fixture
def tiny_dir(tmp_path):
    d = tmp_path / "ck"
    make_tiny_checkpoint(d, n_heads=8, n_kv_heads=2, tie=False, seed=4)
    return d


# the cache's own bookkeeping beside its entries: the root's ownership marker and the memo of
# source digests (llamanb.platform.cache_files, llamanb.io.cache_keys)
BOOKKEEPING = {".llamanb-cache", "llamanb-sources.json"}


def _entries(cache) -> list[str]:
    return sorted(set(os.listdir(cache)) - BOOKKEEPING)


def test_convert_once_then_map(tiny_dir, fresh_cache):
    first = load_model(tiny_dir)
    assert first.converted is True
    assert first.cache_dir.parent == fresh_cache
    entries = _entries(fresh_cache)
    assert entries == [first.cache_dir.name]
    assert sorted(os.listdir(fresh_cache)) == sorted(entries + list(BOOKKEEPING))
    files = set(os.listdir(first.cache_dir))
    assert {"config.json", "model.safetensors", "tokenizer.json", "llamanb.json",
            ".llamanb-cache"} <= files
    assert not any(n.startswith(".") and n != ".llamanb-cache" or ".tmp" in n for n in files)

    second = load_model(tiny_dir)
    assert second.converted is False
    assert second.cache_dir == first.cache_dir
    assert _entries(fresh_cache) == entries                       # nothing new written
    w = second.weights
    arrays = [w.embed, w.lm_head, w.final_norm] + [getattr(lw, f) for lw in w.layers
                                                   for f in ("attn_norm", "wqkv", "wo", "ffn_norm",
                                                             "w_gate_up", "w_down")]
    for a in arrays:
        assert _reaches_memmap(a), type(a)
        assert not a.flags.owndata
    np.testing.assert_array_equal(first.weights.layers[1].wqkv, second.weights.layers[1].wqkv)


def test_fused_views_are_views_of_the_file(tiny_dir, fresh_cache):
    """wqkv and w_gate_up are views into the mapped file, and q/k/v, gate/up are views of them;
    their contents are the checkpoint's tensors (read independently with safetensors)."""
    from safetensors.numpy import load_file

    m = load_model(tiny_dir)
    on_disk = load_file(str(m.cache_dir / "model.safetensors"))
    src = load_file(str(tiny_dir / "model.safetensors"))
    for i, lw in enumerate(m.weights.layers):
        q, k, v = m.weights.split_qkv(i)
        g, u = m.weights.split_gate_up(i)
        for part in (q, k, v):
            assert np.shares_memory(part, lw.wqkv)
        for part in (g, u):
            assert np.shares_memory(part, lw.w_gate_up)
        assert _reaches_memmap(lw.wqkv) and not lw.wqkv.flags.owndata
        p = f"model.layers.{i}."
        np.testing.assert_array_equal(lw.wqkv, np.concatenate(
            [src[p + "self_attn.q_proj.weight"], src[p + "self_attn.k_proj.weight"],
             src[p + "self_attn.v_proj.weight"]]))
        np.testing.assert_array_equal(lw.w_gate_up, np.concatenate(
            [src[p + "mlp.gate_proj.weight"], src[p + "mlp.up_proj.weight"]]))
    assert set(on_disk) == set(src)
    for name, a in src.items():
        np.testing.assert_array_equal(on_disk[name], a)


def test_embedded_model_is_mapped_and_fused(smollm):
    from llamanb.io.store import load_model as load

    again = load(None)
    assert again.converted is False and again.cache_dir == smollm.cache_dir
    lw = again.weights.layers[0]
    assert _reaches_memmap(lw.wqkv) and not lw.wqkv.flags.owndata
    assert lw.wqkv.shape == (576 + 2 * 192, 576)
    assert again.weights.lm_head is again.weights.embed           # tied: one array


def test_transformers_loads_cache_dir_and_agrees(smollm, smollm_engine):
    """The cache directory is an HF checkpoint: transformers loads it as is and computes the same
    logits as llamanb. Measured over all 36 positions x 49152 logits (values up to ~30): max |diff|
    1.0e-4 (99.99th percentile 7e-5), last position 5e-5 -- float32 accumulation order only."""
    import torch
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(smollm.cache_dir, dtype=torch.float32).eval()
    ids = smollm.tokenizer.encode_prompt("Hi! Who are you?", chat=True)
    ref = hf_logits(hf, ids)
    ours = smollm_engine.logits_all(ids)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=3e-4)
    np.testing.assert_allclose(ours[-1], ref[-1], rtol=0, atol=2e-4)
    assert (np.argmax(ours, -1) == np.argmax(ref, -1)).mean() > 0.95


def test_tiny_cache_dir_reloads_in_transformers(tiny_dir, fresh_cache):
    import torch
    from transformers import LlamaForCausalLM

    m = load_model(tiny_dir)
    hf = LlamaForCausalLM.from_pretrained(m.cache_dir, dtype=torch.float32).eval()
    orig = LlamaForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    ids = [int(t) for t in np.random.default_rng(0).integers(3, TINY_VOCAB, 12)]
    np.testing.assert_array_equal(hf_logits(hf, ids), hf_logits(orig, ids))
    np.testing.assert_allclose(Engine(m).logits_all(ids), hf_logits(orig, ids), rtol=0, atol=1e-4)


@pytest.fixture
def kernels_already_built(fresh_cache, llamanb_cache):
    """fresh_cache as a user's cache is after the first cpu run: it holds the cpu kernels' library
    (built once for the session, copied in), so an engine here loads it instead of compiling
    them again (15 s and more each time; the build itself and its cache are tested in
    tests/backends/test_cpu_backend.py). Nothing is copied where no C++ compiler is found."""
    from llamanb.platform import cxx_build
    from llamanb.cpu import kernels as cpu_kernels

    if cxx_build.compiler()[0] is not None:
        try:
            os.environ["LLAMANB_CACHE"] = str(llamanb_cache)
            cpu_kernels.load()                        # built (or found) in the session's cache
            session_dir = cpu_kernels.cache_dir()
        finally:
            os.environ["LLAMANB_CACHE"] = str(fresh_cache)
        shutil.copytree(session_dir, cpu_kernels.cache_dir())
        assert cpu_kernels.built()                    # what the engines below will find
    return fresh_cache


def test_stale_temp_dir_is_ignored(tiny_dir, fresh_cache):
    """A crashed conversion leaves `.<name>-<key>.<random>/` behind: it is neither used nor fatal."""
    m = load_model(tiny_dir)
    name = m.cache_dir.name
    shutil.rmtree(m.cache_dir)
    stale = fresh_cache / f".{name}.x7k2q9"
    stale.mkdir()
    (stale / "config.json").write_text("{ half")
    (stale / "model.safetensors.tmp123").write_bytes(b"\0" * 100)
    m2 = load_model(tiny_dir)
    assert m2.converted is True and m2.cache_dir == m.cache_dir
    assert (m2.cache_dir / "llamanb.json").is_file()
    m3 = load_model(tiny_dir)
    assert m3.converted is False and m3.cache_dir == m.cache_dir


def test_stale_temp_dir_with_complete_looking_contents_is_ignored(tiny_dir, fresh_cache):
    """Even a temp dir that holds a llamanb.json (crash between writing it and the rename) is not
    picked up: only the final name counts."""
    m = load_model(tiny_dir)
    stale = fresh_cache / f".{m.cache_dir.name}.abc123"
    shutil.copytree(m.cache_dir, stale)
    (stale / "model.safetensors").write_bytes(b"\0" * 16)           # garbage weights
    shutil.rmtree(m.cache_dir)
    m2 = load_model(tiny_dir)
    assert m2.cache_dir == m.cache_dir and m2.converted is True


def test_half_deleted_cache_entry_is_recovered_or_reported(tiny_dir, fresh_cache):
    """A cache entry under the final name that lost its llamanb.json (e.g. an interrupted
    `rm -rf`) must not turn into a raw OSError traceback: reconvert, or raise LlamanbError."""
    m = load_model(tiny_dir)
    (m.cache_dir / "llamanb.json").unlink()
    try:
        m2 = load_model(tiny_dir)
    except LlamanbError:
        return
    assert (m2.cache_dir / "llamanb.json").is_file()


def test_source_change_triggers_reconversion(tiny_dir, fresh_cache):
    m1 = load_model(tiny_dir)
    cfg = json.loads((tiny_dir / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-6                                      # same shapes, new file
    (tiny_dir / "config.json").write_text(json.dumps(cfg))
    m2 = load_model(tiny_dir)
    assert m2.converted is True and m2.cache_dir != m1.cache_dir
    assert m2.config.rms_eps == pytest.approx(1e-6)


def test_corrupt_cached_weights_are_converted_again(tiny_dir, fresh_cache, capfd):
    m = load_model(tiny_dir)
    st = m.cache_dir / "model.safetensors"
    whole = st.read_bytes()
    st.write_bytes(whole[:1000])                                    # truncated
    m2 = load_model(tiny_dir)
    assert m2.converted is True and m2.cache_dir == m.cache_dir and st.read_bytes() == whole
    err = capfd.readouterr().err.strip().splitlines()
    assert [ln for ln in err if ln.startswith("llamanb:")] == [
        f"llamanb: the cache entry {m.cache_dir} is damaged (model.safetensors is 1,000 bytes, "
        f"{len(whole):,} when written); converting the model again"]


# ---- temporaries of killed conversions are swept; live ones are not ------------------------------------
HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


def _temps(cache) -> list[str]:
    return sorted(n for n in os.listdir(cache) if n.startswith(".") and n not in BOOKKEEPING) \
        if os.path.isdir(cache) else []


def _tree_bytes(d) -> int:
    return sum(f.stat().st_size for f in Path(d).rglob("*") if f.is_file())


@pytest.fixture
def lock_holder():
    """Start a process that flocks a directory (as a live conversion does) until it is stopped."""
    procs = []

    def start(path):
        p = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "locked"
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_sigkilled_conversion_is_swept_by_the_next_load(tiny_dir, fresh_cache, smollm_gguf_path):
    """Convert the embedded GGUF in a child; while it writes, a sweep must leave its temporary
    alone (the conversion then goes on); SIGKILL it mid-way: its temporary stays behind; the next
    load_model -- of another model -- removes it."""
    env = dict(os.environ, LLAMANB_CACHE=str(fresh_cache), PYTHONPATH=str(REPO_ROOT))
    child = subprocess.Popen([sys.executable, "-m", "llamanb", "info", "--model", str(smollm_gguf_path)],
                             cwd=str(REPO_ROOT), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and child.poll() is None:
            t = _temps(fresh_cache)
            if t and _tree_bytes(fresh_cache / t[0]) > 8 << 20:      # 8 MiB of tensors written
                break
            time.sleep(0.05)
        if child.poll() is not None:
            pytest.skip("the conversion finished before it could be caught mid-way")
        (tmp,) = _temps(fresh_cache)
        assert sweep_abandoned(fresh_cache) == []                     # live: its lock is held
        assert (fresh_cache / tmp).is_dir()
        before = _tree_bytes(fresh_cache / tmp)
        time.sleep(0.3)
        if child.poll() is None:                                       # still converting, still there
            assert _tree_bytes(fresh_cache / tmp) >= before
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode == 0:
        pytest.skip("the conversion finished before SIGKILL arrived")
    assert child.returncode == -signal.SIGKILL
    assert _temps(fresh_cache) == [tmp]                               # the debris SIGKILL leaves
    assert _tree_bytes(fresh_cache / tmp) > 8 << 20
    m = load_model(tiny_dir)                                          # a later run, another model
    assert _temps(fresh_cache) == []
    assert _entries(fresh_cache) == [m.cache_dir.name]


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_temp_dir_locked_by_a_live_process_is_left_alone(tiny_dir, fresh_cache, lock_holder):
    m = load_model(tiny_dir)
    live = fresh_cache / f".{m.cache_dir.name}.abcd1234"
    dead = fresh_cache / f".{m.cache_dir.name}.wxyz_789"
    for d in (live, dead):
        d.mkdir()
        mark(d, "temporary")                                          # as a conversion marks it
        (d / "model.safetensors").write_bytes(b"\0" * 4096)
    holder = lock_holder(live)
    assert load_model(tiny_dir).converted is False
    assert live.is_dir() and (live / "model.safetensors").is_file()    # held: untouched
    assert not dead.exists()                                          # nobody holds it: swept
    holder.kill()
    holder.wait()
    assert sweep_abandoned(fresh_cache) == [live]
    assert _temps(fresh_cache) == []


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_sweep_waits_for_nobody_and_skips_while_a_temporary_is_being_made(tiny_dir, fresh_cache,
                                                                         lock_holder):
    """While another process holds the cache root's lock (it is between creating its temporary
    and locking it), a sweep removes nothing and returns at once."""
    m = load_model(tiny_dir)
    orphan = fresh_cache / f".{m.cache_dir.name}.q1w2e3r4"
    orphan.mkdir()
    holder = lock_holder(fresh_cache)
    t0 = time.perf_counter()
    assert sweep_abandoned(fresh_cache) == []
    assert time.perf_counter() - t0 < 5
    assert orphan.is_dir()
    holder.kill()
    holder.wait()
    assert sweep_abandoned(fresh_cache) == [orphan]


def test_sweep_touches_only_llamanb_temporaries(tiny_dir, fresh_cache, tmp_path):
    """LLAMANB_CACHE may point at a directory that holds other things: only names of the form
    `.<entry>-<16 hex>.<8 chars>` that are real directories are candidates."""
    m = load_model(tiny_dir)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    keep = [fresh_cache / ".git", fresh_cache / ".config", fresh_cache / "notes",
            fresh_cache / f".{m.cache_dir.name}.short", fresh_cache / ".x-0123456789abcdef.ABCDEFGH"]
    for d in keep:
        d.mkdir()
    (fresh_cache / ".x-0123456789abcdef.abcdefgh.txt").write_text("a file")
    users = fresh_cache / ".x-0123456789abcdef.abcdefgh"          # a temporary's name, no marker:
    users.mkdir()                                                 # the user's, and not empty
    (users / "photo.jpg").write_bytes(b"\xff\xd8")
    keep.append(users)
    link = fresh_cache / f".{m.cache_dir.name}.linkname"
    link.symlink_to(outside, target_is_directory=True)
    assert sweep_abandoned(fresh_cache) == []
    assert all(d.is_dir() for d in keep)
    assert link.is_symlink() and (outside / "keep.txt").read_text() == "mine"
    assert (m.cache_dir / "llamanb.json").is_file()


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_half_written_derived_file_is_swept(tiny_dir, fresh_cache, lock_holder):
    """A backend's derived file (e.g. transposed weights) is written as `<tag>.safetensors.tmp<pid>`
    inside a finished entry: a killed writer's is removed by the next load, a live one's is not."""
    m = load_model(tiny_dir)
    Engine(m)                                                    # writes its derived file, if any
    dead = m.cache_dir / "numpy_derived.safetensors.tmp999999"
    live = m.cache_dir / "numpy_other.safetensors.tmp999998"
    for f in (dead, live):
        f.write_bytes(b"\0" * 4096)
    holder = lock_holder(live)
    before = sorted(os.listdir(m.cache_dir))
    assert load_model(tiny_dir).converted is False
    assert sorted(os.listdir(m.cache_dir)) == sorted(set(before) - {dead.name})
    holder.kill()
    holder.wait()
    assert sweep_abandoned(fresh_cache) == [live]
    assert not any(".tmp" in n for n in os.listdir(m.cache_dir))


@pytest.mark.parametrize("damage", ["truncate", "not_an_object", "no_name"])
def test_damaged_entry_metadata_is_converted_again(tiny_dir, fresh_cache, damage, capfd):
    m = load_model(tiny_dir)
    meta = m.cache_dir / "llamanb.json"
    text = meta.read_text()
    meta.write_text({"truncate": text[: len(text) // 2], "not_an_object": "[1, 2]",
                     "no_name": json.dumps({k: v for k, v in json.loads(text).items() if k != "name"})}[damage])
    m2 = load_model(tiny_dir)
    assert m2.converted is True and json.loads(meta.read_text())["name"] == m.config.name
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("llamanb:")]
    assert len(err) == 1 and "is damaged (llamanb.json" in err[0], err


def test_safetensors_bf16_bits_round_trip(tmp_path):
    """write_safetensors stores bfloat16 bit patterns as BF16; the reader maps them back raw
    and converts them as ml_dtypes does."""
    import ml_dtypes

    from llamanb.io.safetensors import SafetensorsFile, write_safetensors

    x = np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32)
    bits = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    write_safetensors(tmp_path / "t.safetensors", [("a", x.shape, lambda: x),
                                                   ("b", bits.shape, lambda: bits, "BF16")],
                      lock=False)
    f = SafetensorsFile(tmp_path / "t.safetensors")
    assert f.table["b"]["dtype"] == "BF16" and f.raw("b").dtype == np.uint16
    assert np.array_equal(f.raw("b"), bits)
    assert np.array_equal(f.get("b"), bits.view(ml_dtypes.bfloat16).astype(np.float32))
    assert np.array_equal(f.get("a"), x)
    with pytest.raises(LlamanbError, match="cannot write dtype"):
        write_safetensors(tmp_path / "u.safetensors", [("c", (1,), lambda: x[:1], "F64")],
                          lock=False)
    assert not (tmp_path / "u.safetensors").exists()


def test_cache_holds_one_copy_of_the_weights(tiny_dir, kernels_already_built):
    """Issue 29 item 4: whatever engines run (numpy, cpu float32, cpu bf16), the entry holds the
    float32 checkpoint and the tokenizer only -- every other layout is derived in memory -- and
    the copies an earlier version cached beside it are removed at the next load (nothing else)."""
    from llamanb.platform import cxx_build
    from llamanb.io.store import entry_bytes

    model = load_model(tiny_dir)
    ids = [1, 5, 9, 2]
    want = Engine(model).prefill(ids, Engine(model).new_cache(8))
    files = set(os.listdir(model.cache_dir))
    engines = ["numpy"] + (["cpu"] if cxx_build.compiler()[0] is not None else [])
    for name in engines:
        for dtype in ("float32", "bf16"):
            e = Engine(model, name, dtype=dtype)
            e.prefill(ids, e.new_cache(8))
    assert set(os.listdir(model.cache_dir)) == files
    assert {"config.json", "model.safetensors", "tokenizer.json", "llamanb.json"} <= files
    assert not any(f.endswith(".safetensors") for f in files - {"model.safetensors"})
    header = (model.cache_dir / "model.safetensors").stat().st_size - model.weights.nbytes()
    assert 0 < header < 64 * 1024                    # the file is the weights once, and its header
    small = sum((model.cache_dir / f).stat().st_size for f in files if f != "model.safetensors")
    assert entry_bytes(model.cache_dir) == model.weights.nbytes() + header + small
    # an earlier version's derived copies go; anything else stays
    for name in ("cpu-panels-f32-np16-bf16u-v1.safetensors", "numpy-layout-v1.safetensors",
                 "notes.txt"):
        (model.cache_dir / name).write_bytes(b"\0" * 100)
    again = load_model(tiny_dir)
    assert set(os.listdir(model.cache_dir)) == files | {"notes.txt"}
    assert np.array_equal(Engine(again).prefill(ids, Engine(again).new_cache(8)), want)


def test_cpu_panels_in_memory_and_mapped_pages_handed_back(tiny_dir, kernels_already_built):
    """The cpu backend packs its panels in memory (its own anonymous arena, not a cached file);
    the weights they came from give their pages back and still read the same; a second engine
    gives the first one's bits."""
    from llamanb.platform import cxx_build

    if cxx_build.compiler()[0] is None:
        pytest.skip("no C++ compiler")
    model = load_model(tiny_dir)
    before = {f: getattr(model.weights.layers[0], f).copy() for f in ("wqkv", "w_down")}
    ids = [1, 5, 9, 2]
    first = Engine(model, "cpu")
    got = first.prefill(ids, first.new_cache(8))
    b = first.backend
    assert _mapping_of(b.lm_head.data) is b.arena._map                  # the arena, no file
    for f, a in before.items():
        assert np.array_equal(getattr(model.weights.layers[0], f), a)
    again = Engine(load_model(tiny_dir), "cpu")
    assert np.array_equal(again.prefill(ids, again.new_cache(8)), got)
    from dataclasses import replace

    mem = replace(model.weights, store_dir=None, deriver=None)               # no store behind it
    bb = Engine(replace(model, weights=mem), "cpu", dtype="bf16").backend
    assert bb.lm_head.data.dtype == np.uint16 and _mapping_of(bb.lm_head.data) is bb.arena._map


def _rss_kb() -> int:
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc: Linux")
def test_release_pages_drops_mapped_pages_only(tmp_path):
    """release_pages on a file mapping: resident memory falls by about its size (MADV_DONTNEED)
    and the values read back unchanged; on anonymous memory it does nothing (DONTNEED would
    zero it)."""
    from llamanb.cpu.backend import release_pages

    n = 48 << 20
    data = np.arange(n // 4, dtype=np.float32)
    (tmp_path / "w.bin").write_bytes(data.tobytes())
    m = np.memmap(tmp_path / "w.bin", dtype=np.float32, mode="r").view(np.ndarray)[1000:]
    assert float(m.sum(dtype=np.float64)) > 0                     # every page touched
    r0 = _rss_kb()
    release_pages(m)
    assert r0 - _rss_kb() > 0.8 * n / 1024
    assert np.array_equal(m, data[1000:])
    anon = data.copy()
    release_pages(anon)
    assert np.array_equal(anon, data)

"""make test's seeded session caches (conftest.seed_session_cache): a session copies from the
warmed cache only the entries keyed to the current model file's bytes and kernel sources."""
from __future__ import annotations

from pathlib import Path

from conftest import SEED_VAR, seed_session_cache


def test_seed_copies_only_current_entries(tmp_path, monkeypatch, llamanb_cache):
    from llamanb.platform import cxx_build
    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.io.store import _cache_key, default_model_path

    seed, session = tmp_path / "seed", tmp_path / "session"
    session.mkdir()
    key = _cache_key(default_model_path())
    current = seed / f"Model-{key}"
    stale = seed / "Model-0123456789abcdef"                     # another file's (or version's)
    half = seed / f"Other-{key}"                                 # no llamanb.json: not finished
    for d in (current, stale, half):
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
    for d in (current, stale):
        (d / "llamanb.json").write_text("{}")
    (seed / "cpu").mkdir()
    cxx, _ = cxx_build.compiler()
    want = []
    if cxx is not None:
        k = cxx_build.build_key(cxx, cpu_kernels.KERNELS_DIR, cpu_kernels.flavour_flags("native"))
        want = [f"cpu/cpu-kernels-{k[:24]}.so"]
        (seed / want[0]).write_bytes(b"lib")
        (seed / (want[0] + ".json")).write_text("{}")           # its record travels with it
    (seed / "cpu" / ("cpu-kernels-" + "0" * 24 + ".so")).write_bytes(b"old sources' build")
    monkeypatch.setenv(SEED_VAR, str(seed))
    assert seed_session_cache(session) == [current.name] + want
    copied = sorted(p.relative_to(session).as_posix() for p in session.rglob("*") if p.is_file())
    assert copied == sorted([f"{current.name}/config.json", f"{current.name}/llamanb.json",
                             "llamanb-sources.json"] + want + [w + ".json" for w in want])
    (seed / "seed-only").mkdir()                                 # a library without its record
    if want:                                                     # is not taken
        (seed / (want[0] + ".json")).unlink()
        other = tmp_path / "session2"
        other.mkdir()
        assert seed_session_cache(other) == [current.name]
    monkeypatch.delenv(SEED_VAR)
    assert seed_session_cache(tmp_path / "elsewhere") == []      # no seed named: nothing copied
    assert not Path(tmp_path / "elsewhere").exists()

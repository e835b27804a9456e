"""`bench --backend cpu --also-march`: the cpu engines measured again on their kernels built for
another target, in the same interleaved run (issue 30: the AVX2 kernels forced on an AVX-512
machine, both printed), and a target this CPU cannot run refused before anything is measured."""
from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli


def test_flavoured_engines_get_the_same_ratio_rows():
    """A flavoured cpu engine ("cpu/x86-64-v3") is paired with llama.cpp at its own precision and
    carries the same targets as the engine it rebuilds."""
    from llamanb.bench.report import ratios
    from llamanb.bench.runners import label, llamanb_backend

    assert llamanb_backend("cpu:bf16/x86-64-v3") == ("cpu", {"dtype": "bf16", "march": "x86-64-v3"})
    assert llamanb_backend("cpu/portable") == ("cpu", {"march": "portable"})
    assert llamanb_backend("numpy") == ("numpy", {})
    assert label("llamanb@cpu:bf16/x86-64-v3") == "llamanb (cpu:bf16/x86-64-v3)"
    eng = {"llamanb": {"decode_tok_s": 40.0, "prefill_128_tok_s": 400.0, "prefill_512_tok_s": 500.0},
           "llamanb@cpu": {"decode_tok_s": 60.0, "prefill_128_tok_s": 400.0,
                           "prefill_512_tok_s": 400.0, "weight_bytes": 500e6},
           "llamanb@cpu/x86-64-v3": {"decode_tok_s": 45.0, "prefill_128_tok_s": 400.0,
                                     "prefill_512_tok_s": 600.0, "weight_bytes": 500e6},
           "llamanb@cpu:bf16/x86-64-v3": {"decode_tok_s": 90.0, "prefill_128_tok_s": 400.0,
                                          "prefill_512_tok_s": 240.0, "weight_bytes": 250e6},
           "llamacpp_f32": {"decode_tok_s": 50.0, "prefill_512_tok_s": 500.0},
           "llamacpp_bf16": {"decode_tok_s": 100.0, "prefill_512_tok_s": 300.0}}
    rows = {r["name"]: r for r in ratios(eng, roofline=60.0, gb_s=40.0)}
    d = rows["cpu/x86-64-v3 decode / llama.cpp F32 decode"]
    assert (d["value"], d["target"], d["pass"]) == (0.9, 1.0, False)
    p = rows["cpu/x86-64-v3 prefill_512 / llama.cpp F32 prefill_512"]
    assert (p["value"], p["target"], p["pass"]) == (1.2, 1.0, True)
    b = rows["cpu:bf16/x86-64-v3 prefill_512 / llama.cpp BF16 prefill_512"]
    assert (b["value"], b["target"], b["pass"]) == (0.8, 1.0, False)
    r = rows["cpu:bf16/x86-64-v3 decode / its roofline (40.0 GB/s / 250 MB read)"]
    assert (r["value"], r["target"]) == (90.0 / 160.0, 0.9)
    # the native engine's rows are still its own
    assert rows["cpu decode / llama.cpp F32 decode"]["value"] == 1.2


def test_a_target_this_cpu_lacks_is_refused_in_one_line(kernels, monkeypatch):
    """What a -march target uses is asked of the compiler (-dM -E); a CPU whose flags lack one of
    those instruction sets is refused before the library is built or loaded (it would die with
    SIGILL). Checked against a CPU without AVX-512 (this CPU's flags minus avx512*), so it runs
    the same on every x86-64 machine."""
    import platform

    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.errors import LlamanbError

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86 -march names")
    v4 = cpu_kernels.target_macros("x86-64-v4")
    assert v4 is not None and {"AVX2", "FMA", "AVX512F", "AVX512BW"} <= set(v4)
    assert "AVX512F" not in cpu_kernels.target_macros("x86-64-v3")
    assert "AVX" not in cpu_kernels.target_macros("portable")
    real = cpu_kernels.cpu_flags()
    assert real and "sse2" in real
    monkeypatch.setattr(cpu_kernels, "cpu_flags",
                        lambda: {f for f in real if not f.startswith("avx512")})
    assert cpu_kernels.missing_here("x86-64-v4") == ["AVX512F", "AVX512BW"]
    assert cpu_kernels.missing_here("native") == []
    with pytest.raises(LlamanbError, match=r"-march=x86-64-v4 uses AVX512F, AVX512BW") as e:
        cpu_kernels.load(flavour_name="x86-64-v4")
    assert "\n" not in str(e.value)
    with pytest.raises(LlamanbError, match="march='x; rm'"):
        cpu_kernels.load(flavour_name="x; rm")


def test_emulated_avx512_kernels_are_never_timed(tmp_path):
    """The avx512-simde flavour (the AVX-512 paths emulated through SIMDe) gives results, not
    speeds: as the bench's own build or as --also-march, the bench refuses it in one line before
    anything is built or measured (exit 2)."""
    from conftest import run_cli_here

    for args, env in ((["bench", "--backend", "cpu"], {"LLAMANB_CPU_MARCH": "avx512-simde"}),
                      (["bench", "--batching", "--backend", "cpu"], {"LLAMANB_CPU_MARCH": "avx512-simde"}),
                      (["bench", "--backend", "cpu", "--also-march", "x86-64-v3,avx512-simde"], {})):
        r = run_cli_here(args, cache=tmp_path, extra_env=env)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "avx512-simde runs the AVX-512 kernels emulated through SIMDe" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("cpu/*.so"))


def test_missing_simde_headers_are_named(monkeypatch):
    """Without SIMDe's headers the emulated build says which package brings them, in one line."""
    from llamanb.platform import cxx_build
    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.errors import LlamanbError

    monkeypatch.setattr(cxx_build, "build", lambda *a, **k: None)
    monkeypatch.setattr(cxx_build, "reason", lambda *a, **k: "g++ failed: vec.h:18: fatal error: "
                        "simde/x86/avx512.h: No such file or directory")
    cpu_kernels._load.cache_clear()
    try:
        with pytest.raises(LlamanbError, match="Debian's libsimde-dev") as e:
            cpu_kernels.load(flavour_name=cpu_kernels.EMULATED_AVX512)
    finally:
        cpu_kernels._load.cache_clear()
    assert "\n" not in str(e.value)


def test_bench_measures_the_cpu_engines_on_a_second_build(make_tiny, kernels, portable_kernels,
                                                          tmp_path):
    """End to end on a tiny checkpoint: `--also-march portable` adds the float32 and bf16 cpu
    engines built without -march beside the native ones; each child reports the build it ran
    (its backend description), and the table and the ratio rows carry both."""
    make_tiny(tmp_path / "tiny", n_heads=6, n_kv_heads=2, tie=False, max_position_embeddings=1024)
    out = tmp_path / "b.json"
    p = run_cli(["bench", "--model", tmp_path / "tiny", "--backend", "cpu", "--no-transformers",
                 "--runs", "1", "--decode-tokens", "2", "--also-march", "portable", "--json", out],
                cache=os.environ["LLAMANB_CACHE"], extra_env={"LLAMANB_PEER_PYTHON": ""})
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(out.read_text())
    assert list(d["engines"]) == ["llamanb", "llamanb@cpu", "llamanb@cpu:bf16",
                                  "llamanb@cpu/portable", "llamanb@cpu:bf16/portable"]
    desc = {e: v["backend"] for e, v in d["engines"].items()}
    assert "-march=native" in desc["llamanb@cpu"] and "bf16 weights" in desc["llamanb@cpu:bf16"]
    assert "portable flags" in desc["llamanb@cpu/portable"]
    assert "bf16 weights" in desc["llamanb@cpu:bf16/portable"] and "portable" in desc["llamanb@cpu:bf16/portable"]
    names = [r["name"] for r in d["ratios"]]
    assert "cpu/portable decode / numpy fp32 decode" in names
    assert any(n.startswith("cpu:bf16/portable decode / its roofline") for n in names)
    assert "llamanb (cpu:bf16/portable)" in p.stdout


def test_bench_also_march_bad_input_is_one_line(tmp_path):
    p = run_cli(["bench", "--no-transformers", "--backend", "cpu", "--also-march", "x;rm -rf"],
                cache=os.environ["LLAMANB_CACHE"])
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--also-march='x;rm -rf'" in lines[0] and "Traceback" not in p.stderr

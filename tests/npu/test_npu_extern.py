"""The external C++ kernels against their numpy models, and each model against float64 math.

References: the float64 formulas written here (numpy float64, math), ml_dtypes' bfloat16 rounding,
and the rounding-error bound of float32 summation. Elementwise kernels must match their models bit
for bit; the matvec's float32 sums run in a different order (16 lanes + a tree vs BLAS blocks),
so it must agree to one bfloat16 ulp wherever a dot product does not nearly cancel, and within
the summation error bound everywhere.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.platform import cxx_build as hostbuild
from llamanb.npu.compiler import extern
from llamanb.npu.compiler import peano
from llamanb.model.numerics import bf16_bits, from_bf16_bits, to_bf16

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for host builds")

ALL_BF16 = from_bf16_bits(np.arange(65536, dtype=np.uint16))          # every bfloat16 value
SPECIALS = from_bf16_bits(np.array(
    [0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x8001, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
     0x7fc0, 0x3f00, 0x4040, 0xc2c8, 0x1f80], dtype=np.uint16))
# 0, -0, 1, -1, smallest subnormal (+-), smallest normal, largest finite (+-), +-inf, NaN, 0.5,
# 3, -100, 5.4e-20


def ordered(v: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns as integers in numeric order (+0 and -0 both 0): ulp distance is a
    difference of these."""
    b = bf16_bits(v).astype(np.int32)
    return np.where(b & 0x8000, -(b & 0x7FFF), b)


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(ordered(a) - ordered(b))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical bfloat16, except that any NaN equals any NaN (the sign of a NaN made by
    inf - inf is the CPU's choice)."""
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(nan_a, nan_b)
                and np.array_equal(bf16_bits(a)[~nan_a], bf16_bits(b)[~nan_b]))


def bf16_normal(rng, shape, scale=1.0):
    return to_bf16((rng.standard_normal(shape) * scale).astype(np.float32))


def host(symbol):
    """The host build (skips the test on a machine without g++)."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ for host builds")
    fn = extern.host_kernel(symbol)
    assert fn is not None, hostbuild.reason()
    return fn


# ---- RoPE ----------------------------------------------------------------------------------
def rope_inputs(rng):
    """Random rows (several head sizes) and every combination of special values."""
    out = []
    for rows, dim, scale in [(2048, 64, 1.0), (300, 128, 40.0), (17, 2, 1e-30), (5, 6, 1e30)]:
        ang = rng.uniform(0, 2000, (rows, dim // 2))
        lut = to_bf16(np.concatenate([np.cos(ang), np.sin(ang)], -1).astype(np.float32))
        out.append((bf16_normal(rng, (rows, dim), scale), lut))
    g = np.stack(np.meshgrid(SPECIALS, SPECIALS, SPECIALS, SPECIALS, indexing="ij"), -1)
    g = g.reshape(-1, 4)                                        # x1, x2, cos, sin: 16^4 rows
    out.append((g[:, :2].copy(), g[:, 2:].copy()))
    return out


def test_rope_host_bit_exact_with_model():
    rng = np.random.default_rng(0)
    n = 0
    for x, lut in rope_inputs(rng):
        with np.errstate(all="ignore"):
            assert same_bits(host("rope_halfsplit_bf16")(x, lut),
                             extern.model("rope_halfsplit_bf16")(x, lut))
        n += x.size
    assert n > 250_000


def test_rope_model_against_float64():
    """x1 c - x2 s in float64 (exact for these inputs: two 16-bit products), rounded to bfloat16:
    within one ulp of the model (the model rounds the sum to float32 first)."""
    rng = np.random.default_rng(1)
    x, lut = rope_inputs(rng)[0]
    h = x.shape[1] // 2
    x64, c, s = x.astype(np.float64), lut[:, :h].astype(np.float64), lut[:, h:].astype(np.float64)
    ref = np.concatenate([x64[:, :h] * c - x64[:, h:] * s, x64[:, h:] * c + x64[:, :h] * s], -1)
    got = extern.model("rope_halfsplit_bf16")(x, lut)
    assert ulps(got, ref.astype(np.float32)).max() <= 1
    assert np.mean(bf16_bits(got) == bf16_bits(ref.astype(np.float32))) > 0.99


# ---- silu_and_mul --------------------------------------------------------------------------
def silu_inputs(rng):
    """Every bfloat16 gate value against special and random up values."""
    ups = np.concatenate([SPECIALS, bf16_normal(rng, 6, 3.0)])
    gate = np.broadcast_to(ALL_BF16, (ups.size, ALL_BF16.size)).copy()
    up = np.broadcast_to(ups[:, None], gate.shape).copy()
    return gate, up


def test_silu_and_mul_host_bit_exact_with_model():
    gate, up = silu_inputs(np.random.default_rng(2))
    with np.errstate(all="ignore"):
        got = host("silu_and_mul_bf16")(gate, up)
        want = extern.model("silu_and_mul_bf16")(gate, up)
    assert gate.size > 1_000_000
    assert same_bits(got, want)


def test_silu_and_mul_model_against_float64():
    """g / (1 + e^-g) * u in float64: within one bfloat16 ulp for every bfloat16 gate. Where e^-g
    overflows float32 (g < -88.72) the kernel, like llamanb.model.ops.silu_mul, returns -0 for a true
    value below 1e-36: those are compared by size, not by ulp."""
    gate = ALL_BF16[np.isfinite(ALL_BF16)]
    up = np.full_like(gate, -2.5)
    with np.errstate(all="ignore"):
        g64 = gate.astype(np.float64)
        ref = g64 / (1.0 + np.exp(-g64)) * -2.5
        got = extern.model("silu_and_mul_bf16")(gate, up)
        ref32 = ref.astype(np.float32)                          # beyond float32: inf, as got
    tiny = np.abs(ref) < 1e-36
    assert ulps(got[~tiny], ref32[~tiny]).max() <= 1
    assert np.all(np.abs(got[tiny]) <= 1e-36)


def test_exp_f32_accuracy():
    """The shared exp is within 2 float32 ulp of float64's e^x over its whole normal range."""
    x = np.random.default_rng(3).uniform(-87.0, 88.7, 400_000).astype(np.float32)
    ref = np.exp(x.astype(np.float64))
    err = np.abs(extern.exp_f32(x) - ref) / np.spacing(ref.astype(np.float32))
    assert err.max() <= 2.0
    special = np.array([np.inf, -np.inf, np.nan, 89.0, -105.0, 0.0], np.float32)
    got = extern.exp_f32(special)
    assert got[0] == np.inf and got[1] == 0 and np.isnan(got[2]) and got[3] == np.inf
    assert got[4] == 0 and got[5] == 1.0


def test_silu_model_close_to_shared_op():
    """The model is llamanb.model.ops.silu_mul's formula with a different float32 exp: they round to
    the same bfloat16 except rarely, by one ulp."""
    from llamanb.model.ops import silu_mul

    gate = ALL_BF16[np.isfinite(ALL_BF16) & (np.abs(ALL_BF16) < 80)]
    up = np.ones_like(gate)
    d = ulps(extern.model("silu_and_mul_bf16")(gate, up), to_bf16(silu_mul(gate, up)))
    assert d.max() <= 1 and np.mean(d == 0) > 0.99


# ---- matvec --------------------------------------------------------------------------------
MATVEC_SHAPES = [(2048, 2048), (512, 8192), (1000, 577), (100_000, 128), (65536, 16), (300, 3)]


def matvec_check(got, a, x, ref_sum):
    """Compare got [m] with a float32 sum `ref_sum` [m] of the same products. Returns the ulp
    distances. Rigorous: two float32 sums of k products each lie within k 2^-24 sum|a x| of the
    exact value, and each bfloat16 rounding adds half an ulp. Where the dot product does not
    nearly cancel (sum|a x| <= 2^12 |a x|), the sums' difference is far below half an ulp and
    the roundings can differ by one ulp at most."""
    k = a.shape[1]
    mag = np.abs(a.astype(np.float64)) @ np.abs(x.astype(np.float64))        # sum |a_j x_j|
    exact = a.astype(np.float64) @ x.astype(np.float64)
    ulp = np.spacing(np.abs(to_bf16(ref_sum)).astype(np.float32)) * 2.0**16  # bfloat16 ulp
    bound = 2 * k * 2.0**-24 * mag + ulp
    assert np.all(np.abs(got.astype(np.float64) - to_bf16(ref_sum)) <= bound)
    d = ulps(got, ref_sum)
    well = mag <= 2.0**12 * np.abs(exact)
    assert d[well].max() <= 1
    return d


def test_matvec_host_within_one_ulp_of_model():
    rng = np.random.default_rng(4)
    fn, model = host("matvec_bf16"), extern.model("matvec_bf16")
    dists = []
    for m, k in MATVEC_SHAPES:
        a, x = bf16_normal(rng, (m, k)), bf16_normal(rng, k)
        want = model(a, x)
        dists.append(matvec_check(fn(a, x), a, x, want))
    d = np.concatenate(dists)
    assert d.size > 100_000 and np.mean(d == 0) > 0.999


def test_matvec_short_rows_bit_exact():
    """k = 1 and 2 leave no summation order to differ in: exact products, one rounding. All
    products of two bfloat16 values against a few x, the float32->bfloat16 rounding (ties,
    overflow, subnormals) exercised. Finite values only: BLAS may skip zero entries of x, which
    would hide 0 * inf."""
    fin = ALL_BF16[np.isfinite(ALL_BF16)]
    for xs in ([1.0], [-3.0], [0.0078125], [1.5e38], [1e-38], [1.0, -1.0], [3.0, 7.0]):
        x = to_bf16(np.array(xs, np.float32))
        a = np.stack([fin] + [np.roll(fin, 7 * i) for i in range(1, x.size)], -1)
        with np.errstate(all="ignore"):
            assert same_bits(host("matvec_bf16")(a, x), extern.model("matvec_bf16")(a, x))


def test_matvec_model_against_float64():
    rng = np.random.default_rng(5)
    for m, k in MATVEC_SHAPES[:3]:
        a, x = bf16_normal(rng, (m, k)), bf16_normal(rng, k)
        exact = (a.astype(np.float64) @ x.astype(np.float64)).astype(np.float32)
        matvec_check(extern.model("matvec_bf16")(a, x), a, x, exact)


# ---- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("symbol,args,match", [
    ("rope_halfsplit_bf16", (np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32)), "even"),
    ("rope_halfsplit_bf16", (np.zeros((2, 4), np.float32), np.zeros((2, 2), np.float32)), "lut"),
    ("rope_halfsplit_bf16", (np.zeros((2, 4)), np.zeros((2, 4))), "float64"),
    ("silu_and_mul_bf16", (np.zeros(3, np.float32), np.zeros(4, np.float32)), "shape"),
    ("matvec_bf16", (np.zeros((3, 4), np.float32), np.zeros(3, np.float32)), r"\[m, k\]"),
    ("matvec_bf16", (np.zeros((3, 4), np.int32), np.zeros(4, np.float32)), "int32"),
])
def test_bad_arguments_raise(symbol, args, match):
    for fn in [extern.model(symbol)] + ([host(symbol)] if shutil.which("g++") else []):
        with pytest.raises(LlamanbError, match=match):
            fn(*args)


def test_unknown_symbol():
    with pytest.raises(LlamanbError, match="unknown external kernel"):
        extern.model("matvec_vectorized_bf16_bf16")


# ---- the build cache -----------------------------------------------------------------------
@needs_gxx
def test_cache_hit_and_rebuild_on_changed_source(tmp_path):
    src = tmp_path / "kernels"
    shutil.copytree(hostbuild.KERNELS_DIR, src)
    cache = tmp_path / "cache"
    first = hostbuild.build(src, cache)
    again = hostbuild.build(src, cache)
    assert not first.cache_hit and again.cache_hit and again.path == first.path
    (src / "mv.cc").write_text((src / "mv.cc").read_text() + "\n// changed\n")
    changed = hostbuild.build(src, cache)
    assert not changed.cache_hit and changed.key != first.key and changed.path.is_file()
    (src / "bf16.h").write_text((src / "bf16.h").read_text() + "\n// changed\n")
    assert not hostbuild.build(src, cache).cache_hit            # headers are part of the key
    assert not list(cache.glob("*.tmp"))


@needs_gxx
def test_concurrent_builds_leave_one_complete_library(tmp_path):
    """Two processes build the same sources into an empty cache at once: both succeed, one
    library and its integrity record remain, no temporary file is left, the record matches the
    library, and it loads."""
    code = ("import sys; from pathlib import Path; from llamanb.platform import cxx_build as hostbuild; "
            "b = hostbuild.build(hostbuild.KERNELS_DIR, Path(sys.argv[1])); print(b.path)")
    root = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=root,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    paths = {p.communicate(timeout=300)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(paths) == 1
    lib = Path(paths.pop())
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted([lib.name, lib.name + ".json"])
    rec = json.loads((tmp_path / (lib.name + ".json")).read_text())
    assert rec["file"]["size"] == lib.stat().st_size
    assert rec["file"]["crc32"] == zlib.crc32(lib.read_bytes())
    import ctypes

    assert hasattr(ctypes.CDLL(str(lib)), "matvec_bf16")


@pytest.mark.parametrize("how", ["env", "path"])
def test_no_compiler_falls_back_to_model(monkeypatch, tmp_path, how):
    if how == "env":
        monkeypatch.setenv("LLAMANB_CXX", "none")
        expect = "LLAMANB_CXX=none"
    else:
        monkeypatch.delenv("LLAMANB_CXX", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))                  # an empty directory
        expect = "'g++' is not on PATH"
    assert extern.host_kernel("matvec_bf16") is None
    k = extern.kernel("matvec_bf16")
    assert k.fn is extern.model("matvec_bf16")
    assert "numpy model" in k.how and expect in k.how


@needs_gxx
def test_kernel_prefers_host_build():
    k = extern.kernel("silu_and_mul_bf16")
    assert k.how.startswith("host build of kernels/silu_and_mul.cc")
    assert k.fn.__name__ == "host_silu_and_mul_bf16"


# ---- portability ---------------------------------------------------------------------------
@needs_gxx
@pytest.mark.parametrize("source", sorted(extern.SOURCES.values()))
def test_sources_need_no_runtime_library(tmp_path, source):
    """Compiled freestanding, an object refers to no outside symbol: no libm, libc or libstdc++,
    as an AIE core (which has none of them) requires. With clang, also for a bare-metal
    non-x86 target, so no x86 intrinsic can hide in the code."""
    flags = ["-std=c++20", "-O2", "-ffreestanding", "-fno-exceptions", "-fno-rtti", "-Werror",
             "-Wall", "-Wextra", "-c", str(hostbuild.KERNELS_DIR / source)]
    builds = [["g++", *flags, "-o", str(tmp_path / "gcc.o")]]
    if shutil.which("clang++"):
        builds.append(["clang++", "--target=aarch64-none-elf", *flags, "-o",
                       str(tmp_path / "clang.o")])
    for argv in builds:
        subprocess.run(argv, check=True, capture_output=True)
        undefined = subprocess.run(["nm", "-u", argv[-1]], check=True, capture_output=True,
                                   text=True).stdout.split()
        assert undefined == [], (argv[0], undefined)


@pytest.mark.skipif(shutil.which("clang++") is None, reason="clang++ not installed")
def test_clang_host_build_bit_exact_too(monkeypatch):
    """Built by clang (which contracts a*b+c into an FMA unless told not to), the elementwise
    kernels still match the models bit for bit."""
    monkeypatch.setenv("LLAMANB_CXX", "clang++")
    assert "clang" in extern.kernel("rope_halfsplit_bf16").how
    gate, up = silu_inputs(np.random.default_rng(6))
    with np.errstate(all="ignore"):
        assert same_bits(host("silu_and_mul_bf16")(gate, up),
                         extern.model("silu_and_mul_bf16")(gate, up))


# ---- Peano ---------------------------------------------------------------------------------
def fake_peano(tmp_path: Path) -> Path:
    """A Peano install whose clang++ records its argv and writes the -o file."""
    root = tmp_path / "peano"
    (root / "bin").mkdir(parents=True)
    clang = root / "bin" / "clang++"
    clang.write_text(f"#!{sys.executable}\nimport sys, json\n"
                     f"open({str(tmp_path / 'argv.jsonl')!r}, 'a').write(json.dumps(sys.argv) + '\\n')\n"
                     "open(sys.argv[sys.argv.index('-o') + 1], 'w').write('object')\n")
    clang.chmod(clang.stat().st_mode | stat.S_IXUSR)
    return root


def test_peano_commands_and_objects(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("PEANO_INSTALL_DIR", str(fake_peano(tmp_path)))
    objs = peano.compile_objects(tmp_path / "out")
    assert sorted(objs) == ["mv.o", "rope.o", "silu_and_mul.o"]
    assert all(p.read_text() == "object" for p in objs.values())
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == sorted(objs)
    calls = [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]
    assert len(calls) == 3
    for argv in calls:
        assert argv[0] == str(tmp_path / "peano" / "bin" / "clang++")
        assert "--target=aie2p-none-unknown-elf" in argv and "-std=c++20" in argv
        assert "-O2" in argv and "-c" in argv
    sources = {Path(argv[argv.index("-c") + 1]).name for argv in calls}
    assert sources == {"rope_halfsplit.cc", "silu_and_mul.cc", "mv.cc"}


def test_peano_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("PEANO_INSTALL_DIR", raising=False)
    monkeypatch.setattr("llamanb.npu.locate._site_dirs", lambda: [])     # no llvm-aie either
    with pytest.raises(LlamanbError, match="PEANO_INSTALL_DIR is not set and no llvm-aie"):
        peano.compile_objects(tmp_path)
    with pytest.raises(LlamanbError, match="clang\\+\\+ not found"):
        peano.commands(tmp_path, peano_dir=tmp_path)


@needs_gxx
def test_host_builds_go_to_the_llamanb_cache():
    built = hostbuild.build()
    assert Path(os.environ["LLAMANB_CACHE"]) in built.path.parents


def test_models_round_inputs_to_bf16_and_skip_values_already_bf16():
    """Kernel inputs are bfloat16 in memory: float32 inputs are rounded (ml_dtypes as the
    reference); inputs already holding bfloat16 values (weights in a buffer) pass unchanged."""
    import ml_dtypes

    from llamanb.npu.compiler.extern import _bf16_input

    x = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(_bf16_input("x", x), want)
    assert _bf16_input("w", want) is want
    assert np.array_equal(_bf16_input("b", x.astype(ml_dtypes.bfloat16)), want)

"""The compiled cpu backend (llamanb.cpu.backend, kernels/cpu): its kernels against float64 with
the classical float32 summation bound, the engine against the float64 forward and the shared
transformers reference, batch rows against the same rows alone, the paged cache, bf16, and the
build (no compiler: one line; the cache key; no half-written library)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.model.numerics import gamma

from conftest import REPO_ROOT


@pytest.fixture(scope="module")
def cpu_engine(smollm, kernels):
    from llamanb.engine.engine import Engine

    return Engine(smollm, "cpu")


@pytest.fixture(scope="module")
def capital_ids(smollm):
    return smollm.tokenizer.encode_prompt("What is the capital of France?", chat=True)


def _accumulated_bound(x, w, y0):
    """y0 + x w^T in float64, and Higham's bound on a float32 product accumulated onto y0 (one
    FMA chain of K + 1 terms per output): gamma(K + 1) (|x| |w|^T + |y0|)."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    exact = y0.astype(np.float64) + x64 @ w64.T
    return exact, gamma(x.shape[1] + 1) * (np.abs(x64) @ np.abs(w64).T + np.abs(y0))


def _check_matmul(kernels, M, wdtype, seed=None):
    """One matmul through `kernels` against float64, within Higham's bound."""
    rng = np.random.default_rng(M if seed is None else seed)
    K, N = 200, 37                                   # K, N not multiples of the vector width
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    wk = kernels.pack(w, bf16=wdtype == "bf16")            # panels [ceil(N / NP), K, NP]
    if wdtype == "bf16":
        import ml_dtypes

        w = w.astype(ml_dtypes.bfloat16).astype(np.float32)    # the values the kernel multiplies
    y0 = rng.standard_normal((M, N)).astype(np.float32)
    y = kernels.matmul(x, wk, y0.copy(), accumulate=True)
    exact, bound = _accumulated_bound(x, w, y0)
    err = np.abs(y - exact)
    print(f"{kernels.flavour} M={M} {wdtype}: max error {err.max():.2e}, max bound {bound.max():.2e}")
    assert (err <= bound).all()
    assert err.max() > 0 or M == 1          # a real float32 computation, not the float64 one


@pytest.mark.parametrize("M", [1, 3, 8, 16, 70])
@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
def test_matmul_within_float32_summation_bound(kernels, M, wdtype):
    _check_matmul(kernels, M, wdtype)


def _cpu_flags() -> set[str]:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return set()
    return {f for ln in text.splitlines() if ln.startswith(("flags", "Features"))
            for f in ln.split(":", 1)[1].split()}


def test_native_and_portable_builds_both_match_float64(kernels, portable_kernels, kernel_builds):
    """Issue 28/30: the kernels build and pass both ways on this machine -- -march=native (its
    own vector instructions) and the portable flags (the compiler's default target: on x86-64,
    SSE2 and the generic vector code) -- each checked against float64 with the derived bound,
    at decode (1, 3 rows), multi-row decode (8) and prefill (70) shapes, float32 and bf16."""
    import platform

    assert portable_kernels.flavour == "portable" and kernels.flavour == "native"
    assert portable_kernels.built.key != kernels.built.key         # two libraries, two keys
    if platform.machine() in ("x86_64", "AMD64"):
        assert "AVX" not in portable_kernels.isa and "SSE2" in portable_kernels.isa
        have = _cpu_flags()
        assert ("AVX2" in kernels.isa) == ("avx2" in have)
        assert ("AVX512F" in kernels.isa) == ("avx512f" in have)
    for k in kernel_builds:                   # and the AVX-512 paths, emulated where they must be
        for M in (1, 3, 8, 70):
            for wdtype in ("f32", "bf16"):
                _check_matmul(k, M, wdtype, seed=100 + M)


def _disassembly(lib) -> str | None:
    """`objdump -d` of a built library, None where objdump is not installed."""
    import shutil

    if not shutil.which("objdump"):
        return None
    return subprocess.run(["objdump", "-d", str(lib)], capture_output=True, text=True,
                          timeout=120).stdout


def _skip_unless_emulated(kernels, emulated_kernels):
    if emulated_kernels is None:
        pytest.skip("the native build runs the AVX-512 paths itself" if kernels.vector_width == 16
                    else "no AVX2 here: SIMDe's emulation is built on it")


def _wide_and_avx2(kernels, emulated_kernels):
    """(AVX-512 build, AVX2 build): on an AVX-512 CPU its own build and -march=x86-64-v3, both
    on the hardware; elsewhere the AVX-512 paths through SIMDe and the native AVX2 build."""
    from llamanb.cpu import kernels as cpu_kernels

    if kernels.vector_width == 16:                  # an AVX-512 CPU: both builds run natively
        if cpu_kernels.missing_here("x86-64-v3"):
            pytest.skip("this AVX-512 CPU lacks an AVX2 target's instructions")
        wide, avx2 = kernels, cpu_kernels.load(flavour_name="x86-64-v3")
    else:
        _skip_unless_emulated(kernels, emulated_kernels)
        wide, avx2 = emulated_kernels, kernels
        assert wide.emulated and not avx2.emulated and "AVX512F" not in wide.isa
    assert (wide.vector_width, wide.panel_width, wide.layout) == (16, 32, "np32-bf16u")
    assert avx2.vector_width == 8 and "FMA" in avx2.isa     # both builds fuse multiply-adds
    return wide, avx2


def _sdm_bits_here(wide, avx2) -> bool:
    """Whether `wide`'s bfloat16 products have `avx2`'s bits (the SDM's vdpbf16ps: two rounded
    FMAs, odd product first) -- always so for the emulated instruction; a CPU's own
    instruction is measured (a Zen 4 gave them; another CPU could round otherwise)."""
    rng = np.random.default_rng(23)
    x, w = _bf16(rng.standard_normal((3, 576))), rng.standard_normal((64, 576)).astype(np.float32)
    return np.array_equal(*(k.matmul(x, k.pack(w, bf16=True), np.zeros((3, 64), np.float32))
                            for k in (wide, avx2)))


def test_engine_gives_the_same_bits_on_avx2_and_avx512_builds(smollm, kernels, emulated_kernels,
                                                               capital_ids):
    """The whole forward, not only its products: every reduction across lanes is summed in 16
    lanes whatever the vector width (vec.h dot16: RMSNorm's sum of squares, attention scores),
    exp and SwiGLU work lane by lane, and each product is one FMA chain in an order fixed by K;
    so the float32, bf16 and Q4_1 engines give the same logits, bit for bit, on an AVX2 and an
    AVX-512 build: a prompt, then three greedy decode steps (keys 8 at a time and one at a
    time). (bf16 on a CPU whose own vdpbf16ps rounds otherwise than Intel's SDM: skipped, said.)"""
    from llamanb.engine.engine import Engine

    wide, avx2 = _wide_and_avx2(kernels, emulated_kernels)
    dtypes = ["float32", "q4_1"]
    if _sdm_bits_here(wide, avx2):
        dtypes.append("bf16")
    else:
        print("bf16 not compared: this CPU's vdpbf16ps rounds otherwise than Intel's SDM")
    for dtype in dtypes:
        runs = []
        for k in (wide, avx2):
            e = Engine(smollm, "cpu", dtype=dtype, march=k.flavour)
            assert e.backend.k.vector_width == k.vector_width
            cache = e.new_cache(len(capital_ids) + 8)
            logits = [e.prefill(capital_ids, cache)]
            for _ in range(3):
                logits.append(e.decode(int(np.argmax(logits[-1])), cache))
            runs.append(logits)
        for i, (a, b) in enumerate(zip(*runs)):
            assert np.array_equal(a, b), (dtype, i, float(np.abs(a - b).max()))


def test_avx512_paths_give_the_avx2_bits(kernels, emulated_kernels):
    """The AVX-512 paths (16-lane vectors, 32-wide panels, the 512-bit bfloat16 unpack order, the
    512-bit byte products) against the AVX2 ones: every product has the same bits -- each output
    is one FMA chain over k in an order fixed by K alone, so the vector width cannot change it
    (the derived difference is 0) -- float32, bfloat16 and every quantised format with float32
    or 8-bit activations, decode and prefill row counts. On an AVX-512 CPU: its own build against
    the -march=x86-64-v3 one, both on the hardware. Elsewhere: the AVX-512 paths run through
    SIMDe against the native AVX2 build; that library holds no 512-bit instruction (so it runs
    here) and packs as an AVX-512 build does."""
    wide, avx2 = _wide_and_avx2(kernels, emulated_kernels)
    dis = _disassembly(wide.built.path)
    if dis is not None:
        assert ("zmm" in dis) == (not wide.emulated) and "ymm" in dis
    rng = np.random.default_rng(17)
    K, N = 320, 77                              # K: 10 blocks of 32; N: a short last panel
    w = rng.standard_normal((N, K)).astype(np.float32)
    packs = {"f32": lambda k: k.pack(w), "bf16": lambda k: k.pack(w, bf16=True)}
    for q in QTYPES:                            # K-quants: 512, the next whole super-blocks
        raw = _random_blocks(q, N, _k32(q, K) // 32, seed=19)
        packs[q] = lambda k, raw=raw, q=q: k.pack_quant(raw, q, _k32(q, K))
    packs["bf16 x bf16"] = packs["bf16"]        # bfloat16 activations too: vdpbf16ps's case
    for M in (1, 3, 8, 16, 70):
        for name, pack in packs.items():
            x = rng.standard_normal((M, _k32(name, K) if name in QTYPES else K)).astype(np.float32)
            if name == "bf16 x bf16":
                x = _bf16(x)
            for act8 in ((False, True) if name in QTYPES else (False,)):
                a = avx2.matmul(x, pack(avx2), np.zeros((M, N), np.float32), act8=act8)
                b = wide.matmul(x, pack(wide), np.zeros((M, N), np.float32), act8=act8)
                if name == "bf16 x bf16" and wide.bf16_dot and not wide.emulated:
                    # the instruction itself, on the hardware: Intel's SDM defines it as two
                    # rounded FMAs, odd product first (what the AVX2 build does); a CPU that
                    # rounds otherwise stays within the float32 bound of the exact products
                    wb = _bf16(w).astype(np.float64)
                    bound = gamma(K) * (np.abs(x).astype(np.float64) @ np.abs(wb).T)
                    assert (np.abs(b - x.astype(np.float64) @ wb.T) <= bound).all(), M
                    print(f"M={M}: vdpbf16ps on this CPU gives the SDM's bits: "
                          f"{np.array_equal(a, b)}")
                    continue
                assert np.array_equal(a, b), (name, act8, M)


def _bf16(a: np.ndarray) -> np.ndarray:
    """a rounded to bfloat16 (nearest even), as float32."""
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16).astype(np.float32)


def _pair_order_model(x: np.ndarray, w: np.ndarray, fused: bool = True) -> np.ndarray:
    """x [M, K] @ w [N, K]^T as one float32 FMA chain per output over k = 1, 0, 3, 2, ... (a
    last odd k alone): vdpbf16ps's order (Intel SDM: odd product, then even, each rounded once).
    Each step is computed in float64 and rounded to float32: the FMA's single rounding, unless
    the float64 sum was inexact (TwoSum's error e != 0) and lands on a midpoint of two float32s
    -- the one case where rounding twice differs from once; asserted absent. fused=False: the
    product is rounded to float32 first (a build without FMA; the same where x and w are
    bfloat16, whose products float32 holds exactly)."""
    M, K = x.shape
    order = [k for k0 in range(0, K - 1, 2) for k in (k0 + 1, k0)] + ([K - 1] if K % 2 else [])
    acc = np.zeros((M, w.shape[0]), np.float32)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    for k in order:
        p = np.outer(x64[:, k], w64[:, k])                    # exact: 24 + 8 bits < 53
        if not fused:
            p = p.astype(np.float32).astype(np.float64)
        s = acc + p
        bb = s - acc
        e = (acc - (s - bb)) + (p - bb)                         # s + e = acc + p exactly
        r = s.astype(np.float32)
        r2 = np.nextafter(r, np.where(s > r, np.float32(np.inf), np.float32(-np.inf)))
        midpoint = (s != r) & ((r.astype(np.float64) + r2) / 2 == s)
        assert not (midpoint & (e != 0)).any()
        acc = r
    return acc


def test_bf16_products_sum_in_vdpbf16ps_pair_order(kernel_builds):
    """Every build's bfloat16 products are one FMA chain per output in vdpbf16ps's order,
    k = 1, 0, 3, 2, ...: bit for bit the model above, with float32 activations (widened on every
    build) and with bfloat16 ones (multiplied as pairs by the emulated vdpbf16ps where the
    AVX-512 build runs through SIMDe: kernels/cpu/vec.h), at odd and even K. A CPU's own
    vdpbf16ps is held to the float32 bound only: whether it rounds as Intel's SDM says is that
    hardware's to show, and the suite must not go red on it."""
    rng = np.random.default_rng(23)
    for K in (200, 201):
        w = rng.standard_normal((37, K)).astype(np.float32)
        for M in (1, 3, 8, 16, 70):
            x32 = rng.standard_normal((M, K)).astype(np.float32)
            for x, bf16_x in ((x32, False), (_bf16(x32), True)):
                for k in kernel_builds:
                    want = _pair_order_model(x, _bf16(w), fused="FMA" in k.isa)
                    got = k.matmul(x, k.pack(w, bf16=True), np.zeros((M, 37), np.float32))
                    if bf16_x and k.bf16_dot and not k.emulated:
                        # the CPU's own vdpbf16ps: the SDM's bits are asked for in
                        # test_avx512_paths_give_the_avx2_bits; here, the float32 bound
                        wb = _bf16(w).astype(np.float64)
                        bound = gamma(K) * (np.abs(x).astype(np.float64) @ np.abs(wb).T)
                        assert (np.abs(got - x.astype(np.float64) @ wb.T) <= bound).all()
                        continue
                    assert np.array_equal(got, want), (k.flavour, K, M, bf16_x)


def test_rounded_stores_are_ml_dtypes_bfloat16(kernel_builds):
    """The bf16 engine's stores (matmul rnd=True; vector lanes for whole panels, one by one for the
    short last one): each output is the unrounded product rounded to the nearest bfloat16, ties
    to even -- ml_dtypes' rounding, bit for bit -- and with accumulate, y + that, rounded again.
    A NaN stays that NaN, its float32 bits kept (ml_dtypes would cut its payload to 16 bits).
    Ties and specials come through K = 1 against weights of 1 (the product is x), the same in
    every column, whichever store path wrote it."""
    import ml_dtypes

    bits = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x3F807FFF, 0x3F808001, 0x7F7FFFFF,
                     0x7F800000, 0xFF800000, 0x7FC00001, 0x00008000, 0x80018000], np.uint32)
    tie_x = bits.view(np.float32)[:, None]
    rng = np.random.default_rng(29)
    for k in kernel_builds:
        N = k.panel_width + 5                            # one whole panel, one short one
        ones = k.pack(np.ones((N, 1), np.float32))
        got = k.matmul(tie_x, ones, np.zeros((len(bits), N), np.float32), rnd=True)
        want = np.where(np.isnan(tie_x), tie_x, tie_x.astype(ml_dtypes.bfloat16).astype(np.float32))
        assert np.array_equal(got.view(np.uint32), np.repeat(want, N, axis=1).view(np.uint32)), k.flavour
        x = rng.standard_normal((5, 96)).astype(np.float32)
        w = k.pack(rng.standard_normal((N, 96)).astype(np.float32))
        y0 = _bf16(rng.standard_normal((5, N)).astype(np.float32))
        plain = k.matmul(x, w, np.zeros((5, N), np.float32))
        assert np.array_equal(k.matmul(x, w, np.zeros((5, N), np.float32), rnd=True), _bf16(plain))
        got = k.matmul(x, w, y0.copy(), accumulate=True, rnd=True)
        assert np.array_equal(got, _bf16(y0 + _bf16(plain))), k.flavour


def test_bf16_pairs_flush_subnormals_as_vdpbf16ps_does(kernel_builds):
    """vdpbf16ps reads subnormal inputs as 0 and flushes subnormal results (Intel SDM). So every
    build packs a weight that rounds to a bfloat16 subnormal as 0; activations with a subnormal
    go the widening way on every build; and where the pairs path runs, a sum below 2^-126 is
    flushed -- which tells that path apart: 2^-70 x 2^-70 twice is 2^-139, a subnormal."""
    tiny = np.float32(2.0 ** -130)
    for k in kernel_builds:
        w = np.array([[tiny, 1.0], [1.0, tiny]], np.float32)
        got = k.matmul(np.array([[1.0, 0.0]], np.float32), k.pack(w, bf16=True),
                       np.zeros((1, 2), np.float32))
        assert got.tolist() == [[0.0, 1.0]], k.flavour               # the weight became 0
        w = np.full((3, 2), 2.0 ** -70, np.float32)
        x = np.full((1, 2), 2.0 ** -70, np.float32)
        pairs = k.matmul(x, k.pack(w, bf16=True), np.zeros((1, 3), np.float32))
        x[0, 0] = tiny                                               # a subnormal activation
        widened = k.matmul(x, k.pack(w, bf16=True), np.zeros((1, 3), np.float32))
        # widened, k = 1 then 0: 2^-140 (a subnormal, kept), then + 2^-200 (rounds away)
        assert (widened == np.float32(2.0 ** -140)).all(), k.flavour
        if k.bf16_dot and k.emulated:                                # the SDM's definition
            assert (pairs == 0).all(), k.flavour
        elif not k.bf16_dot:
            assert (pairs == np.float32(2.0 ** -139)).all(), k.flavour


def test_march_variable_picks_the_flavour(monkeypatch):
    from llamanb.cpu import kernels as cpu_kernels

    monkeypatch.setenv("LLAMANB_CPU_MARCH", "x86-64-v3")
    assert cpu_kernels.flavour() == "x86-64-v3"
    assert cpu_kernels.flavour_flags("x86-64-v3")[-1] == "-march=x86-64-v3"
    assert "-march=native" in cpu_kernels.flavour_flags("native")
    assert not any(f.startswith("-march") for f in cpu_kernels.flavour_flags("portable"))
    monkeypatch.setenv("LLAMANB_CPU_MARCH", "x86 64; rm -rf")
    with pytest.raises(LlamanbError, match="LLAMANB_CPU_MARCH") as e:
        cpu_kernels.flavour()
    assert "\n" not in str(e.value)
    monkeypatch.setenv("LLAMANB_CPU_MARCH", "no-such-cpu-xyz")
    with pytest.raises(LlamanbError, match="LLAMANB_CPU_MARCH=no-such-cpu-xyz") as e:
        cpu_kernels.load()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["abc", "0", "-3", "2.5", "100000"])
def test_bad_llamanb_threads_through_the_api_is_one_line(monkeypatch, smollm, value):
    """Engine(model, "cpu") checks $LLAMANB_THREADS as the CLI does, with the same line, before the
    pool starts: kernels/cpu/pool.cc reads it with atoi ('abc' meant every core, silently;
    100000 a thread each)."""
    from llamanb import cli
    from llamanb.engine.engine import Engine

    monkeypatch.setenv("LLAMANB_THREADS", value)
    with pytest.raises(LlamanbError, match="LLAMANB_THREADS") as api:
        Engine(smollm, "cpu")
    with pytest.raises(LlamanbError) as by_cli:
        cli._check_environment()
    assert str(api.value) == str(by_cli.value) and "\n" not in str(api.value)
    assert repr(value) in str(api.value)


def test_avx512_kernels_compile_here(kernels):
    """The AVX-512 paths (vec.h: 16-lane vectors, 32-wide panels, the 512-bit bfloat16 unpack)
    cannot run on a CPU without AVX-512, but they must compile: built for an AVX-512 target
    (with AVX512-BF16), and the library really uses 512-bit registers."""
    import platform

    from llamanb.platform import cxx_build
    from llamanb.cpu import kernels as cpu_kernels

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86 target")
    built = None
    for march in ("sapphirerapids", "x86-64-v4"):          # g++ >= 11 knows the first
        built = cxx_build.build(cpu_kernels.KERNELS_DIR, cpu_kernels.cache_dir(),
                                cpu_kernels.flavour_flags(march), "cpu-kernels")
        if built is not None:
            break
    assert built is not None, cxx_build.reason(cpu_kernels.KERNELS_DIR,
                                               cpu_kernels.flavour_flags("x86-64-v4"))
    dis = _disassembly(built.path)
    assert dis is None or "zmm" in dis
    if dis is not None and "AVX512BF16" in cpu_kernels.target_macros(march):
        assert "vdpbf16ps" in dis                   # the bfloat16 pairs path (vec.h)


def test_decode_row_in_a_batch_equals_it_alone(smollm, cpu_engine):
    """Each output element is one dot product summed in an order fixed by K alone (not by how
    many rows share the step): the derived bound for a row in a batch against it alone is 0."""
    _batch_rows_equal_alone(cpu_engine)


def _batch_rows_equal_alone(e):
    from llamanb.engine.step import Step

    prompts = [[1, 504 + i, 3000 + 7 * i, 42 + i][: 2 + i % 3] for i in range(8)]
    batch = e.new_cache(64, slots=8)
    for s, p in enumerate(prompts):
        e.prefill(p, batch, slot=s)
    step = Step.build([(s, len(p), np.array([100 + s])) for s, p in enumerate(prompts)])
    together = e.step(step, batch)                                     # [8, V]
    worst = 0.0
    for s, p in enumerate(prompts):
        alone = e.new_cache(64)
        e.prefill(p, alone)
        row = e.decode(100 + s, alone)
        worst = max(worst, float(np.abs(row - together[s]).max()))
    print(f"8-row decode step vs each row alone: max |diff| {worst} (bound 0: same order)")
    assert worst == 0.0


def test_logits_close_to_float64_like_numpy(smollm, cpu_engine, smollm_engine, capital_ids):
    """The cpu backend's float32 error against the float64 forward is of the numpy engine's size."""
    from llamanb.model.reference import forward

    ids = capital_ids
    ref = forward(smollm.weights, ids, rows=[len(ids) - 1])[0]
    lc = cpu_engine.prefill(ids, cpu_engine.new_cache(len(ids)))
    ln = smollm_engine.prefill(ids, smollm_engine.new_cache(len(ids)))
    ec, en = np.abs(lc - ref).max(), np.abs(ln - ref).max()
    print(f"max |logit - float64|: cpu {ec:.2e}, numpy {en:.2e}")
    assert int(np.argmax(lc)) == int(np.argmax(ref))
    assert ec <= 3 * en + 1e-5


def test_reference_gate_first_steps(cpu_engine, reference_data):
    """Every shared transformers case, first 4 greedy steps, with the release gate's tolerances
    (`verify --backend cpu` walks them all)."""
    _gate_first_steps(cpu_engine, reference_data)


def test_avx512_engine_passes_the_gate_emulated(smollm, kernels, emulated_kernels, reference_data):
    """The whole forward on the AVX-512 paths (16-lane attention, norms and activations too),
    emulated through SIMDe where this CPU has no AVX-512: the reference gate's first steps, and
    an 8-row step's rows equal to each row alone. Its description says it is emulated."""
    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.engine.engine import Engine

    _skip_unless_emulated(kernels, emulated_kernels)
    e = Engine(smollm, "cpu", march=cpu_kernels.EMULATED_AVX512)
    assert "16-lane vectors, AVX-512 code EMULATED through SIMDe" in e.backend.description
    _gate_first_steps(e, reference_data)
    _batch_rows_equal_alone(e)


def _gate_first_steps(engine, reference_data):
    from conftest import ALL_STEPS_TOP5_ATOL, greedy_walk

    for c in reference_data["cases"]:
        ref_ids, ref_top5 = c["greedy_ids"][:4], c["top5"][:4]
        ours, tops, kept = greedy_walk(engine, c["prompt_ids"], ref_ids, ref_top5)
        for i, logits in enumerate(kept):
            d = np.abs(logits[ref_top5[i]["ids"]] - np.array(ref_top5[i]["logits"], np.float32))
            assert d.max() <= ALL_STEPS_TOP5_ATOL, f"{c['name']} step {i}: {d.max()}"
        for i, (a, b) in enumerate(zip(ours, ref_ids)):
            if a != b:
                assert a in ref_top5[i]["ids"] and b in tops[i], f"{c['name']} step {i}"
                break


def test_verify_bf16_passes_the_reference_gate(kernels, capsys):
    """`verify --backend cpu --dtype bf16`: every shared case passes vLLM's top-5 rule against
    transformers' float32 reference (bf16 may change a token; the other must be in its top-5)."""
    from llamanb.check.verify import reference_cli

    assert reference_cli(None, None, backend="cpu", dtype="bf16") == 0
    out = capsys.readouterr().out
    print(out)
    assert "8 passed, 0 failed" in out


def test_verify_dtype_on_a_device_backend_is_one_line():
    from llamanb.check.verify import reference_cli

    with pytest.raises(LlamanbError, match="--dtype applies to the numpy and cpu backends"):
        reference_cli(None, None, backend="npu2-emulated", dtype="bf16")


@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_prompt_rows_in_tiles_equal_one_row_steps(smollm, kernels, dtype):
    """A prompt's attention takes its rows in tiles (attention.cc `tile`: 4 rows and their query
    heads walk the keys and values once), a decode row alone (`one`); each (row, head) is the
    same computation either way, and every product's row is its own FMA chain, so a prompt run
    as one step gives, row for row, the bits of the same tokens run one at a time -- from the
    first position and as a second chunk, on the contiguous cache and on a paged one whose
    blocks of 4 positions cut the tiles' runs of keys."""
    from llamanb.engine.engine import Engine

    e = Engine(smollm, "cpu", dtype=dtype)
    ids = [1, 504, 3000, 42, 7, 19, 288, 1002, 77, 12, 9, 4000, 31, 5, 600, 8, 70, 2, 3, 44, 901,
           15, 16]                                                    # 23: tiles of 4, then 3
    for block in (None, 4):
        kw = {} if block is None else dict(block=block, n_blocks=16)
        whole, single = e.new_cache(32, **kw), e.new_cache(32, **kw)
        got = np.concatenate([e.forward(ids[:13], whole), e.forward(ids[13:], whole)])
        want = np.concatenate([e.forward([t], single) for t in ids])
        print(f"{dtype}, block {block}: max |diff| {np.abs(got - want).max()} (bound 0)")
        assert np.array_equal(got, want)


def test_paged_cache_gives_the_contiguous_results(cpu_engine, capital_ids):
    e = cpu_engine
    flat, paged = e.new_cache(64), e.new_cache(64, block=4, n_blocks=16)
    a, b = e.prefill(capital_ids, flat), e.prefill(capital_ids, paged)
    for _ in range(6):                       # crosses block boundaries (block of 4 positions)
        t = int(np.argmax(a))
        assert np.array_equal(a, b)
        a, b = e.decode(t, flat), e.decode(t, paged)
    assert np.array_equal(a, b)


def test_mixed_step_in_one_call_equals_block_by_block(cpu_engine):
    """A step mixing a new prompt with decoding sequences, run whole in kernels/cpu/forward.cc
    over the contiguous store and over the paged one (block tables), and block by block from
    Python (`collect` asks for every block's output): the same kernels in the same order, so the
    same bits -- and the same keys land in every cache."""
    from llamanb.engine.step import Step

    e = cpu_engine
    caches = {"one call, contiguous": e.new_cache(32, slots=3),
              "one call, paged": e.new_cache(32, slots=3, block=4, n_blocks=24),
              "block by block, contiguous": e.new_cache(32, slots=3)}
    step = Step.build([(0, 3, np.array([100])), (1, 0, np.array([1, 42, 43, 44, 45])),
                       (2, 6, np.array([7]))])
    out = {}
    for name, c in caches.items():
        e.prefill([1, 504, 3000], c, slot=0)
        e.prefill([1, 77, 12, 9, 4000, 31], c, slot=2)
        out[name] = e.step(step, c, collect=[] if name.startswith("block") else None)   # [3, V]
    ref = out["block by block, contiguous"]
    for name, got in out.items():
        print(f"mixed step, {name}: max |diff| vs block by block {np.abs(got - ref).max()}")
        assert np.array_equal(got, ref)
    first = caches["block by block, contiguous"]
    for c in caches.values():
        for layer in (0, e.config.n_layers - 1):
            for slot, n in ((0, 4), (1, 5), (2, 7)):
                assert np.array_equal(c.keys(layer, slot, n), first.keys(layer, slot, n))
                assert np.array_equal(c.values(layer, slot, n), first.values(layer, slot, n))


def test_kernels_exp_is_faithful_over_the_normal_range(kernel_builds):
    """vec.h's exp_vf (softmax, SiLU): within 2 ulp of float64's e^x for every float32 in
    [-1, -0.5) and [0.5, 1) and 4 M points spread over the whole range whose results are normal
    floats; 0 below it, infinity above, NaN for NaN. The bound: Cephes documents a peak relative
    error of 1.7e-7 for these coefficients, 1.4 ulp where a binade starts, plus the final
    rounding's half ulp -- 2 ulp (measured here: about 1)."""
    lo, hi = np.float32(-87.33654475), np.float32(88.72283)   # e^x normal: 2^-126 .. FLT_MAX
    every = np.arange(np.float32(0.5).view(np.uint32), np.float32(1.0).view(np.uint32),
                      dtype=np.uint32).view(np.float32)
    spread = np.random.default_rng(3).uniform(lo, hi, 4_000_000).astype(np.float32)
    x = np.concatenate([every, -every, spread, [lo, hi, 0.0, -0.0, 1e-30, -1e-30]]).astype(np.float32)
    ref = np.exp(x.astype(np.float64))
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    for k in kernel_builds:
        y = k.exp(x)
        err = np.abs(y - ref) / ulp
        print(f"{k.flavour}: max {err.max():.3f} ulp, mean {err.mean():.3f}")
        assert err.max() <= 2.0, (k.flavour, x[err.argmax()])
        edge = k.exp(np.float32([-87.34, -1e4, -np.inf, 88.73, 1e4, np.inf, np.nan]))
        assert (edge[:3] == 0).all() and np.isposinf(edge[3:6]).all() and np.isnan(edge[6])
        # a value's bits never depend on where it sits in a vector (the scalar tail is exp_vf too)
        odd = spread[:1003]
        assert np.array_equal(np.concatenate([k.exp(odd[i:i + 1]) for i in range(0, 1003, 97)]),
                              k.exp(odd)[::97])


def test_packed_panels_are_the_weight_transposed(kernels):
    """pack(W)[p, k, j] == W[p NP + j, k], zeros past the last row: checked element by element
    against numpy's own reshaping."""
    rng = np.random.default_rng(1)
    N, K, NP = 37, 11, kernels.panel_width
    w = rng.standard_normal((N, K)).astype(np.float32)
    got = kernels.pack(w).data                                        # [ceil(N / NP), K, NP]
    want = np.zeros((-(-N // NP) * NP, K), np.float32)
    want[:N] = w
    want = want.reshape(-1, NP, K).transpose(0, 2, 1)
    assert got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("qtype", [None, "bf16", "Q4_1", "Q4_0", "Q8_0"])
def test_packing_in_slices_gives_the_panels_of_one_pass(kernels, monkeypatch, qtype):
    """pack / pack_quant work PACK_ROWS rows at a time (so a memory-mapped matrix's pages can be
    handed back as it goes): with slices of 2 panels the panels equal those of one slice, and
    `done` is handed every row exactly once, in order."""
    from llamanb.cpu import kernels as cpu_kernels

    NP = kernels.panel_width
    N = 5 * NP + 3                                                # a short last panel
    if qtype in QTYPES:
        K = _k32(qtype, 96)
        w = _random_blocks(qtype, N, K // 32, seed=3)
        pack = lambda a, **kw: kernels.pack_quant(a, qtype, K, **kw)      # noqa: E731
    else:
        w = np.random.default_rng(2).standard_normal((N, 13)).astype(np.float32)
        pack = lambda a, **kw: kernels.pack(a, bf16=qtype == "bf16", **kw)   # noqa: E731
    whole = pack(w).data
    monkeypatch.setattr(cpu_kernels, "PACK_ROWS", 2 * NP)
    seen = []
    out = np.full(whole.shape, 0xAB, whole.dtype)                   # a carved array, filled
    sliced = pack(w, done=lambda rows: seen.append(rows.copy()), out=out).data
    assert sliced is out
    assert sliced.dtype == whole.dtype and np.array_equal(sliced, whole)
    assert [len(r) for r in seen] == [2 * NP, 2 * NP, NP + 3]
    assert np.array_equal(np.concatenate(seen), w)


def _word_sum(arrays) -> int:
    """The wrapping sum of every 32-bit word of the arrays, by numpy."""
    return sum(int(a.view(np.uint32).sum(dtype=np.uint64)) for a in arrays) % 2**32


def test_weights_read_alone_reads_every_byte(kernels, cpu_engine):
    """Kernels.panel_reader (the bench's weights read alone) sums every 32-bit word of every
    panel, as numpy does: panels of one vector row and less (the scalar tail), a single panel,
    enough for the decode's chunks of 4, and the engine's own 121 matrices (read_weights). A
    changed last word of the last panel changes the sum by as much; a panel that is not whole
    words is refused."""
    from llamanb.cpu.kernels import Packed

    NP, rng = kernels.panel_width, np.random.default_rng(4)
    mats = [kernels.pack(rng.standard_normal((n, k)).astype(np.float32), bf16=bf)
            for n, k, bf in ((NP, 1, False), (3, 3, False), (NP * 70 + 5, 9, False),
                             (NP * 40, 7, True))]
    mats.append(kernels.pack_quant(_random_blocks("Q4_1", NP * 33, 3, seed=5), "Q4_1", 96))
    read = kernels.panel_reader(mats)
    before = read()
    assert before == _word_sum(m.data for m in mats)
    mats[-1].data.reshape(-1).view(np.uint32)[-1] += np.uint32(1)
    assert read() == (before + 1) % 2**32
    b = cpu_engine.backend
    every = [lw[n] for lw in b.layer_w for n in ("wqkv", "wo", "gate_up", "down")] + [b.lm_head]
    assert b.read_weights() == _word_sum(m.data for m in every)
    with pytest.raises(ValueError, match="32-bit words"):
        kernels.panel_reader([Packed(2, 3, np.zeros((2, 3), np.uint8), "q4_1")])


def test_arena_carves_aligned_disjoint_arrays_and_holds_every_panel(kernels, cpu_engine):
    """cpu_kernels.Arena: arrays 64-byte aligned, back to back, never past the end (one line
    when full); and the engine's 121 packed matrices all live inside its one arena."""
    from llamanb.cpu.kernels import Arena

    shapes = [((3, 5), np.float32), ((7,), np.uint16), ((2, 2, 9), np.uint8)]
    a = Arena(Arena.room(shapes))
    got = [a.take(s, d) for s, d in shapes]
    starts = [g.ctypes.data for g in got]
    assert all(p % 64 == 0 for p in starts) and starts == sorted(starts)
    assert all(s0 + g.nbytes <= s1 for s0, g, s1 in zip(starts, got, starts[1:]))
    with pytest.raises(ValueError, match="no room"):
        a.take((1,), np.uint8)
    b = cpu_engine.backend
    lo = b.arena._buf.ctypes.data
    mats = [w for lw in b.layer_w for w in lw.values() if hasattr(w, "fmt")] + [b.lm_head]
    assert len(mats) == 4 * cpu_engine.config.n_layers + 1
    assert all(lo <= w.data.ctypes.data and w.data.ctypes.data + w.nbytes <= lo + b.arena.nbytes
               for w in mats)
    assert b.arena.nbytes - b.arena.used < 64                       # sized exactly: nothing spare


def test_bf16_matches_the_numpy_bf16_engine(smollm, cpu_engine, capital_ids):
    import ml_dtypes

    from llamanb.engine.engine import Engine

    cb, nb, cf = Engine(smollm, "cpu", dtype="bf16"), Engine(smollm, dtype="bf16"), cpu_engine
    assert cb.backend.weight_bytes < 0.51 * cf.backend.weight_bytes     # half the bytes to read
    lc = cb.prefill(capital_ids, cb.new_cache(len(capital_ids)))
    ln = nb.prefill(capital_ids, nb.new_cache(len(capital_ids)))
    lf = cf.prefill(capital_ids, cf.new_cache(len(capital_ids)))
    assert np.array_equal(lc, lc.astype(ml_dtypes.bfloat16).astype(np.float32))   # bf16 values
    # same bf16 numerics, different float32 summation order inside each op: the two bf16 runs
    # differ by bf16 roundings flipped by those float32 differences (2^-8 relative each); the
    # bound is the one test_engine allows bf16 against fp32.
    print(f"max |cpu bf16 - numpy bf16| {np.abs(lc - ln).max():.3f}, "
          f"|cpu bf16 - cpu fp32| {np.abs(lc - lf).max():.3f}")
    assert np.abs(lc - ln).max() < 2.0 and np.abs(lc - lf).max() < 2.0
    assert int(np.argmax(lc)) in set(np.argsort(-lf)[:2])
    assert np.corrcoef(lc, ln)[0, 1] > 0.999


def test_no_compiler_is_one_line_naming_numpy(smollm, monkeypatch):
    from llamanb.engine.engine import Engine

    monkeypatch.setenv("LLAMANB_CXX", "/nonexistent/bin/g++")
    with pytest.raises(LlamanbError) as e:
        Engine(smollm, "cpu")
    assert "numpy" in str(e.value) and "\n" not in str(e.value)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-m", "llamanb", "generate", "--backend", "cpu",
                          "--prompt", "Hi", "--max-new-tokens", "2"], capture_output=True,
                         text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "--backend numpy" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_build_is_keyed_and_atomic(tmp_path, kernels):
    """hostbuild with the cpu flags: a second build is a cache hit, another flag or source is a
    new key, and nothing but finished libraries is left in the cache directory."""
    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.platform import cxx_build as hostbuild

    src = tmp_path / "src"
    src.mkdir()
    (src / "one.cc").write_text('extern "C" int one() { return 1; }\n')
    cache = tmp_path / "cache"
    flags = cpu_kernels.portable_flags()
    first = hostbuild.build(src, cache, flags, "cpu-kernels")
    again = hostbuild.build(src, cache, flags, "cpu-kernels")
    assert not first.cache_hit and again.cache_hit and again.path == first.path
    assert first.path.name.startswith("cpu-kernels-")
    other = hostbuild.build(src, cache, flags + ("-DX=1",), "cpu-kernels")
    assert other.key != first.key
    (src / "one.cc").write_text('extern "C" int one() { return 2; }\n')
    changed = hostbuild.build(src, cache, flags, "cpu-kernels")
    assert changed.key != first.key and not changed.cache_hit
    libs = sorted(p.name for p in cache.iterdir() if p.suffix == ".so")
    assert len(libs) == 3 and not any(".tmp" in p.name for p in cache.iterdir())   # no .tmp left
    import ctypes

    assert ctypes.CDLL(str(changed.path)).one() == 2
    assert kernels.built.path.suffix == ".so" and kernels.built.key in kernels.built.path.name or \
        kernels.built.key[:24] in kernels.built.path.name


# ---- the GGUF's own quantised blocks, decoded inside the matmul ---------------------------------

QTYPES = ("Q4_1", "Q4_0", "Q5_0", "Q4_K", "Q6_K", "Q8_0")
# bytes of a panel block per output column and 32 weights where they differ from the file's
# (kernels/cpu/quant.h): Q4_K's sub-block scale and minimum as two float32, then 16 of nibbles;
# Q6_K's scales of the two halves as two float32, then 32 int8
PANEL_BYTES = {"Q4_K": 4 + 4 + 16, "Q6_K": 4 + 4 + 32}


def _gguf_block(qtype: str) -> tuple[int, int]:
    """(weights, bytes) of one block, as the gguf package states them (GGML_QUANT_SIZES)."""
    import gguf

    return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]


def _block_bytes(qtype: str) -> int:
    """The file's bytes per 32 weights."""
    size, nbytes = _gguf_block(qtype)
    return nbytes * 32 // size


def _k32(qtype: str, k: int) -> int:
    """The smallest multiple of the format's block (32, or Q4_K's super-block of 256) >= k."""
    size = _gguf_block(qtype)[0]
    return -(-k // size) * size


def _random_blocks(qtype: str, n_rows: int, n_blocks: int, seed: int) -> np.ndarray:
    """GGUF rows of random blocks of n_blocks x 32 weights: scales drawn over float16's range
    (normal, subnormal, zero, negative), everything else uniform (Q4_K: its 6-bit sub-block
    scales and minimums too; Q6_K: its int8 scales) -- uint8 [n_rows, file bytes]."""
    rng = np.random.default_rng(seed)
    size, per = _gguf_block(qtype)
    n = n_blocks * 32 // size
    assert n * size == n_blocks * 32
    b = rng.integers(0, 256, (n_rows, n, per), dtype=np.uint8)
    scales = (rng.standard_normal((n_rows, n, 2)) *
              2.0 ** rng.integers(-26, 4, (n_rows, n, 2))).astype(np.float16)
    scales[0, 0] = [0.0, -0.0]
    if qtype == "Q6_K":                                          # d is the last 2 bytes
        b[..., -2:] = scales[..., :1].view(np.uint8).reshape(n_rows, n, 2)
        return b.reshape(n_rows, -1)
    b[..., :4] = scales.view(np.uint8).reshape(n_rows, n, 4)     # Q4_1: d, m; Q4_K: d, dmin
    if qtype in ("Q4_0", "Q5_0", "Q8_0"):                        # one scale, then quants
        b[..., 2:4] = rng.integers(0, 256, (n_rows, n, 2), dtype=np.uint8)
    return b.reshape(n_rows, -1)


@pytest.mark.parametrize("qtype", ["Q5_0", "Q4_0"])
def test_recoded_blocks_decode_bit_for_bit_as_gguf(kernel_builds, qtype):
    """Q5_0 and Q4_0 parts of a fused matrix beside Q8_0 parts, re-encoded as Q8_0 blocks
    (cpu_kernels.recode): every weight the kernels decode has the bits of the gguf package's
    dequantisation of the original blocks, scales over float16's whole range."""
    from llamanb.cpu import kernels as cpu_kernels

    raw = _random_blocks(qtype, 37, 5, seed=13)
    q8 = cpu_kernels.recode(raw, qtype, "Q8_0")
    assert q8.shape == (37, 5 * _block_bytes("Q8_0"))
    want = _gguf_dequant(raw, qtype)
    assert np.array_equal(_gguf_dequant(q8, "Q8_0").view(np.uint32), want.view(np.uint32))
    for k in kernel_builds:
        got = k.unpack(k.pack_quant(q8, "Q8_0", 160))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), k.flavour


def test_panel_format_of_a_fused_matrix():
    """One panel format for a matrix whose parts are stored as these GGUF types, or None."""
    from llamanb.cpu.kernels import panel_format

    cases = {("Q4_1",): "Q4_1", ("Q4_0",): "Q4_0", ("Q5_0",): "Q5_0", ("Q5_0", "Q8_0"): "Q8_0",
             ("Q4_0", "Q8_0"): "Q8_0", ("Q4_0", "Q5_0"): "Q8_0", ("Q4_K", "Q4_K"): "Q4_K",
             ("Q4_1", "Q8_0"): None, ("Q4_K", "Q6_K"): None, ("Q5_1",): None, ("F32",): None,
             ("Q4_K", "Q5_0"): None}
    for kinds, want in cases.items():
        assert panel_format(kinds) == want, kinds


def _gguf_dequant(raw: np.ndarray, qtype: str) -> np.ndarray:
    """The gguf package's own dequantisation of rows of blocks -> float32 [rows, K]."""
    import gguf

    q = gguf.GGMLQuantizationType[qtype]
    return np.asarray(gguf.quants.dequantize(raw, q), dtype=np.float32).reshape(raw.shape[0], -1)


@pytest.mark.parametrize("qtype", QTYPES)
def test_quantised_panels_decode_bit_for_bit_as_gguf(kernel_builds, qtype, smollm_reader):
    """Every weight decoded in registers (kernels/cpu/quant.h, through the matmul's own decode
    function) has the bits of the `gguf` package's dequantisation: random blocks over float16's
    whole range, and the shipped GGUF's own blocks. Both builds (F16C or AVX-512 conversion in
    the native one, the scalar float16 conversion in the portable one)."""
    import gguf

    raw = _random_blocks(qtype, 37, _k32(qtype, 96) // 32, seed=7)   # N = 37: a short last panel
    # the shipped GGUF as the gguf package reads it (conftest's session-wide GGUFReader); it has
    # no Q4_0 or Q5_0 tensor: a Q4_1 one's weights quantised to that format by the gguf package
    # stand in (the package cannot write K-quants: random blocks only)
    rows = [raw]
    if qtype not in ("Q4_K", "Q6_K"):
        stored = "Q4_1" if qtype in ("Q4_0", "Q5_0") else qtype
        t = next(t for t in smollm_reader.tensors if t.tensor_type.name == stored)
        real = np.asarray(t.data).view(np.uint8).reshape(int(t.shape[-1]), -1)[:50]
        if stored != qtype:
            real = gguf.quants.quantize(_gguf_dequant(real, stored), gguf.GGMLQuantizationType[qtype])
        rows.append(real)
    for k in kernel_builds:
        for r in rows:
            w = k.pack_quant(r, qtype, r.shape[1] // _block_bytes(qtype) * 32)
            got, want = k.unpack(w), _gguf_dequant(r, qtype)
            assert got.shape == want.shape
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), k.flavour


@pytest.mark.parametrize("qtype", QTYPES)
def test_quantised_matmul_equals_float32_panels_bitwise(kernel_builds, qtype):
    """The matmul on quantised panels multiplies the same float32 weights (previous test) in the
    same order (one FMA chain over k per output) as on float32 panels of the dequantised matrix:
    the derived bound between the two is 0. And within Higham's bound of float64."""
    raw = _random_blocks(qtype, 45, _k32(qtype, 224) // 32, seed=11)     # K = 224 (256), N = 45
    w = _gguf_dequant(raw, qtype)
    rng = np.random.default_rng(5)
    for k in kernel_builds:
        wq, wf = k.pack_quant(raw, qtype, w.shape[1]), k.pack(w)
        for M in (1, 2, 3, 5, 8, 19, 70):
            x = rng.standard_normal((M, w.shape[1])).astype(np.float32)
            y0 = rng.standard_normal((M, w.shape[0])).astype(np.float32)
            yq = k.matmul(x, wq, y0.copy(), accumulate=True)
            yf = k.matmul(x, wf, y0.copy(), accumulate=True)
            assert np.array_equal(yq, yf), (k.flavour, M)
            exact, bound = _accumulated_bound(x, w, y0)
            assert (np.abs(yq - exact) <= bound).all()
        assert wq.nbytes == -(-45 // k.panel_width) * k.panel_width * w.shape[1] // 32 * \
            PANEL_BYTES.get(qtype, _block_bytes(qtype))  # the GGUF's bytes per weight, in panels


# A child with a given LLAMANB_THREADS: every case's product (accumulated onto y0) into out.npz.
_THREADS_CHILD = """
import sys
import numpy as np
from llamanb.cpu import kernels as cpu_kernels
k = cpu_kernels.load()
assert k.threads == int(sys.argv[3]), (k.threads, sys.argv[3])
d = np.load(sys.argv[1])
out = {}
for name in sorted({n.split(":")[0] for n in d.files}):
    kind, act8 = name.split("_")[0], name.endswith("_act8")
    w = (k.pack_quant(d[name + ":w"], "Q4_1", d[name + ":x"].shape[1]) if kind == "q4" else
         k.pack(d[name + ":w"], bf16=kind == "bf16"))
    out[name] = k.matmul(d[name + ":x"], w, d[name + ":y0"].copy(), accumulate=True, act8=act8)
np.savez(sys.argv[2], **out)
"""


def test_decode_products_split_among_any_thread_count(kernels, tmp_path):
    """Decode products (up to 16 rows) are shared out by runs of panels (matmul.cc's
    decode_chunks: each thread its own run from the front, the rest taken from the back): with 1,
    2, 3 or 5 threads, over 1 to 170 panels (chunks of 1, 2 and 4 panels), every output is
    computed once -- accumulated onto y0, within Higham's bound of float64, so a panel missed or
    run twice fails -- and the bits never depend on the thread count."""
    import ml_dtypes

    rng = np.random.default_rng(21)
    NP, K = kernels.panel_width, 64
    cases = {}
    for panels in (1, 2, 3, 7, 33, 70, 170):
        N = panels * NP - (3 if panels > 1 else 0)                    # a short last panel
        for M in (1, 5, 16):
            x = rng.standard_normal((M, K)).astype(np.float32)
            y0 = rng.standard_normal((M, N)).astype(np.float32)
            w = rng.standard_normal((N, K)).astype(np.float32)
            cases[f"f32_{panels}_{M}"] = (x, w, y0, w)
            cases[f"bf16_{panels}_{M}"] = (x, w, y0, w.astype(ml_dtypes.bfloat16).astype(np.float32))
            raw = _random_blocks("Q4_1", N, K // 32, seed=panels * 100 + M)
            cases[f"q4_{panels}_{M}"] = (x, raw, y0, _gguf_dequant(raw, "Q4_1"))
            cases[f"q4_{panels}_{M}_act8"] = (x, raw, y0, None)
    np.savez(tmp_path / "in.npz", **{f"{n}:{part}": a for n, c in cases.items()
                                     for part, a in zip(("x", "w", "y0"), c[:3])})
    outs = {}
    for threads in (1, 2, 3, 5):
        env = dict(os.environ, LLAMANB_THREADS=str(threads))
        r = subprocess.run([sys.executable, "-c", _THREADS_CHILD, str(tmp_path / "in.npz"),
                            str(tmp_path / f"out{threads}.npz"), str(threads)], env=env,
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs[threads] = dict(np.load(tmp_path / f"out{threads}.npz"))
    for name, (x, _, y0, w) in cases.items():
        if w is not None:
            exact, bound = _accumulated_bound(x, w, y0)
            assert (np.abs(outs[1][name] - exact) <= bound).all(), name
        for threads in (2, 3, 5):
            assert np.array_equal(outs[threads][name].view(np.uint32),
                                  outs[1][name].view(np.uint32)), (name, threads)


@pytest.fixture(scope="module")
def q4_engine(smollm, kernels):
    from llamanb.engine.engine import Engine

    return Engine(smollm, "cpu", dtype="q4_1", activations="float32")


def test_q4_1_engine_is_the_float32_engine_from_a_sixth_of_the_bytes(q4_engine, cpu_engine,
                                                                      capital_ids):
    """The shipped GGUF run on its own Q4_1 (and Q8_0 embedding) blocks: prefill logits and
    three greedy decode steps bit-identical to the float32 engine on the dequantised cache (same
    weights, same order: bound 0), reading the file's bytes per weight, not 4."""
    b = q4_engine.backend
    kinds = {lw[n].fmt for lw in b.layer_w for n in ("wqkv", "wo", "gate_up", "down")}
    assert kinds == {"q4_1"} and b.lm_head.fmt == "q8_0"
    assert "Q4_1" in b.description
    n_mat = sum(a.n * a.k for lw in b.layer_w for a in lw.values() if hasattr(a, "fmt"))
    assert b.weight_bytes < 0.2 * cpu_engine.backend.weight_bytes
    assert b.weight_bytes >= n_mat * 20 / 32 + b.lm_head.n * b.lm_head.k * (34 / 32 - 20 / 32)
    outs = []
    for e in (q4_engine, cpu_engine):
        cache = e.new_cache(64)
        rows = [e.prefill(capital_ids, cache)]
        for _ in range(3):
            rows.append(e.decode(int(np.argmax(rows[-1])), cache))
        outs.append(rows)
    for a, c in zip(*outs):
        assert np.array_equal(a, c)


def test_verify_q4_1_passes_the_reference_gate(kernels, capsys):
    """`verify --backend cpu --dtype q4_1`: every shared transformers case passes the top-5 gate."""
    from llamanb.check.verify import reference_cli

    assert reference_cli(None, None, backend="cpu", dtype="q4_1") == 0
    out = capsys.readouterr().out
    print(out)
    assert "8 passed, 0 failed" in out and "Q4_1" in out


def test_quantised_dtype_errors_are_one_line(smollm, kernels):
    from dataclasses import replace

    from llamanb.cpu.backend import check_dtype
    from llamanb.engine.engine import Engine

    with pytest.raises(LlamanbError, match="--backend cpu") as e:
        check_dtype("numpy", "q4_1")
    assert "\n" not in str(e.value)
    no_gguf = replace(smollm, weights=replace(smollm.weights, quantized=None))
    with pytest.raises(LlamanbError, match="not loaded from a GGUF") as e:
        Engine(no_gguf, "cpu", dtype="q4_1")
    assert "\n" not in str(e.value)
    assert Engine(no_gguf, "cpu", dtype="auto").backend.dtype == "float32"
    with pytest.raises(LlamanbError, match="are not Q8_0") as e:       # the layers are Q4_1
        Engine(smollm, "cpu", dtype="q8_0")
    assert "\n" not in str(e.value)


def test_smollm_cache_is_its_float32_weights_once(smollm, cpu_engine, q4_engine):
    """Issue 29 item 4, on the embedded model after the float32 and q4_1 cpu engines (and the
    numpy one) have loaded: the entry is the float32 weights once plus the tokenizer -- at most
    the fp32 weights' 538 MB and the small files (before: 1.67 GB with three more layouts)."""
    from llamanb.io.store import entry_bytes

    files = {f.name: f.stat().st_size for f in smollm.cache_dir.iterdir()}
    assert [f for f in files if f.endswith(".safetensors")] == ["model.safetensors"]
    small = sum(v for f, v in files.items() if f != "model.safetensors")
    assert small < 4e6                                    # tokenizer, config, llamanb.json
    assert files["model.safetensors"] - smollm.weights.nbytes() < 64 * 1024     # its header
    assert entry_bytes(smollm.cache_dir) <= smollm.weights.nbytes() + 64 * 1024 + small
    print(f"cache entry {entry_bytes(smollm.cache_dir) / 1e6:.1f} MB, float32 weights "
          f"{smollm.weights.nbytes() / 1e6:.1f} MB")

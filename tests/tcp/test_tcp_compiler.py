"""Furiosa's compiler on the block (llamanb.tcp.compiler, .table, .predict, `tcp` CLI).

The independent references: furiosa-tcc itself (a sample of the stored table is recompiled and
must give the same cycles), the chapter's einsum program (each kernel's axis sizes give the op's
FLOPs, which tests/tcp/test_tcp_program.py ties to llamanb.model.flops' closed forms), and the config's
parameter and KV-cache accounting (the batch readings). Compiler tests skip, saying why, only
where furiosa-tcc / furiosa-kernels are not installed; `make test` installs both.
"""
from __future__ import annotations

import math

import pytest

from llamanb.model.config import LLAMA3_70B, LLAMA31_8B, SMOLLM2_135M
from llamanb.errors import LlamanbError
from llamanb.tcp.readiness import tcp_compiler_missing, tcp_compiler_note
from llamanb.tcp import compiler, predict, table
from llamanb.tcp.program import dims, program

MODELS = [SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B]
needs_tcc = pytest.mark.skipif(bool(compiler.missing()), reason="furiosa-tcc / furiosa-kernels not installed ("
                               + "; ".join(compiler.missing()) + "); `make test` installs them")
needs_cross = pytest.mark.skipif(bool(compiler.missing(edf=True)), reason="no EDF stage here: "
                                 + "; ".join(compiler.missing(edf=True)))
EINSUM_FUNCTIONS = ("head_proj", "out_proj", "ffn_proj", "down_proj", "attn_scores", "attn_values", "lm_head",
                    "einsum_rope_naive")


@pytest.mark.parametrize("cfg", MODELS, ids=lambda c: c.name)
@pytest.mark.parametrize("phase, B, s", [("prefill", 2, 16), ("decode", 3, 40)])
def test_every_einsum_kernel_has_the_programs_flops(cfg, phase, B, s):
    """2 x the product of a contraction kernel's axis sizes = the program's FLOPs for that op."""
    d = dims(cfg, B, s if phase == "prefill" else 1, s + (phase == "decode"))
    want = program(cfg, phase).flops(d)
    ks = compiler.kernels(cfg, phase, B, s if phase == "prefill" else s + 1)
    checked = 0
    for k in ks:
        if k.function.removesuffix("_fp8") in EINSUM_FUNCTIONS:
            got = 2 * math.prod(v for _, v in k.bindings)
            assert got * k.times == want[k.op], k.op
            checked += 1
    assert checked == 12          # q k v, rope q k, scores, values, o, gate, up, down, lm_head
    assert {k.op for k in ks} >= {"attn_norm", "softmax", "swiglu", "attn_residual", "final_norm"}


def test_bad_shapes_and_targets_are_one_line_errors():
    for args in (("train", 1, 1), ("decode", 0, 1), ("decode", 1, True)):
        with pytest.raises(LlamanbError):
            compiler.kernels(SMOLLM2_135M, *args)
    with pytest.raises(LlamanbError, match="weights"):
        compiler.kernels(SMOLLM2_135M, "decode", 1, 8, weights="int4")
    with pytest.raises(LlamanbError, match="unknown target"):
        compiler.check_target("renegade-16pe")


def test_readiness_names_what_the_compiler_lacks():
    """Fakes for the probes: furiosa-tcc on PATH/next to Python, furiosa.tcl importable, the cross cc."""
    tools = lambda present: (lambda name: name in present)                       # noqa: E731
    assert tcp_compiler_missing(lambda m: False, tools(())) == (
        "furiosa-tcc (pip install furiosa-tcc)", "python module furiosa.tcl (pip install furiosa-kernels)")
    assert tcp_compiler_missing(lambda m: m == "furiosa.tcl", tools(("furiosa-tcc",))) == ()
    assert "no EDF" in tcp_compiler_note(tools(("furiosa-tcc",)))
    assert "EDF binaries too" in tcp_compiler_note(tools(("aarch64-linux-gnu-gcc",)))


def test_stored_table_says_where_it_came_from():
    doc = table.load()
    assert doc["compiler"].startswith("tcc v") and doc["command"] == table.REGENERATE
    assert doc["clock_hz"] == compiler.CLOCK_HZ == 1e9
    for cfg in MODELS:
        for phase in ("prefill", "decode"):
            for t in table.BOTH:
                rs = table.rows(cfg, phase, 1, 128 if (cfg is SMOLLM2_135M and phase == "prefill") else 2048,
                                target=t, doc=doc)
                assert [r["op"] for r in rs] == [k.op for k in compiler.kernels(cfg, "decode", 1, 8)]


@needs_tcc
@pytest.mark.parametrize("pick", [
    ("SmolLM2-135M-Instruct", "decode", "q_proj", "renegade"),
    ("SmolLM2-135M-Instruct", "decode", "q_proj", "renegade-8pe"),
    ("SmolLM2-135M-Instruct", "prefill", "softmax", "renegade-8pe"),
    ("Llama-3.1-8B", "decode", "attn_norm", "renegade-8pe"),
])
def test_the_compiler_still_gives_the_stored_cycles(pick):
    """Recompile stored rows (small kernels, about a second each): same TCL, same cycles."""
    model, phase, op, target = pick
    doc = table.load()
    row = next(r for r in doc["rows"] if (r["model"], r["phase"], r["op"], r["target"], r["B"], r["weights"])
               == (model, phase, op, target, 1, "bf16"))
    k = next(k for k in compiler.kernels(table.MODELS[model], phase, row["B"], row["s"]) if k.op == op)
    assert dict(k.bindings) == row["bindings"]
    got = compiler.evaluate(k.tcl(), target)
    assert got == row["cycles"], (f"furiosa-tcc ({compiler.version()}) now says {got} cycles for {model} {phase} "
                                  f"{op} on {target}; the table ({doc['compiler']}) says {row['cycles']}: "
                                  f"regenerate with `{table.REGENERATE}`")


@needs_tcc
def test_the_schedule_holds_the_kernels_own_hbm_transfers():
    """--tcl-plot: the estimate is DMA loads (input, weight), the Contraction Engine, a DMA store,
    and the cycles are the schedule's end. The weight load moves D x H x E bf16 bytes."""
    k = next(k for k in compiler.kernels(SMOLLM2_135M, "decode", 1, 64) if k.op == "q_proj")
    cycles, steps = compiler.schedule(k.tcl(), "renegade")
    assert cycles == max(s["end"] for s in steps)
    kinds = [s["name"].split()[0] for s in steps]
    assert kinds.count("Move(Load)") == 2 and kinds.count("Move(Store)") == 1
    assert any(s["context"] == "MainContext" and "EinsumByDpe" in s["name"] for s in steps)
    src = k.tcl()
    assert "dpe.exec" in src and f"assert D == {SMOLLM2_135M.hidden}" in src


@needs_tcc
@needs_cross
def test_one_kernel_compiles_to_an_rngd_binary(tmp_path):
    k = next(k for k in compiler.kernels(SMOLLM2_135M, "decode", 1, 64) if k.op == "attn_norm")
    e = compiler.compile_edf(k.tcl(), "renegade", tmp_path / "norm.edf")
    assert e.size == (tmp_path / "norm.edf").stat().st_size > 0
    assert [s for s, _ in e.stages][0] == "tcl to dfg" and e.stages[-1][0] == "resourcelir to edf"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["norm.edf"]          # no temporary left


def test_batch_readings_follow_the_memory_accounting():
    """full / paged: (48 GB - fp8 weights on the card) // one sequence's bf16 KV cache per card."""
    for p in predict.PUBLISHED:
        cfg, P = p["cfg"], p["cards"]
        per_card_weights = cfg.n_params() / P if P > 1 else cfg.n_params()
        for rule, tokens in (("full", p["n_in"] + p["n_out"]), ("paged", p["n_in"] + p["n_out"] // 2)):
            kv = cfg.kv_bytes(tokens, "bf16") / P
            B = predict.batch(p, rule)
            assert B % (8 * P) == 0
            # pipeline stages hold whole layers; the embedding sits on one card, so allow its size
            slack = cfg.vocab * cfg.hidden / kv + 8 * P
            assert abs(B - (48e9 - per_card_weights) // kv) <= slack, (p["model"], rule)


def test_the_prediction_is_a_range_over_every_reading():
    rs = predict.ranges()
    assert [r["model"] for r in rs] == [p["model"] for p in predict.PUBLISHED]
    for r in rs:
        n = len(r["readings"])
        assert n == (16 if r["cards"] > 1 else 8)
        assert r["low"] == min(x.tok_s for x in r["readings"]) <= r["high"]
        assert r["inside"] == (r["low"] <= r["published"] <= r["high"])
        for x in r["readings"]:
            assert 0 < x.uncounted_s < x.B * r["n_out"] / x.tok_s


def test_single_card_reading_by_hand():
    """The 8B 'paged' reading recomputed from the stored rows: prompts one by one, then n_out - 1
    decode rounds at the mean context, plus the KV rows, embedding rows and token ids moved."""
    p = next(q for q in predict.PUBLISHED if q["cards"] == 1)
    cfg, doc = p["cfg"], table.load()
    B, s = predict.batch(p, "paged"), p["n_in"] + p["n_out"] // 2

    def step(phase, b, ss):
        return sum(r["cycles"] * r["times"] for r in table.rows(cfg, phase, b, ss, "fp8", doc=doc)) / 1e9

    kv_row = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 2
    move = lambda t: t * kv_row / 1.5e12 + t * cfg.hidden / 1.5e12 + t * 4 / 30e9          # noqa: E731
    total = B * (step("prefill", 1, p["n_in"]) + move(p["n_in"])) + (p["n_out"] - 1) * (
        step("decode", B, s) + move(B) + B * 4 / 30e9)
    got = predict.predict(p, "paged", "free", "on card", predict.ATTENTION[0], doc=doc)
    assert got.tok_s == pytest.approx(B * p["n_out"] / total, rel=1e-12)


@needs_tcc
def test_cli_bad_input_is_one_line_exit_2(llamanb_cache):
    from conftest import run_cli

    for args in (["--targets", "renegade-3pe"], ["--op", "nope"], ["--batch", "0"], ["--preset", "gpt9"]):
        r = run_cli(["tcp", "compile", *args], cache=llamanb_cache)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, args


@needs_tcc
def test_cli_compiles_one_op_on_two_targets(llamanb_cache):
    from conftest import run_cli

    r = run_cli(["tcp", "compile", "--preset", "smollm2-135m", "--op", "attn_norm"], cache=llamanb_cache)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("attn_norm"))
    assert "furiosa.kernels.common.rms_norm" in line and line.count("us)") == 2

"""The TCP program (llamanb.tcp): the chapter's op lists as data, executed with numpy.

References: the numpy engine and HF transformers (logits, greedy tokens), float64 matrix products
and explicit head loops (each einsum's meaning), llamanb.model.flops' closed forms (FLOP totals)."""
from __future__ import annotations

import numpy as np
import pytest

from llamanb import Engine, Step
from llamanb.engine.generate import generate
from llamanb.model.config import LLAMA3_70B, LLAMA31_8B, SMOLLM2_135M
from llamanb.errors import LlamanbError
from llamanb.model.flops import OPS, decode_flops, prefill_flops
from llamanb.check.greedy import greedy
from llamanb.tcp.interpret import Interpreter, layout
from llamanb.tcp.ops import Op, check_view
from llamanb.tcp.program import PHASES, dims, program

from conftest import hf_logits

MODELS = [SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B]
CHAPTER_STEPS = ["embed", "attn_norm", "q_proj", "k_proj", "v_proj", "rope_gather", "rope_q", "rope_k",
                 "store_k", "store_v", "attn_scores", "attn_scale", "softmax", "attn_values", "o_proj",
                 "attn_residual", "ffn_norm", "gate_proj", "up_proj", "swiglu", "down_proj", "ffn_residual",
                 "final_norm", "last_row", "lm_head", "sample"]


@pytest.fixture(scope="module")
def interp(smollm):
    return Interpreter(layout(smollm.weights))


# ---- the op list -----------------------------------------------------------------------------------
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_every_chapter_step_in_order_with_an_engine(phase):
    prog = program(SMOLLM2_135M, phase)
    names = [op.name for op, _ in prog.ops()]
    steps = [n for n in names if n in CHAPTER_STEPS]
    assert steps == CHAPTER_STEPS                           # all of them, in the chapter's order
    assert ("causal_mask" in names) == (phase == "prefill")
    for op, times in prog.ops():
        assert op.engine and op.section
        assert times == (SMOLLM2_135M.n_layers if op in prog.layer else 1)


def test_einsums_mean_what_the_chapter_says():
    """Each einsum against float64 products written without einsum: projections as matrix
    products, GQA with query head h reading K/V head h // G (HF's repeat_kv)."""
    cfg = SMOLLM2_135M.replace(n_layers=1)
    d = dims(cfg, 2, 5, 5)
    ops = {op.name: op for op in program(cfg, "prefill").layer}
    rng = np.random.default_rng(0)
    B, S, D, hq, hkv, G, dk = d["B"], d["s_in"], d["D"], d["h_q"], d["h_kv"], d["G"], d["d_k"]
    x, wq = rng.standard_normal((B, S, D)), rng.standard_normal((D, hq, dk))
    q = np.einsum(ops["q_proj"].subscripts, x, wq)
    np.testing.assert_allclose(q.reshape(B * S, -1), x.reshape(B * S, D) @ wq.reshape(D, -1), rtol=1e-10)
    Q, K = rng.standard_normal((B, hkv, G, S, dk)), rng.standard_normal((B, hkv, S, dk))
    scores = np.einsum(ops["attn_scores"].subscripts, Q, K)             # [B, h_kv, G, s_in, s]
    Qh = Q.reshape(B, hq, S, dk)                                         # a view: h_q = (h_kv, G)
    for h in range(hq):
        np.testing.assert_allclose(scores.reshape(B, hq, S, S)[:, h], Qh[:, h] @ K[:, h // G].swapaxes(-1, -2),
                                   rtol=1e-10)
    assert ops["attn_scores"].reduced == ("d_k",) and ops["attn_scores"].broadcast["K_rope"] == ("G", "s_in")


def test_chapter_group_order_is_not_a_view():
    """The chapter's [B, G, h_kv, ...] reading of h_q would need a transpose of Llama's heads."""
    check_view(("B", "h_q", "s_in", "d_k"), ("B", "h_kv", "G", "s_in", "d_k"))
    with pytest.raises(LlamanbError, match="transpose"):
        check_view(("B", "h_q", "s_in", "d_k"), ("B", "G", "h_kv", "s_in", "d_k"))


@pytest.mark.parametrize("cfg", MODELS, ids=lambda c: c.name)
@pytest.mark.parametrize("B", [1, 2])
def test_flops_agree_with_llamanb_flops(cfg, B):
    """The einsums' FLOPs (derived from their axes) against llamanb.model.flops' closed forms: prefill
    computes the full s_in x s_in score rectangle (then masks), decode one row against s keys."""
    S = 96
    pf = program(cfg, "prefill").flops(dims(cfg, B, S))
    assert {k: pf[k] for k in OPS} == prefill_flops(cfg, S, attention="full", batch=B)
    ctx = 300
    df = program(cfg, "decode").flops(dims(cfg, B, 1, ctx + 1))
    assert {k: df[k] for k in OPS} == decode_flops(cfg, ctx, batch=B)
    # the only other einsums: RoPE, a 2 x 2 matrix (4 multiply-adds) per pair, head, row and layer
    assert set(pf) - set(OPS) == {"rope_q", "rope_k"}
    assert pf["rope_q"] == cfg.n_layers * B * S * cfg.n_heads * (cfg.head_dim // 2) * 4 * 2


# ---- executed on the embedded model -------------------------------------------------------------------
def _greedy_alone(interp, ids, n):
    """The package's one token loop (check.greedy) driving the interpreter, one sequence (B = 1)."""
    cache = interp.new_cache(1, len(ids) + n)
    return greedy(interp.prefill([ids], cache)[0], lambda t: interp.decode([t], cache)[0], n,
                  keep_logits=True)


def test_program_reproduces_the_numpy_engine(smollm, smollm_engine, interp):
    """Prefill + 3 greedy decode steps: the same tokens, logits within float32 tolerance."""
    ids = smollm.tokenizer.encode_prompt("What is the capital of France?")
    run = _greedy_alone(interp, ids, 4)
    ref = generate(smollm_engine, ids, max_new_tokens=4, stop_ids=[], keep_logits=True)
    assert run.ids == ref.ids
    for got, want in zip(run.logits, ref.logits):
        np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max())


def test_batch_of_two_equals_each_alone(smollm, interp):
    """B = 2 sequences in one program step, fed the tokens each chose alone: each row's logits
    equal its own B = 1 run's, and pick the same tokens."""
    a = smollm.tokenizer.encode_prompt("Name a color.")
    b = smollm.tokenizer.encode_prompt("Name a fruit.")
    assert len(a) == len(b) and a != b
    alone = [_greedy_alone(interp, ids, 3) for ids in (a, b)]
    cache = interp.new_cache(2, len(a) + 3)
    logits = [interp.prefill([a, b], cache)]
    for i in range(2):
        logits.append(interp.decode([r.ids[i] for r in alone], cache))
    for row, run in enumerate(alone):
        assert [int(np.argmax(lg[row])) for lg in logits] == run.ids
        for got, want in zip(logits, run.logits):
            np.testing.assert_allclose(got[row], want, atol=1e-4 * np.abs(want).max())


def test_tcp_backend_on_the_seam(smollm, smollm_engine):
    """Engine(model, backend="tcp"): greedy generation and a mixed step (a decode row beside a new
    prompt) agree with the numpy engine."""
    eng = Engine(smollm, backend="tcp")
    assert eng.backend.emulated and "emulated" in eng.backend.description
    ids = smollm.tokenizer.encode_prompt("Hi!")
    assert generate(eng, ids, max_new_tokens=3).ids == generate(smollm_engine, ids, max_new_tokens=3).ids
    other = smollm.tokenizer.encode_prompt("Name a fruit.")
    out = []
    for e in (smollm_engine, eng):
        cache = e.new_cache(64, slots=2)
        e.prefill(ids, cache, slot=0)
        out.append(e.step(Step.build([(0, len(ids), [504]), (1, 0, other)]), cache))
        assert cache.lengths.tolist() == [len(ids) + 1, len(other)]
    np.testing.assert_allclose(out[1], out[0], atol=2e-4 * np.abs(out[0]).max())


def test_tcp_backend_chunked_prefill_on_a_paged_cache(smollm, smollm_engine):
    """Chunks after the first run the "extend" program (cache reads + causal mask with an offset)."""
    eng = Engine(smollm, backend="tcp")
    ids = smollm.tokenizer.encode_prompt("What is the capital of France?")
    got = eng.prefill(ids, eng.new_cache(64, block=16, n_blocks=8), chunk=8)
    want = smollm_engine.prefill(ids, smollm_engine.new_cache(64))
    np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max())


def test_program_matches_transformers_gqa(tmp_path, make_tiny):
    """A random GQA checkpoint (6 query heads over 2 K/V heads): the program's logits after the
    prompt and after each decode step against transformers on the whole sequence."""
    from llamanb.io.store import load_model

    hf = make_tiny(tmp_path / "tiny", n_heads=6, n_kv_heads=2, tie=False)
    model = load_model(tmp_path / "tiny")
    prompt = [5, 17, 42, 99, 3, 250, 8]
    run = _greedy_alone(Interpreter(layout(model.weights)), prompt, 3)
    ref = hf_logits(hf, prompt + run.ids[:2])
    for i, got in enumerate(run.logits):
        np.testing.assert_allclose(got, ref[len(prompt) - 1 + i], atol=1e-4)


# ---- bad input -------------------------------------------------------------------------------------
def test_bad_input_is_one_line_error(interp):
    with pytest.raises(LlamanbError, match="one length"):
        interp.prefill([[1, 2, 3], [1, 2]], interp.new_cache(2, 8))
    with pytest.raises(LlamanbError, match="out of range"):
        interp.prefill([[1, 2, 10 ** 6]], interp.new_cache(1, 8))
    with pytest.raises(LlamanbError, match="text"):
        interp.prefill("hello", interp.new_cache(1, 8))
    with pytest.raises(LlamanbError, match="2 sequences for a cache of 1"):
        interp.prefill([[1, 2], [3, 4]], interp.new_cache(1, 8))
    cache = interp.new_cache(1, 4)
    interp.prefill([[1, 2, 3]], cache)
    with pytest.raises(LlamanbError, match="exceed"):
        interp.step(np.array([[5, 6]]), cache)              # 3 + 2 positions in a cache of 4
    with pytest.raises(LlamanbError, match="phase"):
        program(SMOLLM2_135M, "train")
    with pytest.raises(LlamanbError, match="s_in"):
        dims(SMOLLM2_135M, 1, 8, 4)
    with pytest.raises(LlamanbError, match="unknown axis"):
        Op("x", "einsum", "y", ("B", "Z"), ("a",), (("B",),), "Contraction Engine")
    assert set(PHASES) == {"prefill", "decode", "extend"}

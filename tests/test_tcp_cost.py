"""The RNGD roofline model (llamanb.tcp.cost) against closed forms from the config and the specs:
parameter and KV-cache bytes (LlamaConfig accounting), FLOPs (llamanb.flops), ridge points, the
tensor-parallel split, and the comparison with Furiosa's published throughput."""
from __future__ import annotations

import math

import pytest

from llamanb.config import LLAMA3_70B, LLAMA31_8B, SMOLLM2_135M
from llamanb.errors import LlamanbError
from llamanb.flops import OPS, decode_flops, prefill_flops, total
from llamanb.tcp.cost import PUBLISHED, RNGD, max_batch, op_costs, step_time, workload

MODELS = [SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B]
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def by_name(costs):
    return {c.name: c for c in costs}


def test_ridge_points_from_the_specs():
    assert RNGD.ridge["bf16"] == pytest.approx(256e12 / 1.5e12)      # ~171 FLOP per byte
    assert RNGD.ridge["fp8"] == pytest.approx(2 * RNGD.ridge["bf16"])
    assert RNGD.sram_bytes == 2 * 8 * 32 * 512 * 1024                  # 512 slices of 512 KB


@pytest.mark.parametrize("cfg", MODELS, ids=lambda c: c.name)
def test_decode_reads_every_weight_and_the_kv_cache_once(cfg):
    """HBM bytes of the projections = (parameters - embedding - norms, plus the head when tied)
    x bytes per weight; KV reads = the config's KV bytes at s tokens."""
    s, B = 500, 3
    c = by_name(op_costs(cfg, "decode", B, 1, s, weights="fp8", kv="bf16"))
    p = cfg.param_breakdown()
    proj = sum(v for k, v in p.items() if k.endswith("proj")) + cfg.vocab * cfg.hidden
    assert sum(c[n].hbm_bytes for n in PROJ) == proj * 1.0
    assert c["attn_scores"].hbm_bytes + c["attn_values"].hbm_bytes == cfg.kv_bytes(s, "bf16", batch=B)
    assert c["store_k"].hbm_bytes + c["store_v"].hbm_bytes == cfg.kv_bytes(1, "bf16", batch=B)


@pytest.mark.parametrize("cfg", MODELS, ids=lambda c: c.name)
def test_cost_flops_are_the_programs(cfg):
    c = by_name(op_costs(cfg, "prefill", 2, 64))
    assert sum(c[n].flops for n in OPS) == total(prefill_flops(cfg, 64, attention="full", batch=2))
    c = by_name(op_costs(cfg, "decode", 2, 1, 65))
    assert sum(c[n].flops for n in OPS) == total(decode_flops(cfg, 64, batch=2))


def test_weight_einsums_cross_the_ridge_at_b_times_s_in():
    """A projection does 2 FLOPs per weight per row and reads the weight once: intensity
    2 B s_in / bytes per weight, so bf16 turns compute-bound past ~171 rows."""
    for rows, B in ((64, 1), (170, 1), (172, 1), (44, 4)):
        c = by_name(op_costs(LLAMA31_8B, "prefill", B, rows // B))
        assert c["gate_proj"].intensity == pytest.approx(2 * rows / 2.0, rel=0.02)  # activations on chip
        assert c["gate_proj"].bound == ("compute" if rows > RNGD.ridge["bf16"] else "HBM")
    # decode attention: each bf16 key (2 d_k bytes) meets G query heads (2 G d_k FLOPs): intensity G
    c = by_name(op_costs(LLAMA31_8B, "decode", 64, 1, 4096))
    assert c["attn_scores"].intensity == pytest.approx(LLAMA31_8B.group, rel=0.01)
    assert c["attn_scores"].bound == "HBM"


def test_decode_at_batch_one_is_the_weight_stream():
    """B = 1: the step is (nearly) all weights over HBM bandwidth."""
    t = step_time(op_costs(LLAMA31_8B, "decode", 1, 1, 129, weights="fp8"))
    weights = sum(v for k, v in LLAMA31_8B.param_breakdown().items() if k.endswith("proj") or k == "lm_head")
    assert weights / RNGD.hbm_bw <= t <= 1.02 * weights / RNGD.hbm_bw


def test_tensor_parallel_split():
    one = by_name(op_costs(LLAMA3_70B, "decode", 8, 1, 1000, weights="fp8"))
    eight = op_costs(LLAMA3_70B, "decode", 8, 1, 1000, weights="fp8", cards=8)
    e = by_name(eight)
    for n in PROJ:
        assert e[n].hbm_bytes == pytest.approx(one[n].hbm_bytes / 8)
    # one K/V head per card: the cache splits 8 ways too
    assert e["attn_scores"].hbm_bytes == pytest.approx(one["attn_scores"].hbm_bytes / 8)
    reduces = [c for c in eight if c.name.startswith("all_reduce")]
    assert sum(c.times for c in reduces) == 2 * LLAMA3_70B.n_layers


def test_max_batch_fills_hbm():
    tokens = 128 + 4096
    B = max_batch(LLAMA31_8B, tokens, weights="fp8", kv="bf16")
    weights = LLAMA31_8B.n_params() * 1.0
    per_seq = LLAMA31_8B.kv_bytes(tokens, "bf16")
    assert B * per_seq <= 48e9 - weights < (B + 1) * per_seq


def test_predictions_against_published():
    """Estimates, not measurements: fp8 weights, bf16 KV cache, the largest batch that fits. The
    8B prediction lands within 15 % of Furiosa's number; the 70B one falls short by about half,
    and the assumed PCIe all-reduce is why: with a free link the estimate passes the published one."""
    import dataclasses

    errors = {}
    for p in PUBLISHED:
        B = max_batch(p["cfg"], p["n_in"] + p["n_out"], weights=p["weights"], cards=p["cards"])
        w = workload(p["cfg"], B, p["n_in"], p["n_out"], weights=p["weights"], cards=p["cards"])
        errors[p["model"]] = w.tok_s / p["tok_s"] - 1
    assert abs(errors["Llama 3.1 8B"]) < 0.15
    assert -0.7 < errors["Llama 3.1 70B"] < -0.3
    free = dataclasses.replace(RNGD, link_bw=math.inf, link_latency_s=0.0)
    p = PUBLISHED[1]
    B = max_batch(p["cfg"], p["n_in"] + p["n_out"], weights="fp8", cards=8)
    assert workload(p["cfg"], B, p["n_in"], p["n_out"], spec=free, weights="fp8", cards=8).tok_s > p["tok_s"]


def test_bad_input_is_one_line_error():
    with pytest.raises(LlamanbError, match="weights"):
        op_costs(SMOLLM2_135M, "decode", 1, 1, 4, weights="int3")
    with pytest.raises(LlamanbError, match="cards"):
        op_costs(LLAMA3_70B, "decode", 1, 1, 4, cards=3)
    with pytest.raises(LlamanbError, match="s_in = 1"):
        op_costs(SMOLLM2_135M, "decode", 1, 2, 4)
    with pytest.raises(LlamanbError, match="B must"):
        op_costs(SMOLLM2_135M, "prefill", 0, 4)
    with pytest.raises(LlamanbError, match="n_out"):
        workload(SMOLLM2_135M, 1, 4, 0)

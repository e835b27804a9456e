"""llamanb.model.flops against torch's FlopCounterMode (an independent count of every matmul torch runs)
on HF LlamaForCausalLM: tiny random models executed for real, and the published Llama-3.2-1B and
Llama 3 70B shapes on the meta device (shapes only, no weights allocated); plus closed forms."""
from __future__ import annotations

import pytest

from llamanb.model.config import LLAMA3_70B, LLAMA32_1B, SMOLLM2_135M, LlamaConfig
from llamanb.errors import LlamanbError
from llamanb.model.flops import (LAYER_OPS, OPS, attention_pairs, decode_flops, layer_flops, prefill_flops, total)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

S = 16
TINY = {
    # name: (hidden, n_heads, n_kv_heads, head_dim, ffn, tie)
    "gqa2": (64, 4, 2, 16, 160, False),
    "mqa-tied": (64, 4, 1, 16, 160, True),
    # N_h * d_h = 96 != H = 64: catches a count that confuses H with the attention width
    "wide-heads": (64, 4, 2, 24, 96, False),
}
MATMUL_OPS = ("aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.matmul")


def _hf_model(hidden, n_heads, n_kv, head_dim, ffn, tie, *, n_layers=2, vocab=256, device=None):
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    hc = HFConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                  num_hidden_layers=n_layers, num_attention_heads=n_heads,
                  num_key_value_heads=n_kv, head_dim=head_dim, max_position_embeddings=256,
                  tie_word_embeddings=tie, attention_bias=False, mlp_bias=False)
    hc._attn_implementation = "eager"          # plain matmuls, visible to FlopCounterMode
    torch.manual_seed(0)
    if device == "meta":
        with torch.device("meta"):
            return LlamaForCausalLM(hc).eval()
    return LlamaForCausalLM(hc).eval()


def _hf_to_ours(hf) -> LlamaConfig:
    """Our config read from HF's own config (not built from the same literals)."""
    return LlamaConfig.from_hf(hf.config.to_dict())


def _count(hf, ids, **kwargs) -> dict[str, int]:
    """FlopCounterMode's matmul FLOPs per module name (only the ops listed in MATMUL_OPS)."""
    from torch.utils.flop_counter import FlopCounterMode

    fc = FlopCounterMode(display=False)
    with torch.no_grad(), fc:
        hf(ids, use_cache=kwargs.pop("use_cache", False), **kwargs)
    counts = fc.get_flop_counts()
    unknown = {str(op) for per in counts.values() for op in per} - set(MATMUL_OPS)
    assert not unknown, f"FlopCounterMode counted ops this test does not map: {unknown}"
    return {name: sum(per.values()) for name, per in counts.items()}


def _torch_per_op(counts: dict[str, int], n_layers: int) -> dict[str, int]:
    """Map FlopCounterMode's module tree onto our op names (layer ops summed over layers).
    Attention scores and values are both bmm inside self_attn: their sum is what torch sees."""
    root = "LlamaForCausalLM"
    out = {op: 0 for op in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj", "attention")}
    for i in range(n_layers):
        p = f"{root}.model.layers.{i}."
        for op in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[op] += counts.get(p + "self_attn." + op, 0)
        for op in ("gate_proj", "up_proj", "down_proj"):
            out[op] += counts.get(p + "mlp." + op, 0)
        projections = sum(counts.get(p + "self_attn." + op, 0)
                          for op in ("q_proj", "k_proj", "v_proj", "o_proj"))
        out["attention"] += counts.get(p + "self_attn", 0) - projections
    out["lm_head"] = counts.get(f"{root}.lm_head", 0)
    # nothing counted outside these modules (e.g. the rotary embedding's tiny matmul)
    assert sum(out.values()) == counts["Global"], (sum(out.values()), counts["Global"])
    return out


def _ours_per_op(f: dict[str, int]) -> dict[str, int]:
    out = {op: f[op] for op in OPS if not op.startswith("attn_")}
    out["attention"] = f["attn_scores"] + f["attn_values"]
    return out


# ---- against FlopCounterMode, executed for real ---------------------------------------------------
@pytest.mark.parametrize("name", list(TINY))
def test_prefill_matches_flop_counter(name):
    hf = _hf_model(*TINY[name])
    cfg = _hf_to_ours(hf)
    assert (cfg.q_dim, cfg.kv_dim) == (TINY[name][1] * TINY[name][3], TINY[name][2] * TINY[name][3])
    ids = torch.randint(0, cfg.vocab, (1, S), generator=torch.Generator().manual_seed(0))
    theirs = _torch_per_op(_count(hf, ids), cfg.n_layers)
    ours = prefill_flops(cfg, S, lm_head_rows="all", attention="full")
    assert _ours_per_op(ours) == theirs
    assert total(ours) == sum(theirs.values())


def test_batch_matches_flop_counter():
    hf = _hf_model(*TINY["gqa2"])
    cfg = _hf_to_ours(hf)
    ids = torch.randint(0, cfg.vocab, (3, S), generator=torch.Generator().manual_seed(1))
    theirs = _torch_per_op(_count(hf, ids), cfg.n_layers)
    assert _ours_per_op(prefill_flops(cfg, S, "all", "full", batch=3)) == theirs


def test_decode_and_chunk_match_flop_counter():
    """With a KV cache of P tokens: one decode step, and a chunk of C tokens (eager attention
    computes the full C x (P + C) rectangle; logits for every new row)."""
    hf = _hf_model(*TINY["gqa2"])
    cfg = _hf_to_ours(hf)
    g = torch.Generator().manual_seed(2)
    P, C = 11, 5
    for new, expect in ((1, decode_flops(cfg, P)),
                        (C, prefill_flops(cfg, C, "all", "full", start=P))):
        with torch.no_grad():
            past = hf(torch.randint(0, cfg.vocab, (1, P), generator=g), use_cache=True).past_key_values
        theirs = _torch_per_op(
            _count(hf, torch.randint(0, cfg.vocab, (1, new), generator=g), past_key_values=past,
                   use_cache=True), cfg.n_layers)
        assert _ours_per_op(expect) == theirs, new


# ---- the published shapes, on the meta device (FlopCounterMode needs shapes only) ----------------
@pytest.mark.parametrize("cfg, S_big", [
    (LLAMA32_1B, 2048),
    (LLAMA3_70B.replace(n_layers=8), 512),     # 8 of its 80 identical blocks: building 80 is slow
    (SMOLLM2_135M, 1024)], ids=["llama3.2-1b", "llama3-70b-8-layers", "smollm2-135m"])
def test_published_configs_on_meta_device(cfg, S_big):
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    hc = HFConfig(**cfg.to_hf())
    hc._attn_implementation = "eager"
    with torch.device("meta"):
        hf = LlamaForCausalLM(hc).eval()
    ids = torch.zeros((1, S_big), dtype=torch.long, device="meta")
    mask = torch.ones((1, S_big), dtype=torch.long, device="meta")   # no .item() on meta tensors
    theirs = _torch_per_op(_count(hf, ids, attention_mask=mask), cfg.n_layers)
    assert _ours_per_op(prefill_flops(cfg, S_big, "all", "full")) == theirs


# ---- closed forms ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [SMOLLM2_135M, LLAMA32_1B, LLAMA3_70B],
                         ids=["smollm2-135m", "llama3.2-1b", "llama3-70b"])
def test_linear_layers_are_two_flops_per_weight_per_token(cfg):
    """Every weight of a projection is used in one multiply-add per token."""
    S_ = 37
    f = prefill_flops(cfg, S_, lm_head_rows="all")
    parts = cfg.param_breakdown()
    proj = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert sum(f[op] for op in proj) == 2 * S_ * sum(parts[op] for op in proj)
    norms = parts["attn_norm"] + parts["ffn_norm"] + parts["final_norm"]
    assert sum(f[op] for op in proj) == 2 * S_ * (cfg.n_params() - parts["embedding"]
                                                   - parts["lm_head"] - norms)
    assert f["lm_head"] == 2 * S_ * cfg.vocab * cfg.hidden
    assert prefill_flops(cfg, S_, lm_head_rows="last")["lm_head"] == 2 * cfg.vocab * cfg.hidden
    if not cfg.tie_embeddings:   # untied: the LM head is a parameter of its own
        assert sum(f[op] for op in proj) + f["lm_head"] == 2 * S_ * (
            cfg.n_params() - parts["embedding"] - norms)


def test_attention_pairs_closed_form():
    for S_ in (1, 2, 7, 64):
        for start in (0, 3, 100):
            causal = attention_pairs(S_, start, "causal")
            assert causal == sum(start + i + 1 for i in range(S_))       # query i sees start+i+1 keys
            assert attention_pairs(S_, start, "full") == S_ * (start + S_)
    # from an empty cache the triangle is half the square plus half the diagonal
    assert 2 * attention_pairs(2048, 0, "causal") == attention_pairs(2048, 0, "full") + 2048


def test_decode_is_a_one_token_prefill():
    for ctx in (0, 1, 500):
        d = decode_flops(LLAMA32_1B, ctx)
        assert d == prefill_flops(LLAMA32_1B, 1, start=ctx, attention="causal")
        assert d == prefill_flops(LLAMA32_1B, 1, start=ctx, attention="full")
        assert d["attn_scores"] == 2 * LLAMA32_1B.n_layers * LLAMA32_1B.q_dim * (ctx + 1)


def test_llama32_1b_prefill_2048_numbers():
    """Llama-3.2-1B, S = 2048, written out by hand (16 layers, H 2048, D_ff 8192, 32 x 64 heads)."""
    f = prefill_flops(LLAMA32_1B, 2048)
    assert f["gate_proj"] == 16 * 2 * 2048 * 2048 * 8192 == 1_099_511_627_776
    assert f["k_proj"] == 16 * 2 * 2048 * 2048 * 512
    assert f["attn_scores"] == 16 * 2 * 32 * 64 * (2048 * 2049 // 2)
    assert f["lm_head"] == 2 * 2048 * 128256
    assert layer_flops(LLAMA32_1B, 2048)["down_proj"] * 3 == 206_158_430_208   # FFN per layer
    assert set(f) == set(OPS) and set(layer_flops(LLAMA32_1B, 8)) == set(LAYER_OPS)


def test_bad_arguments_are_user_errors():
    with pytest.raises(LlamanbError):
        prefill_flops(LLAMA32_1B, 8, lm_head_rows="first")
    with pytest.raises(LlamanbError):
        prefill_flops(LLAMA32_1B, 8, attention="sliding")
    with pytest.raises(LlamanbError):
        prefill_flops(LLAMA32_1B, 0)
    with pytest.raises(LlamanbError):
        decode_flops(LLAMA32_1B, -1)

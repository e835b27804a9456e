"""Config accounting: parameter counts of the published models, KV-cache bytes measured against a
real transformers cache, and the HF config.json round trip."""
from __future__ import annotations

import pytest

from llamanb.model.config import (LLAMA3_70B, LLAMA32_1B, PRESETS, SMOLLM2_135M, LlamaConfig, RopeScaling)
from llamanb.errors import LlamanbError

MiB = 1024 ** 2


# ---- parameter counts ------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg,expected", [
    (LLAMA32_1B, 1_235_814_400),           # published Llama-3.2-1B (tied embeddings)
    (LLAMA3_70B, 70_553_706_496),          # Llama 3 70B (untied)
    (SMOLLM2_135M, 134_515_008),           # SmolLM2-135M (tied)
])
def test_preset_param_counts(cfg, expected):
    assert cfg.n_params() == expected
    assert sum(cfg.param_breakdown().values()) == expected


def test_param_breakdown_closed_form():
    """Llama-3.2-1B by hand: embedding V*H, per layer 2H (norms) + H*(q + 2kv) + q*H + 3*H*F."""
    V, H, L, F = 128256, 2048, 16, 8192
    q, kv = 32 * 64, 8 * 64
    per_layer = 2 * H + H * (q + 2 * kv) + q * H + 3 * H * F
    assert LLAMA32_1B.layer_params() == per_layer
    assert LLAMA32_1B.n_params() == V * H + L * per_layer + H
    assert LLAMA32_1B.param_breakdown()["lm_head"] == 0
    assert LLAMA3_70B.param_breakdown()["lm_head"] == 128256 * 8192
    assert LLAMA32_1B.weight_bytes("bf16") == 2 * 1_235_814_400
    assert LLAMA32_1B.weight_bytes("fp32") == 4 * 1_235_814_400


def test_untying_adds_exactly_the_head():
    untied = LLAMA32_1B.replace(tie_embeddings=False)
    assert untied.n_params() - LLAMA32_1B.n_params() == 128256 * 2048 == 262_668_288


def _hf_config(cfg: LlamaConfig):
    from transformers import LlamaConfig as HFLlamaConfig

    return HFLlamaConfig(**cfg.to_hf())


@pytest.mark.parametrize("name", ["smollm2-135m", "llama3.2-1b", "llama3-70b"])
def test_hf_meta_model_param_count(name):
    """transformers builds a model from our to_hf() config whose parameters (tied ones once) add
    up to n_params(); the meta device allocates nothing, so even 70B is instant."""
    import torch
    from transformers import LlamaForCausalLM

    cfg = PRESETS[name]
    with torch.device("meta"):
        model = LlamaForCausalLM(_hf_config(cfg))
    assert sum(p.numel() for p in model.parameters()) == cfg.n_params()
    emb, head = model.model.embed_tokens.weight, model.lm_head.weight
    assert (emb is head) == cfg.tie_embeddings


# ---- HF config round trip ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PRESETS))
def test_hf_round_trip(name):
    cfg = PRESETS[name]
    assert LlamaConfig.from_hf(cfg.to_hf(), name=cfg.name) == cfg


@pytest.mark.parametrize("name", list(PRESETS))
def test_transformers_reads_to_hf_back(name):
    """transformers' own parsing of to_hf() gives the same numbers; and its save format
    (rope_parameters, v5) is read back by from_hf."""
    import json

    cfg = PRESETS[name]
    hf = _hf_config(cfg)
    assert (hf.num_hidden_layers, hf.hidden_size, hf.num_attention_heads, hf.num_key_value_heads,
            hf.head_dim, hf.intermediate_size, hf.vocab_size, hf.max_position_embeddings) == (
        cfg.n_layers, cfg.hidden, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn, cfg.vocab, cfg.max_seq)
    assert hf.rope_parameters["rope_theta"] == cfg.rope_theta
    assert hf.tie_word_embeddings == cfg.tie_embeddings
    if cfg.rope_scaling is None:
        assert hf.rope_parameters.get("rope_type", "default") == "default"
    else:
        rp = hf.rope_parameters
        assert rp["rope_type"] == "llama3" and rp["factor"] == cfg.rope_scaling.factor
    saved = json.loads(hf.to_json_string())
    assert LlamaConfig.from_hf(saved, name=cfg.name) == cfg


def test_llama32_rope_scaling_preset():
    assert LLAMA32_1B.rope_scaling == RopeScaling(32.0, 1.0, 4.0, 8192)
    assert LLAMA32_1B.rope_theta == 500000.0 and LLAMA32_1B.tie_embeddings


def test_config_validation():
    with pytest.raises(LlamanbError):
        SMOLLM2_135M.replace(n_kv_heads=2)            # 9 heads not a multiple of 2
    with pytest.raises(LlamanbError):
        SMOLLM2_135M.replace(head_dim=63)
    with pytest.raises(LlamanbError):
        SMOLLM2_135M.replace(hidden=0)
    with pytest.raises(LlamanbError):
        LlamaConfig.from_hf({"hidden_size": 8})
    with pytest.raises(LlamanbError):
        LlamaConfig.from_hf({**SMOLLM2_135M.to_hf(), "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})


# ---- the embedded model against the preset ----------------------------------------------------------------
SHAPE_FIELDS = ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn", "vocab", "max_seq",
                "tie_embeddings", "rope_scaling", "bos_id", "eos_ids")


def test_embedded_model_config_is_smollm2(smollm):
    c = smollm.config
    for f in SHAPE_FIELDS:
        assert getattr(c, f) == getattr(SMOLLM2_135M, f), f
    assert c.rope_theta == SMOLLM2_135M.rope_theta
    assert c.rms_eps == pytest.approx(SMOLLM2_135M.rms_eps, rel=1e-6)     # stored as float32 in GGUF


def test_embedded_weights_count_equals_n_params(smollm, smollm_reader):
    state = smollm.weights.hf_state()
    assert sum(a.size for a in state.values()) == smollm.config.n_params() == 134_515_008
    # the GGUF file itself, read by the gguf package, holds the same number of weights
    assert sum(int(t.n_elements) for t in smollm_reader.tensors) == SMOLLM2_135M.n_params()


# ---- KV cache bytes -----------------------------------------------------------------------------------------
def test_kv_bytes_closed_form():
    # Llama-3.2-1B: 2 (K, V) * 16 layers * 8 kv heads * 64 dims * 2 bytes = 32 KiB per token
    assert LLAMA32_1B.kv_bytes_per_token("bf16") == 32 * 1024
    assert LLAMA32_1B.kv_bytes(2048, "bf16") == 64 * MiB
    assert LLAMA32_1B.kv_bytes(2048, "fp32") == 128 * MiB
    assert LLAMA32_1B.kv_bytes(2048, "bf16", batch=4) == 256 * MiB
    # Llama 3 70B: 2 * 80 * 8 * 128 * 2 = 320 KiB per token, 2.5 GiB at 8192
    assert LLAMA3_70B.kv_bytes_per_token("bf16") == 320 * 1024
    assert LLAMA3_70B.kv_bytes(8192, "bf16") == 2.5 * 1024 ** 3
    with pytest.raises(LlamanbError):
        LLAMA32_1B.kv_bytes(10, "fp8_nonsense")


def test_kv_bytes_against_transformers_cache():
    """A real transformers DynamicCache for Llama-3.2-1B's attention shape (16 layers, 8 KV heads,
    head_dim 64, 32 query heads), bf16, after a 2048-token forward. Hidden size, FFN and vocab do
    not enter the KV cache, so they are tiny here to keep the forward cheap.

    The total is 64 MiB for K + V. (The issue text quotes 32 MiB: that is the K half alone.)"""
    import torch
    from transformers import LlamaConfig as HFLlamaConfig
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    hf_cfg = HFLlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=16,
                           num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                           max_position_embeddings=4096)
    model = LlamaForCausalLM(hf_cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        out = model(torch.randint(0, 64, (1, 2048)), use_cache=True, logits_to_keep=1)
    layers = out.past_key_values.layers
    assert len(layers) == 16
    assert tuple(layers[0].keys.shape) == (1, 8, 2048, 64) and layers[0].keys.dtype == torch.bfloat16
    k_bytes = sum(layer.keys.nbytes for layer in layers)
    v_bytes = sum(layer.values.nbytes for layer in layers)
    assert k_bytes + v_bytes == LLAMA32_1B.kv_bytes(2048, "bf16") == 64 * MiB
    assert k_bytes == 32 * MiB == LLAMA32_1B.kv_bytes(2048, "bf16") / 2


def test_llamanb_kv_cache_bytes_match_accounting():
    """llamanb's own cache for a tiny config, with storage exactly max_seq, is 2*L*N_kv*d_h*4 B/token."""
    from llamanb.engine.kv.contiguous import KVCache

    cfg = SMOLLM2_135M
    cache = KVCache(cfg, 512)
    per_position = cache.nbytes / cache.k.shape[2]
    assert per_position == cfg.kv_bytes_per_token("fp32")


# ---- malformed config.json values: one LlamanbError that names the field ------------------------------
@pytest.mark.parametrize("key, value, fragment", [
    ("hidden_size", "576", "hidden_size must be a positive integer, got '576'"),
    ("hidden_size", None, "hidden_size is null"),
    ("hidden_size", 57.5, "hidden_size must be a positive integer"),
    ("num_attention_heads", 0, "num_attention_heads must be a positive integer, got 0"),
    ("num_attention_heads", True, "num_attention_heads"),
    ("num_hidden_layers", -2, "num_hidden_layers must be a positive integer, got -2"),
    ("intermediate_size", [1536], "intermediate_size"),
    ("vocab_size", "big", "vocab_size"),
    ("max_position_embeddings", 0, "max_position_embeddings"),
    ("rope_theta", "1e5", "rope_theta must be a finite number > 0"),
    ("rope_theta", -1.0, "rope_theta"),
    ("rms_norm_eps", "tiny", "rms_norm_eps"),
    ("rms_norm_eps", -1e-5, "rms_norm_eps must be a finite number >= 0"),
    ("eos_token_id", "</s>", "eos_token_id must be a token id"),
    ("eos_token_id", [2, 10**6], "eos_token_id"),
    ("bos_token_id", 1.5, "bos_token_id"),
    ("tie_word_embeddings", "false", "tie_word_embeddings must be true or false"),
    ("rope_scaling", "llama3", "rope_scaling must be an object"),
    ("rope_scaling", {"rope_type": "llama3", "factor": "8", "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
     "rope_scaling.factor"),
    ("rope_scaling", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0},
     "lacks rope_scaling.'high_freq_factor'"),
])
def test_malformed_hf_values_name_the_field(key, value, fragment):
    cfg = {**SMOLLM2_135M.to_hf(), key: value}
    with pytest.raises(LlamanbError) as info:
        LlamaConfig.from_hf(cfg)
    assert fragment.lower() in str(info.value).lower(), str(info.value)


@pytest.mark.parametrize("drop", ["hidden_size", "num_hidden_layers", "num_attention_heads",
                                  "intermediate_size", "vocab_size"])
def test_missing_required_hf_field(drop):
    cfg = {k: v for k, v in SMOLLM2_135M.to_hf().items() if k != drop}
    with pytest.raises(LlamanbError, match=f"lacks '{drop}'"):
        LlamaConfig.from_hf(cfg)


def test_heads_that_do_not_divide_hidden_without_head_dim():
    cfg = {k: v for k, v in SMOLLM2_135M.to_hf().items() if k != "head_dim"}
    with pytest.raises(LlamanbError, match="not a multiple of num_attention_heads"):
        LlamaConfig.from_hf({**cfg, "num_attention_heads": 7, "num_key_value_heads": 7})


@pytest.mark.parametrize("raw", [[], 5, "llama", None])
def test_config_json_that_is_not_an_object(raw):
    with pytest.raises(LlamanbError, match="JSON object"):
        LlamaConfig.from_hf(raw)


def test_optional_fields_may_be_null_or_integral_floats():
    """JSON null for an optional field means its default (as transformers reads it); 576.0 is 576."""
    cfg = {**SMOLLM2_135M.to_hf(), "head_dim": None, "num_key_value_heads": None, "hidden_size": 576.0}
    got = LlamaConfig.from_hf(cfg, name=SMOLLM2_135M.name)
    assert (got.head_dim, got.n_kv_heads, got.hidden) == (576 // 9, 9, 576)


@pytest.mark.parametrize("field, value", [("hidden", "576"), ("n_layers", 2.0), ("vocab", None),
                                          ("rope_theta", "1e4"), ("rms_eps", float("nan"))])
def test_direct_construction_checks_types(field, value):
    with pytest.raises(LlamanbError, match=field):
        SMOLLM2_135M.replace(**{field: value})

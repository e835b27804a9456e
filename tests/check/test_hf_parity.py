"""llamanb vs HF transformers on tiny random Llama checkpoints (GQA ratios, tied/untied head,
Llama 3 RoPE scaling): all-position prefill logits and cached greedy decode steps."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import EOS_ID, TINY_VOCAB, hf_logits, make_tiny_checkpoint

from llamanb.engine.engine import Engine
from llamanb.io.store import load_model

ATOL = 1e-4
DECODE_STEPS = 6
PROMPT_LEN = 40          # > original_max_position_embeddings (32) of the llama3 case

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}

CASES = {
    # name: (n_heads, n_kv_heads, tie, rope_scaling)
    "gqa4-tied": (8, 2, True, None),
    "gqa4-untied": (8, 2, False, None),
    "gqa3-tied": (6, 2, True, None),
    "gqa3-untied": (6, 2, False, None),
    "mha-untied": (4, 4, False, None),
    "mqa-tied": (4, 1, True, None),
    "gqa4-llama3-rope": (8, 2, False, LLAMA3_ROPE),
}


def _prompt(seed: int, n: int = PROMPT_LEN) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(3, TINY_VOCAB, n)]


@pytest.fixture(scope="module", params=list(CASES))
def tiny_pair(request, tmp_path_factory):
    n_heads, n_kv, tie, rope = CASES[request.param]
    d = tmp_path_factory.mktemp(f"tiny-{request.param}")
    hf = make_tiny_checkpoint(d, n_heads=n_heads, n_kv_heads=n_kv, tie=tie, rope_scaling=rope,
                              seed=len(request.param))
    model = load_model(d)
    return request.param, hf, model


def test_config_read_from_checkpoint(tiny_pair):
    name, hf, model = tiny_pair
    n_heads, n_kv, tie, rope = CASES[name]
    c = model.config
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.tie_embeddings) == (n_heads, n_kv, 16, tie)
    assert c.hidden == hf.config.hidden_size and c.n_layers == hf.config.num_hidden_layers
    assert (c.rope_scaling is not None) == (rope is not None)
    # Same parameter count as the HF module (tied parameters counted once by .parameters()).
    assert c.n_params() == sum(p.numel() for p in hf.parameters())


def test_prefill_logits_all_positions(tiny_pair):
    name, hf, model = tiny_pair
    ids = _prompt(1)
    ours = Engine(model).logits_all(ids)
    ref = hf_logits(hf, ids)
    assert ours.shape == ref.shape == (len(ids), TINY_VOCAB)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=ATOL, err_msg=name)
    # The logits are not trivially small: the comparison means something.
    assert np.abs(ref).max() > 0.5


def test_cached_greedy_decode_matches_full_recompute_in_hf(tiny_pair):
    """Each decode step's logits (with the KV cache) equal HF logits on the whole sequence."""
    name, hf, model = tiny_pair
    eng = Engine(model)
    seq = _prompt(2, 12)
    cache = eng.new_cache(len(seq) + DECODE_STEPS + 1)
    logits = eng.prefill(seq, cache)
    for step in range(DECODE_STEPS + 1):
        ref = hf_logits(hf, seq)[-1]
        np.testing.assert_allclose(logits, ref, rtol=0, atol=ATOL, err_msg=f"{name} step {step}")
        nxt = int(np.argmax(ref))
        assert int(np.argmax(logits)) == nxt or np.sort(ref)[-1] - np.sort(ref)[-2] < 2 * ATOL
        if step == DECODE_STEPS:
            break
        seq.append(nxt)
        logits = eng.decode(nxt, cache)
        assert cache.length == len(seq)


def test_hidden_states_per_layer(tiny_pair):
    """The embedding output and every block's output match HF's hidden_states."""
    import torch

    name, hf, model = tiny_pair
    ids = _prompt(3, 16)
    eng = Engine(model)
    collect: list = []
    eng.forward(ids, eng.new_cache(len(ids)), collect)
    with torch.no_grad():
        out = hf.model(torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    hs = [h[0].numpy() for h in out.hidden_states]
    assert len(collect) == model.config.n_layers + 1 == len(hs)
    # HF's last entry is after the final norm; compare it through the norm ourselves.
    for i in range(model.config.n_layers):
        np.testing.assert_allclose(collect[i], hs[i], rtol=0, atol=1e-5, err_msg=f"{name} layer {i}")
    w = hf.model.norm.weight.detach().numpy()
    x = collect[-1].astype(np.float64)
    normed = x / np.sqrt((x * x).mean(-1, keepdims=True) + hf.config.rms_norm_eps) * w
    np.testing.assert_allclose(normed, hs[-1], rtol=0, atol=1e-4, err_msg=f"{name} final norm")


def test_kv_cache_contents_match_hf_past_key_values(tmp_path):
    """Layout [L, N_kv, max_seq, d_h] and contents (K after RoPE, V) equal HF's DynamicCache."""
    import torch

    hf = make_tiny_checkpoint(tmp_path / "ck", n_heads=8, n_kv_heads=2, tie=False, seed=11)
    model = load_model(tmp_path / "ck")
    eng = Engine(model)
    ids = _prompt(4, 10)
    cache = eng.new_cache(32)
    eng.prefill(ids, cache)
    c = model.config
    L, Nkv, P, d = cache.k.shape
    assert cache.v.shape == cache.k.shape
    assert (L, Nkv, d) == (c.n_layers, c.n_kv_heads, c.head_dim) and P >= 32
    assert cache.length == len(ids)
    with torch.no_grad():
        pkv = hf(torch.tensor([ids]), use_cache=True).past_key_values
    for layer in range(c.n_layers):
        k_ref = pkv.layers[layer].keys[0].numpy()     # [N_kv, S, d_h]
        v_ref = pkv.layers[layer].values[0].numpy()
        np.testing.assert_allclose(cache.k[layer, :, :len(ids)], k_ref, rtol=0, atol=1e-5)
        np.testing.assert_allclose(cache.v[layer, :, :len(ids)], v_ref, rtol=0, atol=1e-5)


def test_tied_checkpoint_with_stray_lm_head_behaves_like_hf(tmp_path):
    """tie_word_embeddings=true but the file also holds a (different) lm_head.weight: llamanb must
    give what transformers gives for the same directory. (transformers 5.23 logs "both are present
    in the checkpoints with different values, so we will NOT tie them" and uses the file's head.)"""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    d = tmp_path / "ck"
    hf = make_tiny_checkpoint(d, n_heads=8, n_kv_heads=2, tie=True, seed=5)
    state = {k: v.detach().clone().contiguous() for k, v in hf.state_dict().items()}
    torch.manual_seed(99)
    state["lm_head.weight"] = torch.randn_like(state["model.embed_tokens.weight"]) * 0.1
    save_file(state, str(d / "model.safetensors"), metadata={"format": "pt"})

    reloaded = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    ids = _prompt(6, 9)
    ref = hf_logits(reloaded, ids)
    ours = Engine(load_model(d)).logits_all(ids)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=ATOL)


def test_eos_and_bos_ids_from_checkpoint(tmp_path):
    make_tiny_checkpoint(tmp_path / "ck", n_heads=4, n_kv_heads=2, tie=True, seed=3)
    model = load_model(tmp_path / "ck")
    assert EOS_ID in model.config.eos_ids
    assert model.config.bos_id == 1

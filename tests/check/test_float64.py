"""llamanb.model.reference: the float64 yardstick, and both float32 engines measured against it.

The yardstick itself is checked against transformers run in float64 (independent model code, same
weights); then, on the embedded model, the bound between llamanb and transformers is derived from
their distances to it (as notebook 00 does).
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import TINY_VOCAB, make_tiny_checkpoint

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llamanb.model.reference import forward, inv_freq64  # noqa: E402
from llamanb.io.store import load_model  # noqa: E402

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}


def hf_float64(hf, model):
    """transformers' model in float64 throughout. Two of its modules compute in float32 even in a
    float64 model: the rotary embedding (`position_ids.float() * inv_freq.float()`) and RMSNorm
    (`hidden_states.to(torch.float32)`). Those two get float64 versions (the frequencies checked
    against transformers' own below); projections, attention, MLP and head are its own code."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf = hf.double()
    for module in hf.modules():
        if isinstance(module, LlamaRMSNorm):
            module.forward = (lambda x, m=module: m.weight * x * torch.rsqrt(
                x.pow(2).mean(-1, keepdim=True) + m.variance_epsilon))
    c = model.config
    freqs = torch.from_numpy(inv_freq64(c.head_dim, c.rope_theta, c.rope_scaling))   # [d/2] float64
    rotary = hf.model.rotary_emb

    def forward64(x, position_ids):
        emb = position_ids[..., None].double() * freqs                  # [B, S, d/2]
        emb = torch.cat((emb, emb), dim=-1)
        return emb.cos() * rotary.attention_scaling, emb.sin() * rotary.attention_scaling

    rotary.forward = forward64
    return hf


def hf_logits64(hf, ids) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor([ids]), use_cache=False).logits[0].numpy()


@pytest.mark.parametrize("n_heads, n_kv, tie, rope", [(8, 2, True, None), (6, 2, False, None),
                                                      (4, 4, True, None), (8, 2, False, LLAMA3_ROPE)])
def test_float64_forward_equals_transformers_in_float64(tmp_path, n_heads, n_kv, tie, rope):
    hf = make_tiny_checkpoint(tmp_path, n_heads=n_heads, n_kv_heads=n_kv, tie=tie, rope_scaling=rope,
                              seed=n_heads + n_kv, max_position_embeddings=256)
    model = load_model(tmp_path)
    ids = [int(t) for t in np.random.default_rng(0).integers(3, TINY_VOCAB, 40)]
    theirs = hf_logits64(hf_float64(hf, model), ids)                                  # [S, V]
    assert theirs.dtype == np.float64
    ours = forward(model.weights, ids)                                                  # [S, V]
    assert ours.dtype == np.float64
    scale = np.abs(theirs).max()
    assert np.abs(ours - theirs).max() <= 1e-12 * scale
    rows = [0, 17, 39]
    np.testing.assert_allclose(forward(model.weights, ids, rows=rows), ours[rows], rtol=0,
                               atol=1e-13 * scale)


def test_float64_forward_is_not_the_float32_engine(tmp_path):
    """The yardstick must sit closer to transformers' float64 than any float32 result can: the
    float32 engine is ~1e-7 relative away, the float64 evaluation ~1e-15."""
    from llamanb import Engine

    hf = make_tiny_checkpoint(tmp_path, n_heads=8, n_kv_heads=2, tie=True, seed=4)
    model = load_model(tmp_path)
    ids = [int(t) for t in np.random.default_rng(1).integers(3, TINY_VOCAB, 24)]
    exact = hf_logits64(hf_float64(hf, model), ids)
    f32 = Engine(model).logits_all(ids)
    d32 = np.abs(f32 - exact).max()
    d64 = np.abs(forward(model.weights, ids) - exact).max()
    assert d32 > 1e-9 * np.abs(exact).max()          # float32 rounding is visible...
    assert d64 < 1e-3 * d32                          # ...and the yardstick is far below it


def test_inv_freq64_matches_transformers_llama3_scaling():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from llamanb.model.config import RopeScaling

    cfg = LlamaConfig(hidden_size=64 * 4, num_attention_heads=4, head_dim=64, rope_theta=500000.0,
                      max_position_embeddings=131072,
                      rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    hf_freqs, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    ours = inv_freq64(64, 500000.0, RopeScaling(32.0, 1.0, 4.0, 8192))
    # transformers works in float32: agreement to float32 rounding of the float64 values
    np.testing.assert_allclose(hf_freqs.numpy(), ours, rtol=3e-7, atol=0)


@pytest.mark.slow
def test_engines_against_float64_on_the_embedded_model(smollm, smollm_engine):
    """Notebook 00's argument as a test: each float32 engine's distance to the float64 result,
    the bound on their difference derived from the two, and llamanb no farther from exact than
    transformers (within a factor 2)."""
    from llamanb.check.greedy import engine_greedy
    from llamanb.check.hf_reference import greedy_with_top5, load_hf

    ids = smollm.tokenizer.encode_prompt("Name three primary colours.")
    steps = 6
    ours = engine_greedy(smollm_engine, ids, steps, keep_logits=True)
    hf_ids, hf_top = greedy_with_top5(load_hf(smollm, via="converted"), ids, steps)
    assert hf_ids == ours.ids
    seen = ids + ours.ids[:-1]
    exact = forward(smollm.weights, seen, rows=np.arange(len(ids) - 1, len(seen)))   # [steps, V]
    assert np.array_equal(exact.argmax(axis=1), np.array(ours.ids))
    top = np.array([t["ids"] for t in hf_top])
    l32 = np.stack([lg[i] for lg, i in zip(ours.logits, top)])
    t32 = np.array([t["logits"] for t in hf_top])
    ref = np.take_along_axis(exact, top, axis=1)
    d_ours, d_theirs = np.abs(l32 - ref).max(), np.abs(t32 - ref).max()
    assert np.abs(l32 - t32).max() <= d_ours + d_theirs
    assert d_ours <= 2 * d_theirs, (d_ours, d_theirs)
    # both are float32 rounding: far below a logit's size, far above float64's
    assert 1e-9 < d_ours / np.abs(ref).max() < 1e-5

"""RoPE frequencies and cos/sin tables against transformers (modeling_rope_utils, LlamaRotaryEmbedding),
and the half-split rotation against a closed form."""
from __future__ import annotations

import numpy as np
import pytest

from llamanb.model.config import LLAMA32_1B, SMOLLM2_135M, RopeScaling
from llamanb.model.rope import apply_rope, cos_sin, inv_freq, rope_for


def _hf_config(*, head_dim, theta, scaling=None, max_pos=131072, heads=32, hidden=2048):
    """A transformers LlamaConfig written from the published numbers (not from llamanb's to_hf)."""
    from transformers import LlamaConfig

    kw = {}
    if scaling is not None:
        kw["rope_scaling"] = {"rope_type": "llama3", **scaling}
    return LlamaConfig(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=8,
                       head_dim=head_dim, rope_theta=theta, max_position_embeddings=max_pos, **kw)


LLAMA32_SCALING = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}


def test_llama3_inv_freq_matches_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf_cfg = _hf_config(head_dim=64, theta=500000.0, scaling=LLAMA32_SCALING)
    ref, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](hf_cfg, None)
    ref = ref.numpy()
    ours = inv_freq(64, 500000.0, RopeScaling(32.0, 1.0, 4.0, 8192))
    assert attention_factor == 1.0
    assert ours.dtype == np.float32 and ours.shape == ref.shape == (32,)
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=0)        # the formula is right ...
    np.testing.assert_array_equal(rope_for(LLAMA32_1B), ours)
    # the scaling did something in all three bands: kept, divided by 32, blended
    plain = inv_freq(64, 500000.0)
    ratio = plain / ours
    assert np.isclose(ratio[0], 1.0) and np.isclose(ratio[-1], 32.0)
    assert ((ratio > 1.01) & (ratio < 31.9)).any()


@pytest.mark.parametrize("scaling", [
    {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    {"factor": 16.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0, "original_max_position_embeddings": 512},
])
@pytest.mark.parametrize("head_dim", [16, 128])
def test_llama3_inv_freq_other_settings(scaling, head_dim):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    ref = ROPE_INIT_FUNCTIONS["llama3"](_hf_config(head_dim=head_dim, theta=10000.0, scaling=scaling,
                                                   heads=8, hidden=8 * head_dim), None)[0].numpy()
    ours = inv_freq(head_dim, 10000.0, RopeScaling(**{k: v for k, v in scaling.items()}))
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=0)


@pytest.mark.parametrize("which", ["smollm2", "llama3.2", "tiny-llama3"])
def test_inv_freq_bit_identical_to_transformers(which):
    """... and so is the float32 arithmetic: the frequencies are the very floats HF uses.

    A 1-ulp error in inv_freq grows linearly with the position: at position p the angle is off
    by p * ulp, e.g. 1e-6 rad at p = 20 and 5e-3 rad at p = 131071 (see the cos/sin test)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    if which == "smollm2":
        hf_cfg, ours = _hf_config(head_dim=64, theta=100000.0, max_pos=8192, heads=9, hidden=576), rope_for(SMOLLM2_135M)
    elif which == "llama3.2":
        hf_cfg, ours = _hf_config(head_dim=64, theta=500000.0, scaling=LLAMA32_SCALING), rope_for(LLAMA32_1B)
    else:
        sc = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
        hf_cfg = _hf_config(head_dim=16, theta=10000.0, scaling=sc, heads=8, hidden=128)
        ours = inv_freq(16, 10000.0, RopeScaling(**sc))
    ref = LlamaRotaryEmbedding(hf_cfg).inv_freq.numpy()
    bad = np.nonzero(ours != ref)[0]
    assert bad.size == 0, (f"inv_freq differs from transformers at indices {bad.tolist()} by "
                           f"{(ours.view(np.int32) - ref.view(np.int32))[bad].tolist()} ulp")


def test_default_inv_freq_matches_transformers():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    hf_cfg = _hf_config(head_dim=64, theta=100000.0, max_pos=8192, heads=9, hidden=576)
    ref = LlamaRotaryEmbedding.compute_default_rope_parameters(hf_cfg)[0].numpy()
    np.testing.assert_allclose(rope_for(SMOLLM2_135M), ref, rtol=1e-6, atol=0)
    # closed form: theta^(-2i/d)
    closed = 100000.0 ** (-np.arange(0, 64, 2) / 64.0)
    np.testing.assert_allclose(rope_for(SMOLLM2_135M), closed, rtol=1e-6)


@pytest.mark.parametrize("which", ["smollm2", "llama3.2"])
def test_cos_sin_tables_match_llama_rotary_embedding(which):
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    if which == "smollm2":
        hf_cfg = _hf_config(head_dim=64, theta=100000.0, max_pos=8192, heads=9, hidden=576)
        freqs = rope_for(SMOLLM2_135M)
    else:
        hf_cfg = _hf_config(head_dim=64, theta=500000.0, scaling=LLAMA32_SCALING)
        freqs = rope_for(LLAMA32_1B)
    rot = LlamaRotaryEmbedding(hf_cfg)
    pos = np.concatenate([np.arange(0, 300), [1000, 4095, 8191, 8192, 20000, 131071]])
    x = torch.zeros(1, len(pos), 64, dtype=torch.float32)
    cos_ref, sin_ref = rot(x, torch.tensor(pos)[None])
    cos_ref, sin_ref = cos_ref[0].numpy(), sin_ref[0].numpy()            # [S, d], halves repeated
    cos, sin = cos_sin(pos, freqs)                                        # [S, d/2]
    assert cos.shape == (len(pos), 32)
    np.testing.assert_allclose(cos, cos_ref[:, :32], rtol=0, atol=1e-6)
    np.testing.assert_allclose(sin, sin_ref[:, :32], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(cos_ref[:, :32], cos_ref[:, 32:])      # HF's layout: [c, c]


def test_apply_rope_is_half_split_rotation():
    """Dimension i pairs with i + d/2 and turns by pos * inv_freq[i] (HF's rotate_half form)."""
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rng = np.random.default_rng(0)
    S, H, d = 7, 3, 16
    x = rng.standard_normal((S, H, d)).astype(np.float32)
    freqs = inv_freq(d, 10000.0)
    pos = np.arange(5, 5 + S)
    cos, sin = cos_sin(pos, freqs)
    ours = apply_rope(x, cos, sin)
    # closed form in float64
    ang = pos[:, None].astype(np.float64) * freqs[None, :].astype(np.float64)
    x1, x2 = x[..., :d // 2].astype(np.float64), x[..., d // 2:].astype(np.float64)
    c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
    closed = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    np.testing.assert_allclose(ours, closed, rtol=0, atol=1e-5)
    # transformers' apply_rotary_pos_emb on [B, heads, S, d]
    xt = torch.from_numpy(x).permute(1, 0, 2)[None]
    ct = torch.from_numpy(np.concatenate([cos, cos], -1))[None]
    st = torch.from_numpy(np.concatenate([sin, sin], -1))[None]
    q_ref, _ = apply_rotary_pos_emb(xt, xt, ct, st)
    np.testing.assert_allclose(ours, q_ref[0].permute(1, 0, 2).numpy(), rtol=0, atol=1e-6)
    # rotation preserves each pair's norm
    np.testing.assert_allclose(np.linalg.norm(ours, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)

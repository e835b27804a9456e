"""Chapter 01 exercises: parameters of a block, RMSNorm.

    block_params(c: LlamaConfig) -> int                      checked against c.layer_params()
    rms_norm(x [S, H], gamma [H], eps) -> [S, H]             against llamanb.model.ops.rms_norm

(The FLOP exercises are chapter 01b's: `ch01b`.)
"""
from __future__ import annotations

import numpy as np

from llamanb.model.config import LLAMA3_70B, LLAMA31_8B, LLAMA32_1B, SMOLLM2_135M, LlamaConfig
from llamanb.model.ops import rms_norm as _rms_norm
from llamanb.course.exercises.check import Case, Exercise

PRESETS = (SMOLLM2_135M, LLAMA32_1B, LLAMA31_8B, LLAMA3_70B)


def small_configs(seed: int = 1, n: int = 6) -> list[LlamaConfig]:
    """Random small configs, GQA group sizes 1..4 (so that N_kv != N_h is exercised)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        n_kv = int(rng.integers(1, 5))
        g = int(rng.integers(1, 5))
        d = int(rng.choice([8, 16, 32]))
        out.append(LlamaConfig(name=f"random config {i + 1}", n_layers=int(rng.integers(1, 5)),
                               hidden=int(rng.choice([32, 48, 64])), n_heads=n_kv * g,
                               n_kv_heads=n_kv, head_dim=d, ffn=int(rng.choice([40, 96, 128])),
                               vocab=int(rng.integers(50, 300)), rope_theta=1e4, max_seq=256,
                               tie_embeddings=bool(rng.integers(0, 2))))
    return out


def _config_label(c: LlamaConfig) -> str:
    return (f"{c.name}: H={c.hidden}, N_h={c.n_heads}, N_kv={c.n_kv_heads}, d_h={c.head_dim}, "
            f"D_ff={c.ffn}")


def _block_cases() -> list[Case]:
    return [Case(_config_label(c), (c,), c.layer_params()) for c in (*PRESETS, *small_configs())]


block_params = Exercise(
    "01.1", "block_params", _block_cases,
    hint="q and o are H x N_h*d_h, but k and v are H x N_kv*d_h (GQA); three FFN matrices "
         "H x D_ff; and two RMSNorm weights of H each")


def _rms_cases() -> list[Case]:
    rng = np.random.default_rng(2)
    cases = []
    for S, H, eps, scale in ((1, 8, 1e-5, 1.0), (4, 16, 1e-5, 3.0), (3, 64, 1e-6, 0.01),
                             (5, 576, 1e-5, 1.0), (2, 8, 0.5, 0.1)):
        x = (rng.standard_normal((S, H)) * scale).astype(np.float32)
        g = rng.standard_normal(H).astype(np.float32)
        cases.append(Case(f"x [{S}, {H}], eps={eps:g}, |x| ~ {scale:g}", (x, g, eps),
                          _rms_norm(x, g, eps)))
    x = np.zeros((2, 8), np.float32)
    cases.append(Case("an all-zero row (eps keeps it finite)", (x, np.ones(8, np.float32), 1e-5),
                      _rms_norm(x, np.ones(8, np.float32), 1e-5)))
    return cases


rms_norm = Exercise(
    "01.2", "rms_norm", _rms_cases, rtol=1e-5, atol=1e-6,
    hint="divide each row by sqrt(mean over H of x^2 + eps) -- eps inside the square root, the "
         "mean (not the sum) over the last axis -- then multiply by gamma")


EXERCISES = (block_params, rms_norm)

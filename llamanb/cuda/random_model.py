"""A Llama with random weights from a seed, at any config's shapes: what the GPU check runs when the
real checkpoint cannot travel (the embedded GGUF is 98 MB), and what the chapter runs at tiny
shapes. Weights ~ N(0, std^2), norms ~ U[0.5, 1.5), float32; no tokenizer."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from llamanb.model.config import LlamaConfig
from llamanb.io.store import Model
from llamanb.model.weights import LayerWeights, Weights


def random_weights(cfg: LlamaConfig, seed: int = 0, std: float = 0.05, draw=None) -> Weights:
    """draw(shape, kind) -> float32 array, kind "normal" or "norm"; default numpy's PCG64 from
    `seed` (the GPU check passes one that draws on the device)."""
    if draw is None:
        rng = np.random.default_rng(seed)

        def draw(shape, kind):
            if kind == "norm":
                return (rng.random(shape, dtype=np.float32) + 0.5).astype(np.float32)
            return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)
    H, d, F = cfg.hidden, cfg.head_dim, cfg.ffn
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * d
    layers = [LayerWeights(draw((H,), "norm"), draw((qkv, H), "normal"),
                           draw((H, cfg.n_heads * d), "normal"), draw((H,), "norm"),
                           draw((2 * F, H), "normal"), draw((H, F), "normal"))
              for _ in range(cfg.n_layers)]
    embed = draw((cfg.vocab, H), "normal")
    lm_head = embed if cfg.tie_embeddings else draw((cfg.vocab, H), "normal")
    return Weights(cfg, embed, layers, draw((H,), "norm"), lm_head)


def random_model(cfg: LlamaConfig, seed: int = 0, std: float = 0.05, draw=None) -> Model:
    return Model(cfg, random_weights(cfg, seed, std, draw), None, Path(f"random:{cfg.name}:{seed}"),
                 Path("."))

"""Chapter 11 exercises: what a decode step reads, what a register tile holds.

    weight_bytes(cfg, fmt) -> bytes of matrix weights one decode step streams, for fmt one of
        "float32", "bf16", "q8_0", "q4_1"; against a count over llamanb.model.weights.tensor_specs
    tile_registers(mr, npan) -> vector registers a register tile of mr rows x npan panels holds
        during one k step (kernels/cpu/matmul.cc's micro); against the closed form
"""
from __future__ import annotations

import numpy as np

from llamanb.model.config import PRESETS
from llamanb.model.weights import tensor_specs
from llamanb.course.exercises.check import Case, Exercise

# bytes per weight of each format: GGUF blocks of 32 weights carry 2-byte scales
BYTES_PER_WEIGHT = {"float32": 4.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_1": 20 / 32}


def _streamed(cfg, fmt: str) -> int:
    """Every 2-D weight a decode step multiplies by (the embedding only as the tied head: a
    lookup reads one row), times the format's bytes per weight."""
    n = sum(int(np.prod(shape)) for name, shape in tensor_specs(cfg)
            if len(shape) == 2 and (name != "model.embed_tokens.weight" or cfg.tie_embeddings))
    return int(round(n * BYTES_PER_WEIGHT[fmt]))


def _bytes_cases() -> list[Case]:
    return [Case(f"{name}, {fmt}", (cfg, fmt), _streamed(cfg, fmt))
            for name, cfg in PRESETS.items() for fmt in BYTES_PER_WEIGHT]


weight_bytes = Exercise(
    "11.1", "weight_bytes", _bytes_cases, rtol=0, atol=0.5,
    hint="per layer q, k, v, o, gate, up, down ([out, in] each: cfg.q_dim, cfg.kv_dim, cfg.hidden, "
         "cfg.ffn), then the LM head [vocab, hidden] -- once, whether or not it is tied to the "
         "embedding; times 4, 2, 34/32 or 20/32 bytes a weight")


def _registers(mr: int, npan: int) -> int:
    # accumulators: mr rows x npan panels x 2 vectors (a panel is 2 VW columns); the weights of
    # one k step: 2 vectors per panel; one broadcast activation
    return 2 * mr * npan + 2 * npan + 1


def _tile_cases() -> list[Case]:
    tiles = [(1, 1), (1, 4), (2, 2), (3, 1), (4, 1), (6, 1), (14, 1), (2, 3), (5, 2)]
    return [Case(f"{mr} rows x {npan} panels", (mr, npan), _registers(mr, npan))
            for mr, npan in tiles]


tile_registers = Exercise(
    "11.2", "tile_registers", _tile_cases, rtol=0, atol=0,
    hint="one accumulator vector per row and per half panel (a panel is two vectors wide), the "
         "panel rows of weights loaded for this k, and one register for the broadcast x[i, k]")


EXERCISES = (weight_bytes, tile_registers)

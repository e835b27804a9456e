"""FLOPs of a Llama forward pass, per op, in closed form from the config.

Convention: one multiply-add is 2 FLOPs, so x [m, k] @ W [k, n] costs 2 * m * k * n. Only the
matrix products are counted -- the ten ops below. Norms, RoPE, SiLU and the residual adds are a few
operations per element of [S, H] or [S, D_ff], and softmax a few per score against the 4 * d_h of
the two attention products: together about 0.2% of a 2048-token prefill of Llama-3.2-1B. (torch's
FlopCounterMode, the reference the tests use, counts matrix products only, too.)

    q_proj      2 S H (N_h d_h)         per layer
    k_proj      2 S H (N_kv d_h)        per layer
    v_proj      2 S H (N_kv d_h)        per layer
    attn_scores 2 N_h d_h * pairs       per layer   (Q K^T: one d_h dot product per query/key pair)
    attn_values 2 N_h d_h * pairs       per layer   (P V: the same shape of work)
    o_proj      2 S (N_h d_h) H         per layer
    gate_proj   2 S H D_ff              per layer
    up_proj     2 S H D_ff              per layer
    down_proj   2 S D_ff H              per layer
    lm_head     2 rows H V              once (rows = 1 for the next token, S for every position)

`pairs` is the number of (query, key) pairs attention computes. For S new tokens after `start`
cached ones, a causal mask needs the triangle  S * start + S (S + 1) / 2  (each query sees itself
and everything before it); a plain implementation computes the full rectangle  S * (start + S)
and masks the rest. Both are offered: "causal" is the work that matters, "full" is what an eager
implementation (and HF's eager attention) performs.

Every count is for the whole model (layer ops summed over the L layers), times the batch.
"""
from __future__ import annotations

from llamanb.model.config import LlamaConfig
from llamanb.errors import LlamanbError

LAYER_OPS = ("q_proj", "k_proj", "v_proj", "attn_scores", "attn_values", "o_proj",
             "gate_proj", "up_proj", "down_proj")
OPS = LAYER_OPS + ("lm_head",)


def attention_pairs(S: int, start: int = 0, attention: str = "causal") -> int:
    """(query, key) pairs for S queries at positions start .. start+S-1.
    "causal": keys 0..p for the query at p (the triangle); "full": every query x every key."""
    if S < 0 or start < 0:
        raise LlamanbError(f"attention_pairs: S and start must be >= 0, got {S}, {start}")
    if attention == "causal":
        return S * start + S * (S + 1) // 2
    if attention == "full":
        return S * (start + S)
    raise LlamanbError(f"attention must be 'causal' or 'full', got {attention!r}")


def layer_flops(cfg: LlamaConfig, S: int, start: int = 0, attention: str = "causal") -> dict[str, int]:
    """FLOPs of ONE transformer block on S tokens after `start` cached ones (batch 1)."""
    H, F, qd, kvd = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim
    pairs = attention_pairs(S, start, attention)
    return {
        "q_proj": 2 * S * H * qd,
        "k_proj": 2 * S * H * kvd,
        "v_proj": 2 * S * H * kvd,
        "attn_scores": 2 * cfg.n_heads * cfg.head_dim * pairs,
        "attn_values": 2 * cfg.n_heads * cfg.head_dim * pairs,
        "o_proj": 2 * S * qd * H,
        "gate_proj": 2 * S * H * F,
        "up_proj": 2 * S * H * F,
        "down_proj": 2 * S * F * H,
    }


def prefill_flops(cfg: LlamaConfig, S: int, lm_head_rows: str = "last", attention: str = "causal",
                  start: int = 0, batch: int = 1) -> dict[str, int]:
    """FLOPs per op (keys: OPS) for a forward pass over S tokens, whole model.

    lm_head_rows: "last" -- only the last row goes through the LM head (what generation needs);
                  "all"  -- every row does (training, scoring, or a naive implementation).
    attention:    "causal" (the triangle) or "full" (the S x (start+S) rectangle); see module doc.
    start:        tokens already in the KV cache (0 for a prompt; > 0 for a chunk of a long one).
    """
    if S < 1:
        raise LlamanbError(f"prefill_flops: S must be >= 1, got {S}")
    if batch < 1:
        raise LlamanbError(f"prefill_flops: batch must be >= 1, got {batch}")
    rows = {"last": 1, "all": S}.get(lm_head_rows)
    if rows is None:
        raise LlamanbError(f"lm_head_rows must be 'last' or 'all', got {lm_head_rows!r}")
    per_layer = layer_flops(cfg, S, start, attention)
    out = {op: batch * cfg.n_layers * n for op, n in per_layer.items()}
    out["lm_head"] = batch * 2 * rows * cfg.hidden * cfg.vocab
    return out


def decode_flops(cfg: LlamaConfig, context: int, batch: int = 1) -> dict[str, int]:
    """FLOPs per op for one decode step: one new token per sequence, `context` tokens already in
    the cache (the new token attends to context + 1 keys, itself included). Causal and full
    attention coincide for a single query."""
    if context < 0:
        raise LlamanbError(f"decode_flops: context must be >= 0, got {context}")
    return prefill_flops(cfg, 1, lm_head_rows="last", attention="causal", start=context, batch=batch)


def total(flops: dict[str, int]) -> int:
    return sum(flops.values())

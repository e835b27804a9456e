"""A printable summary of a config: symbols, parameters per component, bytes, KV cache."""
from __future__ import annotations

from llamanb.model.config import BYTES_PER_PARAM, LlamaConfig, human_bytes


def describe(cfg: LlamaConfig, seq: int | None = None) -> str:
    seq = seq or min(cfg.max_seq, 8192)
    lines = [f"{cfg.name}",
             f"  L={cfg.n_layers} H={cfg.hidden} N_h={cfg.n_heads} N_kv={cfg.n_kv_heads} G={cfg.group} "
             f"d_h={cfg.head_dim} D_ff={cfg.ffn} V={cfg.vocab} rope_theta={cfg.rope_theta:g}"
             f"{' (llama3 scaling x%g)' % cfg.rope_scaling.factor if cfg.rope_scaling else ''} "
             f"context={cfg.max_seq} embeddings={'tied' if cfg.tie_embeddings else 'untied'}",
             "  parameters:"]
    for k, n in cfg.param_breakdown().items():
        if n:
            lines.append(f"    {k:<11} {n:>15,}")
    lines.append(f"    {'total':<11} {cfg.n_params():>15,}")
    lines.append("  weights: " + ", ".join(f"{f} {human_bytes(cfg.weight_bytes(f))}"
                                            for f in BYTES_PER_PARAM))
    lines.append(f"  KV cache: {human_bytes(cfg.kv_bytes_per_token('bf16'))}/token in bf16 (K+V, all "
                 f"layers); at {seq} tokens: bf16 {human_bytes(cfg.kv_bytes(seq, 'bf16'))} "
                 f"(K {human_bytes(cfg.kv_bytes(seq, 'bf16') / 2)} + V), "
                 f"fp32 {human_bytes(cfg.kv_bytes(seq, 'fp32'))}")
    return "\n".join(lines)

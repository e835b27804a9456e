"""A printable summary of a config: symbols, parameters per component, bytes, KV cache."""
from __future__ import annotations

from llamanb.model.config import BYTES_PER_PARAM, LlamaConfig, human_bytes


WIDTH = 120                                 # a notebook's output column


def _packed(lead: str, items: list[str], sep: str, indent: str) -> list[str]:
    """`lead` + items joined by `sep`, broken between items so that no line passes WIDTH."""
    lines, line = [], lead + items[0]
    for it in items[1:]:
        if len(line) + len(sep) + len(it) > WIDTH:
            lines.append(line + sep.rstrip())
            line = indent + it
        else:
            line += sep + it
    return lines + [line]


def describe(cfg: LlamaConfig, seq: int | None = None) -> str:
    seq = seq or min(cfg.max_seq, 8192)
    shape = [f"L={cfg.n_layers}", f"H={cfg.hidden}", f"N_h={cfg.n_heads}", f"N_kv={cfg.n_kv_heads}",
             f"G={cfg.group}", f"d_h={cfg.head_dim}", f"D_ff={cfg.ffn}", f"V={cfg.vocab}",
             f"rope_theta={cfg.rope_theta:g}"
             + (" (llama3 scaling x%g)" % cfg.rope_scaling.factor if cfg.rope_scaling else ""),
             f"context={cfg.max_seq}", f"embeddings={'tied' if cfg.tie_embeddings else 'untied'}"]
    lines = [f"{cfg.name}", *_packed("  ", shape, " ", "  "),
             "  parameters:"]
    for k, n in cfg.param_breakdown().items():
        if n:
            lines.append(f"    {k:<11} {n:>15,}")
    lines.append(f"    {'total':<11} {cfg.n_params():>15,}")
    lines += _packed("  weights: ", [f"{f} {human_bytes(cfg.weight_bytes(f))}" for f in BYTES_PER_PARAM],
                     ", ", "           ")
    lines.append(f"  KV cache: {human_bytes(cfg.kv_bytes_per_token('bf16'))}/token in bf16 (K+V, all "
                 f"layers);")
    lines.append(f"    at {seq} tokens: bf16 {human_bytes(cfg.kv_bytes(seq, 'bf16'))} "
                 f"(K {human_bytes(cfg.kv_bytes(seq, 'bf16') / 2)} + V), "
                 f"fp32 {human_bytes(cfg.kv_bytes(seq, 'fp32'))}")
    return "\n".join(lines)

"""The weights of a Llama model as the engine uses them, and the HF names they are stored under.

Shapes follow HF/PyTorch: a projection weight is [out, in] and is applied as x @ W.T.
The storage order puts q, k, v (and gate, up) back to back, so fused views cost nothing:

    wqkv      [N_h*d_h + 2*N_kv*d_h, H]   one GEMM yields q | k | v
    w_gate_up [2*D_ff, H]                 one GEMM yields gate | up
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from llamanb.model.config import LlamaConfig
from llamanb.errors import LlamanbError


def layer_names(i: int) -> dict[str, str]:
    p = f"model.layers.{i}."
    return {
        "attn_norm": p + "input_layernorm.weight",
        "q": p + "self_attn.q_proj.weight",
        "k": p + "self_attn.k_proj.weight",
        "v": p + "self_attn.v_proj.weight",
        "o": p + "self_attn.o_proj.weight",
        "ffn_norm": p + "post_attention_layernorm.weight",
        "gate": p + "mlp.gate_proj.weight",
        "up": p + "mlp.up_proj.weight",
        "down": p + "mlp.down_proj.weight",
    }


def tensor_specs(cfg: LlamaConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor the model needs, HF name and shape, in storage order."""
    H, F = cfg.hidden, cfg.ffn
    specs = [("model.embed_tokens.weight", (cfg.vocab, H))]
    for i in range(cfg.n_layers):
        n = layer_names(i)
        specs += [(n["q"], (cfg.q_dim, H)), (n["k"], (cfg.kv_dim, H)), (n["v"], (cfg.kv_dim, H)),
                  (n["o"], (H, cfg.q_dim)), (n["gate"], (F, H)), (n["up"], (F, H)),
                  (n["down"], (H, F)), (n["attn_norm"], (H,)), (n["ffn_norm"], (H,))]
    specs.append(("model.norm.weight", (H,)))
    if not cfg.tie_embeddings:
        specs.append(("lm_head.weight", (cfg.vocab, H)))
    return specs


def check_shapes(cfg: LlamaConfig, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    """Raise a one-line error if the stored tensors do not fit the config."""
    for name, shape in tensor_specs(cfg):
        if name not in shapes:
            raise LlamanbError(f"{where}: weights do not match the config: {name} is missing")
        if tuple(shapes[name]) != shape:
            raise LlamanbError(f"{where}: weights do not match the config: {name} has shape "
                               f"{tuple(shapes[name])}, config implies {shape}")


@dataclass
class LayerWeights:
    attn_norm: np.ndarray   # [H]
    wqkv: np.ndarray        # [q_dim + 2 kv_dim, H]
    wo: np.ndarray          # [H, q_dim]
    ffn_norm: np.ndarray    # [H]
    w_gate_up: np.ndarray   # [2 D_ff, H]
    w_down: np.ndarray      # [H, D_ff]


def producer_dtype(producer: tuple) -> str:
    """The stored dtype of a `Weights.derived` producer (shape, fn[, dtype]): "F32" or "BF16"."""
    return producer[2] if len(producer) > 2 else "F32"


def derive_in_memory(producers: dict) -> dict:
    """Each producer's array in memory: float32, or uint16 bits for a "BF16" producer."""
    return {n: np.ascontiguousarray(p[1](), dtype=np.uint16 if producer_dtype(p) == "BF16" else np.float32)
            for n, p in producers.items()}


@dataclass
class Weights:
    config: LlamaConfig
    embed: np.ndarray       # [V, H]
    layers: list[LayerWeights]
    final_norm: np.ndarray  # [H]
    lm_head: np.ndarray     # [V, H]  (the embedding itself when tied)
    store_dir: Path | None = None   # cache directory the arrays are mapped from, if any
    # derived(tag, producers) computes a backend's derived arrays; None: in memory (the model
    # store keeps one copy of the weights, so it sets none). Backends call `derived` and never
    # import the store.
    deriver: Callable | None = None
    # Set by the model store when the weights came from a GGUF file that is still there:
    # quantized(hf_name) -> (GGUF type name, uint8 [rows, bytes per row]), the file's own blocks
    # in HF row order, for a backend that computes on them as they are (llamanb.cpu.backend).
    quantized: Callable | None = None

    @classmethod
    def from_getter(cls, cfg: LlamaConfig, get, span=None, store_dir: Path | None = None,
                    deriver: Callable | None = None, quantized: Callable | None = None) -> "Weights":
        """Build from get(name) -> float32 array; span(names) may return a fused view or None."""
        def fused(names):
            v = span(names) if span is not None else None
            return v if v is not None else np.concatenate([get(n) for n in names], axis=0)

        layers = []
        for i in range(cfg.n_layers):
            n = layer_names(i)
            layers.append(LayerWeights(
                attn_norm=get(n["attn_norm"]), wqkv=fused([n["q"], n["k"], n["v"]]), wo=get(n["o"]),
                ffn_norm=get(n["ffn_norm"]), w_gate_up=fused([n["gate"], n["up"]]), w_down=get(n["down"])))
        embed = get("model.embed_tokens.weight")
        lm_head = embed if cfg.tie_embeddings else get("lm_head.weight")
        return cls(cfg, embed, layers, get("model.norm.weight"), lm_head, store_dir, deriver,
                   quantized)

    def derived(self, tag: str, producers: dict) -> dict:
        """Arrays a backend derives from the weights (another layout, say), computed once.
        producers: name -> (shape, fn returning the float32 array), or (shape, fn, "BF16") for
        bfloat16 bits (uint16). In memory (the cache holds the weights once), unless a `deriver`
        says otherwise."""
        if self.deriver is None:
            return derive_in_memory(producers)
        return self.deriver(self, tag, producers)

    def split_qkv(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = self.config
        w = self.layers[i].wqkv
        return w[:c.q_dim], w[c.q_dim:c.q_dim + c.kv_dim], w[c.q_dim + c.kv_dim:]

    def split_gate_up(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        w = self.layers[i].w_gate_up
        return w[:self.config.ffn], w[self.config.ffn:]

    def hf_state(self) -> dict[str, np.ndarray]:
        """name -> array, HF names (what a checkpoint would hold)."""
        out = {"model.embed_tokens.weight": self.embed, "model.norm.weight": self.final_norm}
        for i, lw in enumerate(self.layers):
            n = layer_names(i)
            q, k, v = self.split_qkv(i)
            g, u = self.split_gate_up(i)
            out.update({n["attn_norm"]: lw.attn_norm, n["q"]: q, n["k"]: k, n["v"]: v, n["o"]: lw.wo,
                        n["ffn_norm"]: lw.ffn_norm, n["gate"]: g, n["up"]: u, n["down"]: lw.w_down})
        if not self.config.tie_embeddings:
            out["lm_head.weight"] = self.lm_head
        return out

    def map_arrays(self, fn) -> "Weights":
        """A copy with fn applied to every array (e.g. rounding to bf16); ties are kept."""
        layers = [LayerWeights(*(fn(getattr(lw, f)) for f in LayerWeights.__dataclass_fields__))
                  for lw in self.layers]
        embed = fn(self.embed)
        lm_head = embed if self.lm_head is self.embed else fn(self.lm_head)
        return Weights(self.config, embed, layers, fn(self.final_norm), lm_head)

    def nbytes(self) -> int:
        arrays = [self.embed, self.final_norm] + [getattr(lw, f) for lw in self.layers
                                                   for f in LayerWeights.__dataclass_fields__]
        if self.lm_head is not self.embed:
            arrays.append(self.lm_head)
        return sum(a.nbytes for a in arrays)

"""Llama as a TCP program: the op lists of Furiosa's "Transformer Architecture" chapter, as data.

Furiosa's TCP programming book (repository furiosa-ai/furiosa-opt, docs/src/kernel-examples/
transformer.md) walked Llama 3 70B through prefill and decode step by step in its versions of
2026-04-24 (commit a837582) and 2026-05-21 (commit f8938cb); the quotes below are from those. On
2026-08-17 (commit d4d05a7) the page became "Case Study: Transformer": Qwen3-0.6B, one decode token,
a host-prepared embedding, attention in online-softmax chunks, no prefill. `program(cfg, phase)`
returns the Llama walk as a list of `Op`s (llamanb.tcp.ops), in three parts:

    pre     embedding gather                                      once
    layer   RMSNorm .. FFN residual                               repeated L times
    post    final RMSNorm, last-row slice, LM head, host sampling once

    phase "prefill"  s_in prompt rows, keys are those rows (s = s_in), causal mask
          "decode"   one new row per sequence (s_in = 1) after s - 1 cached ones, keys from the cache
          "extend"   s_in > 1 new rows after s - s_in cached ones (a chunk of a long prompt):
                     decode's cache reads with prefill's mask (not in the chapter; the engine needs it)

Where the chapter is wrong the op is right and its `note` quotes the chapter (CORRECTIONS lists
them all). `dims(cfg, B, s_in, s)` gives every axis its size for one step.
"""
from __future__ import annotations

from dataclasses import dataclass

from llamanb.model.config import LlamaConfig
from llamanb.errors import LlamanbError
from llamanb.tcp.ops import Op

PHASES = ("prefill", "decode", "extend")

CE, VE, DMA = "Contraction Engine", "Vector Engine", "Tensor DMA"
# The book's Contraction Engine (docs/src/computing-tensors/contraction-engine/index.md): one operand
# waits in the Tensor Register File, the other streams in (Fetch -> Switch -> Collect); Outer
# broadcasts and multiplies (widening to f32), the Packet Reducer sums within a packet, the Time
# Reducer across cycles; a sum across slices or chips is left to the Vector Engine downstream.
REDUCE = ("one operand from the TRF, one streamed: multiply, Packet + Time Reducers sum the contracted "
          "axis in each slice (across slices: the Vector Engine's inter-slice reducer)")

NOTE_ROPE_PAIRS = ('The chapter: "RoPE operation groups consecutive pairs among d_k values". Meta\'s '
                   'original checkpoints and GGUF files pair (2i, 2i+1); HF checkpoints pair (i, i + d_k/2). '
                   'Here the d_k columns of each head of w_q and w_k are permuted into consecutive pairs once, '
                   'when the weights are laid out; Q.K is unchanged by a permutation applied to both.')
NOTE_ROPE_TABLE = ('The chapter: "f = 2: frequency dimension for adjacent heads". f is the member of a '
                   'rotation pair (x_2i or x_2i+1); the frequencies run along d_k\'. The einsum contracts f, '
                   'so each 2x2 entry is stored [in, out] = [[cos, sin], [-sin, cos]], the transpose of the '
                   'textbook rotation matrix (notebook 02 measures the backwards turn of the other one).')
NOTE_GROUP = ('The chapter: "Q_rope: shape![B, h_q, s_in, d_k] == shape![B, G, h_kv, s_in_q, d_k]". With '
              'Llama\'s head order (query head h reads K/V head h // G, as in HF\'s repeat_kv) h_q splits '
              'as [h_kv, G]; [G, h_kv] would pair query head h with K/V head h mod h_kv.')
NOTE_V = ('The chapter\'s V is [B, s_in, h_kv, d_k] but its cache is [B, h_kv, s, d_k] (its 2026-04-24 '
          'version had a TODO saying so for decode: "V_new has shape [B, 1, h_kv, d_k] but the cache expects '
          '[B, h_kv, s, d_k]"; the 2026-05-21 version dropped the TODO and kept the mismatch; prefill\'s '
          '"kv_cache_l_V = V" has it too, and its weighted sum calls V [B, s_in, h_kv, d_k] == '
          '[B, h_kv, s_in_kv, d_k] a "Reshape (noop)", which is a transpose). An einsum may write its result '
          'in any axis order, so the V projection writes [B, h_kv, s_in, d_k] directly: no transpose op.')
NOTE_UPDATE = ('The chapter: "kv_cache_l_K[s-1] = K_rope" indexes the first axis, which is B. The new '
               'row goes to position s-1 of the s axis: kv_cache_K[:, :, s-1] = K_rope.')
NOTE_POSITION = ('The chapter: "position(0) = s (total sequence length processed so far)" while the same '
                 'step writes cache row s-1 of a cache that held s-1 rows: the new token sits at position '
                 's-1 (0-based), and that is the RoPE angle it must get.')
NOTE_HEAD = ('The chapter: "Typically w_lm_head = w_emb.T (weight tying)". Llama 3 70B and Llama 3.1 8B '
             'are untied (their own lm_head.weight); SmolLM2-135M and Llama-3.2-1B are tied. The program '
             'reads the model\'s own head.')
NOTE_SAMPLE = ('The chapter puts sampling "on the Host, not the TCP" and in the same list has 1/temperature '
               '"processed as constant multiplication in Vector Engine". Here all of it is on the host.')
NOTE_DECODE_MASK = ('The chapter: "Causal mask is unnecessary in decode". True when every sequence of the '
                    'batch has the same length s (required here); sequences of different lengths in one '
                    'batch need a length mask.')

CORRECTIONS = {"rope pairs": NOTE_ROPE_PAIRS, "rope table": NOTE_ROPE_TABLE, "GQA group axis": NOTE_GROUP,
               "V layout": NOTE_V, "cache update index": NOTE_UPDATE, "decode position": NOTE_POSITION,
               "tied LM head": NOTE_HEAD, "sampling": NOTE_SAMPLE, "decode mask": NOTE_DECODE_MASK}


@dataclass(frozen=True)
class Program:
    phase: str
    n_layers: int
    pre: tuple[Op, ...]
    layer: tuple[Op, ...]
    post: tuple[Op, ...]

    def ops(self) -> list[tuple[Op, int]]:
        """(op, how many times it runs per step): layer ops run L times."""
        return [(o, 1) for o in self.pre] + [(o, self.n_layers) for o in self.layer] + [(o, 1) for o in self.post]

    def flops(self, dims: dict[str, int]) -> dict[str, int]:
        """FLOPs per einsum name for one step, whole model (layer ops times L)."""
        out: dict[str, int] = {}
        for op, times in self.ops():
            if op.kind == "einsum":
                out[op.name] = out.get(op.name, 0) + times * op.flops(dims)
        return out


def dims(cfg: LlamaConfig, B: int, s_in: int, s: int | None = None) -> dict[str, int]:
    """Every axis size for a step of B sequences, s_in new rows each, s rows long afterwards."""
    s = s_in if s is None else s
    for name, v in (("B", B), ("s_in", s_in), ("s", s)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise LlamanbError(f"{name} must be an integer >= 1, got {v!r}")
    if s < s_in:
        raise LlamanbError(f"s ({s}) counts the new rows too: it cannot be below s_in ({s_in})")
    return {"B": B, "s_in": s_in, "s": s, "s_max": cfg.max_seq, "h_q": cfg.n_heads, "h_kv": cfg.n_kv_heads,
            "G": cfg.group, "d_k": cfg.head_dim, "d_k'": cfg.head_dim // 2, "f": 2, "r": 2,
            "D": cfg.hidden, "F": cfg.ffn, "V": cfg.vocab}


def _e(name, out, out_axes, args, section, engine=CE, stated=False, moves="", note=""):
    return Op(name, "einsum", out, tuple(out_axes), tuple(a for a, _ in args), tuple(tuple(x) for _, x in args),
              engine, section, stated, moves=moves or REDUCE, note=note)


def _v(name, fn, out, out_axes, args, section, note=""):
    return Op(name, "vector", out, tuple(out_axes), tuple(a for a, _ in args), tuple(tuple(x) for _, x in args),
              VE, section, True, fn=fn, moves="on chip (DM)", note=note)


def _view(name, out, out_axes, src, src_axes, section):
    return Op(name, "view", out, tuple(out_axes), (src,), (tuple(src_axes),), "none (a view)", section, True,
              moves="no data moves")


def program(cfg: LlamaConfig, phase: str) -> Program:
    if phase not in PHASES:
        raise LlamanbError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    prefill = phase == "prefill"
    X = ("B", "s_in", "D")
    W = "weights HBM -> DM"
    pre = (Op("embed", "gather", "x_0", X, ("input", "w_emb"), (("B", "s_in"), ("V", "D")), DMA, "1",
              moves="B*s_in rows of w_emb, HBM -> DM"),)

    rope_pos = ("RoPE rows of the step's positions, HBM -> DM" if prefill else
                "the RoPE row of position s-1, HBM -> DM")
    keys = ("K_rope", ("B", "h_kv", "s", "d_k")) if prefill else ("kv_cache_K", ("B", "h_kv", "s", "d_k"))
    vals = ("V", ("B", "h_kv", "s", "d_k")) if prefill else ("kv_cache_V", ("B", "h_kv", "s", "d_k"))
    kv_moves = "on chip: the prompt's own K/V" if prefill else "the whole K/V cache of the layer, HBM -> DM"
    layer = [
        _v("attn_norm", "rms_norm", "x_norm", X, [("x", X), ("w_attn_norm", ("D",))], "2.1"),
        _e("q_proj", "Q", ("B", "s_in", "h_q", "d_k"), [("x_norm", X), ("w_q", ("D", "h_q", "d_k"))], "2.2.1",
           stated=True, moves=W, note=NOTE_ROPE_PAIRS),
        _e("k_proj", "K", ("B", "s_in", "h_kv", "d_k"), [("x_norm", X), ("w_k", ("D", "h_kv", "d_k"))], "2.2.1",
           stated=True, moves=W, note=NOTE_ROPE_PAIRS),
        _e("v_proj", "V", ("B", "h_kv", "s_in", "d_k"), [("x_norm", X), ("w_v", ("D", "h_kv", "d_k"))], "2.2.1",
           stated=True, moves=W, note=NOTE_V),
        Op("rope_gather", "gather", "t_rope", ("s_in", "d_k'", "f", "r"), ("position", "w_rope"),
           (("s_in",), ("s_max", "d_k'", "f", "r")), DMA, "2.2.2", False, moves=rope_pos,
           note=NOTE_ROPE_TABLE + ("" if prefill else " " + NOTE_POSITION)),
        _view("q_pairs", "Q2", ("B", "s_in", "h_q", "d_k'", "f"), "Q", ("B", "s_in", "h_q", "d_k"), "2.2.2"),
        _e("rope_q", "Q_rope2", ("B", "h_q", "s_in", "d_k'", "r"),
           [("Q2", ("B", "s_in", "h_q", "d_k'", "f")), ("t_rope", ("s_in", "d_k'", "f", "r"))], "2.2.2"),
        _view("q_rope", "Q_rope", ("B", "h_kv", "G", "s_in", "d_k"), "Q_rope2", ("B", "h_q", "s_in", "d_k'", "r"),
              "2.2.4.1"),
        _view("k_pairs", "K2", ("B", "s_in", "h_kv", "d_k'", "f"), "K", ("B", "s_in", "h_kv", "d_k"), "2.2.2"),
        _e("rope_k", "K_rope2", ("B", "h_kv", "s_in", "d_k'", "r"),
           [("K2", ("B", "s_in", "h_kv", "d_k'", "f")), ("t_rope", ("s_in", "d_k'", "f", "r"))], "2.2.2"),
        _view("k_rope", "K_rope", ("B", "h_kv", "s_in", "d_k"), "K_rope2", ("B", "h_kv", "s_in", "d_k'", "r"),
              "2.2.2"),
        Op("store_k", "store", "kv_cache_K", ("B", "h_kv", "s", "d_k"), ("K_rope",), (("B", "h_kv", "s_in", "d_k"),),
           DMA, "2.2.3", moves="K_rope DM -> HBM, rows s-s_in .. s-1",
           note="" if prefill else NOTE_UPDATE),
        Op("store_v", "store", "kv_cache_V", ("B", "h_kv", "s", "d_k"), ("V",), (("B", "h_kv", "s_in", "d_k"),),
           DMA, "2.2.3", moves="V DM -> HBM, rows s-s_in .. s-1", note=NOTE_V),
    ]
    if prefill:   # the keys are the prompt's own rows: name them s
        layer.append(_view("keys", "K_rope", ("B", "h_kv", "s", "d_k"), "K_rope", ("B", "h_kv", "s_in", "d_k"),
                           "2.2.4.1"))
        layer.append(_view("values", "V", ("B", "h_kv", "s", "d_k"), "V", ("B", "h_kv", "s_in", "d_k"), "2.2.4.4"))
    S5 = ("B", "h_kv", "G", "s_in", "s")
    layer += [
        _e("attn_scores", "scores_raw", S5, [("Q_rope", ("B", "h_kv", "G", "s_in", "d_k")), keys], "2.2.4.1",
           moves=kv_moves, note=NOTE_GROUP),
        _v("attn_scale", "scale", "scores", S5, [("scores_raw", S5)], "2.2.4.1"),
    ]
    if phase != "decode":
        layer.append(_v("causal_mask", "causal_mask", "scores", S5, [("scores", S5)], "2.2.4.2"))
    layer += [
        _v("softmax", "softmax", "attn_weights", S5, [("scores", S5)], "2.2.4.3",
           note="" if phase != "decode" else NOTE_DECODE_MASK),
        _e("attn_values", "attn_output", ("B", "h_kv", "G", "s_in", "d_k"), [("attn_weights", S5), vals],
           "2.2.4.4", moves=kv_moves, note=NOTE_GROUP),
        _view("heads", "attn_output", ("B", "h_q", "s_in", "d_k"), "attn_output", ("B", "h_kv", "G", "s_in", "d_k"),
              "2.2.5"),
        _e("o_proj", "attn_out", X, [("attn_output", ("B", "h_q", "s_in", "d_k")), ("w_o", ("h_q", "d_k", "D"))],
           "2.2.5", moves=W),
        _v("attn_residual", "add", "x_attn", X, [("x", X), ("attn_out", X)], "2.2.6"),
        _v("ffn_norm", "rms_norm", "x_ffn_norm", X, [("x_attn", X), ("w_ffn_norm", ("D",))], "2.3.1"),
        _e("gate_proj", "gate", ("B", "s_in", "F"), [("x_ffn_norm", X), ("w_gate", ("D", "F"))], "2.3.2", moves=W),
        _e("up_proj", "up", ("B", "s_in", "F"), [("x_ffn_norm", X), ("w_up", ("D", "F"))], "2.3.2", moves=W),
        _v("swiglu", "silu_mul", "activated", ("B", "s_in", "F"),
           [("gate", ("B", "s_in", "F")), ("up", ("B", "s_in", "F"))], "2.3.2"),
        _e("down_proj", "ffn_out", X, [("activated", ("B", "s_in", "F")), ("w_down", ("F", "D"))], "2.3.2",
           moves=W),
        _v("ffn_residual", "add", "x", X, [("x_attn", X), ("ffn_out", X)], "2.3.3"),
    ]
    post = (
        _v("final_norm", "rms_norm", "x_final", X, [("x", X), ("w_final_norm", ("D",))], "3"),
        Op("last_row", "slice", "x_last", ("B", "D"), ("x_final",), (X,), "parallel copy", "4",
           moves="on chip (a view when s_in = 1)"),
        _e("lm_head", "logits", ("B", "V"), [("x_last", ("B", "D")), ("w_lm_head", ("D", "V"))], "4",
           moves=W, note=NOTE_HEAD),
        Op("sample", "host", "next_token", ("B",), ("logits",), (("B", "V"),), "host", "5",
           moves="logits DM -> host", note=NOTE_SAMPLE),
    )
    return Program(phase, cfg.n_layers, pre, tuple(layer), post)

"""Furiosa's published RNGD throughput, predicted from the compiler's own cycle counts.

Nothing is fitted: every op's time is furiosa-tcc's estimate (data/tcp/cycles.json, converted at
the compiler's 1 GHz), plus the data movement those kernels do not contain, each term sourced or
marked ASSUMED. What Furiosa did not publish (the batch; for 70B how a stage hands its activations
to the next card) is not chosen: every equally plausible reading is computed, and the prediction
is the range they span.

Sources, assumptions (each used once below):
  * weights FP8 with FP8 activations and a bf16 KV cache: the published figures say FP8; Furiosa's
    own Llama 3.1 8B FP8 kernels are "per-token dynamic W8A8, KV cache bf16"
    (furiosa-kernels 2026.4.0, furiosa/kernels/llama/entry_function/llama3_1_8b_w8fa8fdkv16.py).
    The course's fp8 kernels contract fp8 x fp8 into bf16 (no scale multiply: ASSUMED negligible).
  * where sampling runs, two readings: on the card (furiosa-kernels ships `argmax_lm_head` and
    `common/sampling`), so only token ids cross PCIe; or on the host, as the book's transformer
    page says (kernel-examples/transformer.md, "5. Sampling"), so B x V bf16 logits cross PCIe
    every step. PCIe DMA: 30 B/cycle = 30 GB/s host <-> HBM (furiosa-ai/furiosa-opt,
    docs/src/moving-tensors/dma-engine.md, "Memory Bandwidth" table).
  * not in the compiled kernels, charged at HBM's 1.5 TB/s (same file; RNGD specification table):
    the embedding rows read per token and the new K and V rows written per token and layer.
  * 70B on 8 cards: pipeline parallel across cards (each card 10 layers on its 8 PEs), the layout
    Furiosa-LLM's model-parallelism page allows (TP over a card's PEs, PP across cards); which
    layout the published run used is not stated. Tensor parallel across cards is not priced: no
    Furiosa source gives a card-to-card rate.
  * the stage-to-stage hand-off ([tokens, D] bf16): no published rate, so two readings: free
    (overlapped with compute), or copied through the host over PCIe at 30 GB/s each way.
  * batch: the largest whose bf16 KV cache fits in HBM beside the weights, at each sequence's
    final length ("full") or at its mean length n_in + n_out / 2 ("paged", Furiosa-LLM keeps the
    cache in paged blocks). Two readings, each rounded down to 8 sequences per card (ASSUMED).
  * the keys a decode step attends to, two readings: the mean context as compiled, or the
    attention kernels compiled at 2048 keys and scaled linearly to the mean context (furiosa-tcc
    schedules our value einsum up to 20x slower at 2112 keys than at 2048; a blockwise kernel,
    as in furiosa.kernels.common.attention, sees power-of-two blocks).
  * kernels run one after another, each as the compiler scheduled it alone (ASSUMED: no overlap
    between kernels, no launch cost between them); a decode step is priced at the mean context.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from llamanb.platform.calibration import spread
from llamanb.tcp.cost import PUBLISHED, RNGD, max_batch
from llamanb.tcp.table import load, rows, step_cycles

CLOCK_HZ = 1.0e9          # llamanb.tcp.compiler.CLOCK_SOURCE
PCIE_BW = 30e9            # host <-> HBM, dma-engine.md
HBM_BW = RNGD.hbm_bw      # 1.5 TB/s
TARGET = "renegade-8pe"
BATCH_RULES = ("full", "paged")
HANDOFF = ("free", "via host PCIe")
SAMPLING = ("on card", "on host")
ROUND = 8
ATTENTION = ("at the mean context", "at 2048 keys, scaled")
KEYS_POW2 = 2048
ATTN_OPS = ("attn_scores", "softmax", "attn_values")


def _pub(model: str) -> dict:
    return next(p for p in PUBLISHED if p["model"] == model)


def batch(p: dict, rule: str) -> int:
    """The batch a reading gives a published run, rounded down to a multiple of ROUND sequences
    per pipeline stage (ASSUMED: furiosa-tcc searches minutes for odd row counts -- 124 s for a
    52-row 70B projection against 2 s for 48 -- so the table holds multiples of 8)."""
    tokens = p["n_in"] + (p["n_out"] if rule == "full" else p["n_out"] // 2)
    B = max_batch(p["cfg"], tokens, RNGD, "fp8", "bf16", p["cards"], "pipeline")
    step = ROUND * p["cards"]
    return max(B - B % step, step)


def mean_context(p: dict) -> int:
    return p["n_in"] + p["n_out"] // 2


def SHAPES() -> list[tuple]:
    """(model, phase, B, s) the prediction reads from the stored table (fp8, renegade-8pe)."""
    out = []
    for p in PUBLISHED:
        name = p["cfg"].name
        out.append((name, "prefill", 1, p["n_in"]))
        for rule in BATCH_RULES:
            for keys in (mean_context(p), KEYS_POW2):
                out.append((name, "decode", batch(p, rule) // p["cards"], keys))
    return out


@dataclass(frozen=True)
class Prediction:
    model: str
    reading: str
    B: int
    prefill_s: float       # all B prompts
    round_s: float         # one decode round: every sequence one token further
    uncounted_s: float     # of which: data movement outside the compiled kernels (whole run)
    tok_s: float
    published: float

    @property
    def ratio(self) -> float:
        return self.tok_s / self.published


def predict(p: dict, rule: str, handoff: str = "free", sampling: str = "on card",
            attention: str = ATTENTION[0], doc: dict | None = None) -> Prediction:
    cfg, P = p["cfg"], p["cards"]
    doc = doc or load()
    B, s = batch(p, rule), mean_context(p)
    m = B // P                                    # sequences per micro-batch (per stage in flight)
    layers = cfg.n_layers // P                    # one stage's layers (all of them on one card)
    kv_row = 2 * cfg.n_kv_heads * cfg.head_dim * 2          # new K and V of one token, one layer, bf16

    def moved(tokens: int, last: bool) -> float:
        """Seconds of one stage's data movement outside the kernels, for `tokens` tokens."""
        t = tokens * layers * kv_row / HBM_BW                    # KV rows written
        if P == 1 or last:
            t += tokens * 4 / PCIE_BW                            # token ids in
        if P == 1:
            t += tokens * cfg.hidden * 1 / HBM_BW                # embedding rows (fp8)
        if P > 1 and handoff == "via host PCIe":
            t += 2 * tokens * cfg.hidden * 2 / PCIE_BW           # card -> host -> next card
        return t

    # prefill: prompts one at a time through the pipeline ((B + P - 1) stage times)
    pre = step_cycles(cfg, "prefill", 1, p["n_in"], "fp8", TARGET, doc, layers=layers) / CLOCK_HZ
    pre_move = moved(p["n_in"], True)
    prefill_s = (B + P - 1) * (pre + pre_move)
    # decode: P micro-batches of m in flight; the busiest stage (with the LM head) sets the pace
    stage = step_cycles(cfg, "decode", m, s, "fp8", TARGET, doc, layers=layers) / CLOCK_HZ
    if attention != ATTENTION[0]:       # the attention ops compiled at 2048 keys, scaled to s keys
        at = {r["op"]: r["cycles"] for r in rows(cfg, "decode", m, s, "fp8", TARGET, doc)}
        at2 = {r["op"]: r["cycles"] for r in rows(cfg, "decode", m, KEYS_POW2, "fp8", TARGET, doc)}
        stage += layers * sum(at2[o] * s / KEYS_POW2 - at[o] for o in ATTN_OPS) / CLOCK_HZ
    out = 4 if sampling == "on card" else cfg.vocab * 2          # per sequence: an id, or its logits
    dec_move = moved(m, True) + m * out / PCIE_BW
    round_s = P * (stage + dec_move)
    total = prefill_s + (p["n_out"] - 1) * round_s
    uncounted = (B + P - 1) * pre_move + (p["n_out"] - 1) * P * dec_move
    reading = (f"batch {rule}, sampling {sampling}, attention {attention}"
               + (f", hand-off {handoff}" if P > 1 else ""))
    return Prediction(p["model"], reading, B, prefill_s, round_s, uncounted, B * p["n_out"] / total, p["tok_s"])


def readings(p: dict, doc: dict | None = None) -> list[Prediction]:
    doc = doc or load()
    hand = HANDOFF if p["cards"] > 1 else ("free",)
    return [predict(p, r, h, smp, att, doc)
            for r, h, smp, att in itertools.product(BATCH_RULES, hand, SAMPLING, ATTENTION)]


def ranges(doc: dict | None = None) -> list[dict]:
    """Per published figure: the predicted range over the readings and whether the figure is in it."""
    doc = doc or load()
    out = []
    for p in PUBLISHED:
        rs = readings(p, doc)
        sp = spread((r.tok_s for r in rs), p["tok_s"])            # llamanb.platform.calibration.Spread
        out.append(dict(model=p["model"], cards=p["cards"], n_in=p["n_in"], n_out=p["n_out"], published=p["tok_s"],
                        low=sp.low, high=sp.high, inside=sp.inside, readings=rs))
    return out

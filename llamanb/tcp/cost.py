"""A roofline cost model of the TCP program on Furiosa RNGD, from published specifications.

Every number below is an ESTIMATE from specifications, not a measurement: no RNGD was used.

    RNGD            the card's numbers, each with its source (and how far to trust it)
    op_costs        per op of a program: FLOPs, HBM bytes, DM bytes, time, bound, engine
    step_time       one prefill or decode step, summed over ops (+ all-reduces for tensor parallel)
    workload        B requests of n_in prompt tokens generating n_out tokens: TTFT, tok/s
    PUBLISHED       Furiosa's published throughput, to compare with

The model (what it assumes, stated once):
  * An op takes max(FLOPs / peak, HBM bytes / HBM bandwidth, DM bytes / DM bandwidth): compute and
    data movement overlap inside an op, not across ops; step time is the sum over ops.
  * Weights and the KV cache live in HBM and are read once per step (a model of 8 GB does not fit
    in 256 MB of SRAM). Activations stay in on-chip DM when each tensor fits in half of it; a bigger
    one is written to HBM and read back (the chapter's prefill scores [B, h_q, s_in, s_in] at
    2048 tokens do not fit: the program has no FlashAttention-style tiling).
  * Peak FLOP/s follows the weight format (bf16 256 T, fp8 512 T); the KV cache and activations
    are bf16 unless told otherwise. Vector ops are charged their DM traffic.
  * Tensor parallel over n cards (Megatron-style): heads, F and V split n ways, norms and residuals
    replicated, one all-reduce of [B, s_in, D] after o_proj and after down_proj in every layer over
    an ASSUMED link (PCIe Gen5 x16, 64 GB/s per direction, 10 us per all-reduce; not published
    for RNGD-to-RNGD traffic).
What it cannot see: achieved vs peak efficiency, how Furiosa's compiler tiles and fuses ops,
scheduling (continuous batching mixes prefill with decode), host overhead, power capping.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import LLAMA3_70B, LLAMA31_8B, LlamaConfig
from ..errors import LlamanbError
from .program import dims, program

BYTES = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0}


@dataclass(frozen=True)
class Spec:
    name: str
    peak: dict                 # FLOP/s per weight format
    hbm_bw: float              # B/s
    hbm_bytes: float
    sram_bytes: float          # on-chip data memory (DM)
    dm_bw: float               # B/s, DM <-> engines (secondary source)
    clock_hz: float
    link_bw: float             # B/s per direction between cards (ASSUMED)
    link_latency_s: float      # per all-reduce (ASSUMED)
    sources: dict

    @property
    def ridge(self) -> dict:
        """FLOP per HBM byte where compute time equals HBM time, per format."""
        return {f: p / self.hbm_bw for f, p in self.peak.items()}


RNGD = Spec(
    name="Furiosa RNGD (TCP)", peak={"bf16": 256e12, "fp8": 512e12}, hbm_bw=1.5e12, hbm_bytes=48e9,
    sram_bytes=256 * 2 ** 20, dm_bw=2e12, clock_hz=1.0e9, link_bw=64e9, link_latency_s=10e-6,
    sources={
        "peak": "developer.furiosa.ai RNGD overview: BF16 256 TFLOPS, FP8 512 TFLOPS",
        "hbm": "developer.furiosa.ai RNGD overview: HBM3 1.5 TB/s; 48 GB from Hot Chips 2024 coverage",
        "clock": "developer.furiosa.ai RNGD overview: 1.0 GHz",
        "sram": "secondary sources only: 256 MB = 2 clusters x 8 x 32 slices x 512 KB (512 slices)",
        "dm_bw": "secondary sources only: DM about 2 TB/s",
        "link": "ASSUMED: PCIe Gen5 x16, 64 GB/s per direction, 10 us per all-reduce",
    })

PUBLISHED = [
    dict(model="Llama 3.1 8B", cfg=LLAMA31_8B, cards=1, weights="fp8", n_in=128, n_out=4096, tok_s=3935.0,
         source="Furiosa's RNGD page (via secondary summaries); FP8; batch size not stated"),
    dict(model="Llama 3.1 70B", cfg=LLAMA3_70B, cards=8, weights="fp8", n_in=2048, n_out=128, tok_s=957.0,
         source="Furiosa's RNGD page (via secondary summaries); 8 cards; precision and batch not stated"),
]


@dataclass(frozen=True)
class OpCost:
    name: str
    engine: str
    times: int          # runs per step (L for layer ops)
    flops: float        # per step, all runs, one card
    hbm_bytes: float
    dm_bytes: float
    time_s: float
    bound: str          # "compute", "HBM", "DM", "link", or "none" (takes no time in this model)

    @property
    def intensity(self) -> float:
        """FLOP per HBM byte (inf when nothing crosses HBM)."""
        return self.flops / self.hbm_bytes if self.hbm_bytes else math.inf

    @property
    def busy_engine(self) -> str:
        """The engine the op's time is charged to: the one that binds."""
        return {"compute": "Contraction Engine", "HBM": "Tensor DMA (HBM)", "DM": "Vector Engine",
                "link": "inter-card link", "none": "none"}[self.bound]


def _check(name, v, minimum=1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise LlamanbError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def op_costs(cfg: LlamaConfig, phase: str, B: int, s_in: int, s: int | None = None, spec: Spec = RNGD,
             weights: str = "bf16", kv: str = "bf16", act: str = "bf16", cards: int = 1) -> list[OpCost]:
    """Per-op costs of one step on one card of `cards` (tensor parallel)."""
    if weights not in spec.peak:
        raise LlamanbError(f"weights must be one of {', '.join(spec.peak)}, got {weights!r}")
    for name, f in (("kv", kv), ("act", act)):
        if f not in BYTES:
            raise LlamanbError(f"{name} format must be one of {', '.join(BYTES)}, got {f!r}")
    n = _check("cards", cards)
    if cfg.n_heads % n or cfg.ffn % n:
        raise LlamanbError(f"{cfg.name}: {n} cards do not split {cfg.n_heads} heads and F = {cfg.ffn} evenly")
    if phase == "decode" and s_in != 1:
        raise LlamanbError("decode is one new row per sequence: s_in = 1")
    d = dims(cfg, B, s_in, s)
    if phase == "prefill" and d["s"] != s_in:
        raise LlamanbError("prefill starts from an empty cache: s = s_in")
    prog = program(cfg, phase)
    card = dict(d, h_q=d["h_q"] // n, h_kv=max(d["h_kv"] // n, 1), F=d["F"] // n)  # one card's share
    peak, wb, kb, ab = spec.peak[weights], BYTES[weights], BYTES[kv], BYTES[act]
    fits = spec.sram_bytes / 2

    def numel(axes, dd=card):
        return math.prod(dd[a] for a in axes)

    out = []
    for op, times in prog.ops():
        hd = card if op.name != "lm_head" else dict(d, V=math.ceil(d["V"] / n))
        flops = times * op.flops(hd)
        hbm = dm = 0.0
        if op.kind == "gather":
            hbm = times * numel(op.out_axes, hd) * (wb if op.name == "embed" else 4.0)
        elif op.kind == "store":
            hbm = times * numel(op.arg_axes[0], hd) * kb
        elif op.kind in ("einsum", "vector"):
            for a, ax in zip(op.args, op.arg_axes):
                size = numel(ax, hd)
                if a.startswith("w_") and op.kind == "einsum":
                    hbm += times * size * wb
                elif a.startswith("kv_cache"):
                    hbm += times * size * kb
                elif a.startswith("w_"):
                    dm += times * size * ab               # a norm's [D] weight
                elif size * ab > fits:                    # a spilled activation is read back
                    hbm += times * size * ab
                else:
                    dm += times * size * ab
            res = numel(op.out_axes, hd) * ab
            if res > fits:
                hbm += times * res
            else:
                dm += times * res
        t = {"compute": flops / peak, "HBM": hbm / spec.hbm_bw,
             "DM": dm / spec.dm_bw if op.kind == "vector" else 0.0}
        bound = max(t, key=t.get) if any(t.values()) else "none"     # views, the host's sampling
        out.append(OpCost(op.name, op.engine, times, flops, hbm, dm, t.get(bound, 0.0), bound))
        if n > 1 and op.name in ("o_proj", "down_proj"):            # Megatron all-reduce
            nbytes = numel(("B", "s_in", "D"), d) * ab
            tl = times * (2 * (n - 1) / n * nbytes / spec.link_bw + spec.link_latency_s)
            out.append(OpCost(f"all_reduce({op.name})", "inter-card link + Vector Engine (chip reduce)",
                              times, 0.0, 0.0, 0.0, tl, "link"))
    return out


def step_time(costs: list[OpCost]) -> float:
    return sum(c.time_s for c in costs)


def weight_bytes_per_card(cfg: LlamaConfig, weights: str = "bf16", cards: int = 1) -> float:
    """HBM each card holds for weights: the split matrices / cards, norms and embedding table whole."""
    p = cfg.param_breakdown()
    split = sum(v for k, v in p.items() if k.endswith("proj") or k == "lm_head")
    return (split / cards + p["embedding"] + p["attn_norm"] + p["ffn_norm"] + p["final_norm"]) * BYTES[weights]


def kv_bytes_per_card(cfg: LlamaConfig, tokens: int, kv: str = "bf16", cards: int = 1) -> float:
    return 2 * cfg.n_layers * max(cfg.n_kv_heads // cards, 1) * cfg.head_dim * tokens * BYTES[kv]


def max_batch(cfg: LlamaConfig, tokens: int, spec: Spec = RNGD, weights: str = "bf16", kv: str = "bf16",
              cards: int = 1) -> int:
    """Largest batch whose KV cache at `tokens` positions fits in HBM beside the weights."""
    free = spec.hbm_bytes - weight_bytes_per_card(cfg, weights, cards)
    return max(int(free // kv_bytes_per_card(cfg, tokens, kv, cards)), 0)


@dataclass(frozen=True)
class Workload:
    B: int
    ttft_s: float            # one prefill group: the first requests' time to first token
    prefill_s: float         # every request's prefill
    decode_s: float          # all n_out - 1 remaining decode steps
    tok_s: float             # output tokens per second, all requests
    step_s_first: float      # first and last decode step
    step_s_last: float


def workload(cfg: LlamaConfig, B: int, n_in: int, n_out: int, spec: Spec = RNGD, weights: str = "bf16",
             kv: str = "bf16", cards: int = 1, prefill_batch: int = 1, samples: int = 64) -> Workload:
    """B requests prefilled `prefill_batch` at a time, then decoded together until each has n_out
    tokens; tok/s counts output tokens. Decode step times are linear in the context between bound
    changes: their sum is the mean over `samples` evenly spaced context lengths times the steps."""
    B, n_in, n_out = _check("B", B), _check("n_in", n_in), _check("n_out", n_out)
    pb = min(_check("prefill_batch", prefill_batch), B)
    kw = dict(spec=spec, weights=weights, kv=kv, cards=cards)
    ttft = step_time(op_costs(cfg, "prefill", pb, n_in, **kw))
    pre = (B // pb) * ttft + (step_time(op_costs(cfg, "prefill", B % pb, n_in, **kw)) if B % pb else 0.0)
    steps = n_out - 1
    if steps == 0:
        return Workload(B, ttft, pre, 0.0, B * n_out / pre, 0.0, 0.0)
    ctx = np.unique(np.linspace(n_in + 2, n_in + n_out, min(samples, steps)).round().astype(int))
    times = [step_time(op_costs(cfg, "decode", B, 1, int(s), **kw)) for s in ctx]
    dec = float(np.mean(times)) * steps
    return Workload(B, ttft, pre, dec, B * n_out / (pre + dec), times[0], times[-1])


def engine_share(costs: list[OpCost]) -> dict[str, float]:
    """Fraction of the step each engine is the binding one."""
    total = step_time(costs)
    out: dict[str, float] = {}
    for c in costs:
        out[c.busy_engine] = out.get(c.busy_engine, 0.0) + c.time_s / total
    return out

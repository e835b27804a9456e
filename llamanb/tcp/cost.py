"""A roofline cost model of the TCP program on Furiosa RNGD, calibrated on one published figure.

Every number below is an ESTIMATE from specifications, not a measurement: no RNGD was used.

    RNGD            the card's numbers, each with its source
    Mapping         how the program is run: the chapter's reading (CHAPTER) or Furiosa's (furiosa())
    op_costs        per op of a program: FLOPs, HBM bytes, DM bytes, time, bound, engine
    step_time       one prefill or decode step, summed over ops
    workload        B requests of n_in prompt tokens generating n_out tokens: TTFT, tok/s
    PUBLISHED       Furiosa's published throughput: one figure calibrates, the others validate
    calibrate       the efficiency that reproduces the calibration figure (llamanb.platform.calibration.bisect)
    prediction_table  calibration and validation rows with their errors

The model (what it assumes, stated once):
  * An op takes max(FLOPs / (eta peak), HBM bytes / (eta HBM bandwidth), DM bytes / (eta DM
    bandwidth)): compute and data movement overlap inside an op, not across ops; the step is the
    sum over ops. eta = 1 is the plain roofline; furiosa() uses the calibrated eta, one number for
    every engine (the two published figures cannot pin more than one).
  * Weights and the KV cache live in HBM and are read once per step. Activations stay in DM when a
    tensor fits in half of it; a bigger one goes to HBM and back (the chapter's un-tiled prefill
    scores), unless the mapping keeps attention on chip (online softmax, as Furiosa's own decoder
    example does).
  * Peak FLOP/s follows the weight format (bf16 256 T, fp8 512 T); the KV cache and activations
    are bf16 unless told otherwise.
  * More than one card: "tensor" splits heads, F and V over the cards (Megatron) with two
    all-reduces of [B, s_in, D] per layer over a card-to-card link (its rate ASSUMED); "pipeline" gives each card L / cards
    layers and passes [B, s_in, D] to the next card once per step (a layout Furiosa-LLM's page allows:
    tensor parallelism over a card's 8 PEs, pipeline parallelism across cards; which one
    Furiosa's published runs used is not stated).
What it cannot see: how Furiosa's compiler tiles and schedules each op, overlap between ops,
continuous batching's mix of prefill and decode, host overhead, power capping, and the batch,
KV-cache format and scheduler settings Furiosa used (none is published).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from llamanb.platform import calibration as cal
from llamanb.model.config import LLAMA3_70B, LLAMA31_8B, LlamaConfig
from llamanb.errors import LlamanbError
from llamanb.tcp.program import dims, program

BYTES = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0}
BOOK = "furiosa-ai/furiosa-opt, docs/src/"          # Furiosa's TCP programming book, in its repository
OVERVIEW = "developer.furiosa.ai, Overview > FuriosaAI RNGD (hardware specification table)"


@dataclass(frozen=True)
class Spec:
    name: str
    peak: dict                 # FLOP/s per weight format
    hbm_bw: float              # B/s
    hbm_bytes: float
    sram_bytes: float          # on-chip data memory (DM)
    dm_bw: float               # B/s, DM <-> engines
    clock_hz: float
    slices: int                # DM slices, each with its own Tensor Unit pipeline
    lanes: int                 # Contraction Engine lanes per slice
    packet_bytes: int          # Contraction Engine packet per lane per cycle
    pes: int                   # processing elements per card (Furiosa-LLM's unit of parallelism)
    link_bw: float             # B/s between cards (ASSUMED: no Furiosa source gives one)
    link_latency_s: float      # per transfer (ASSUMED)
    op_overhead_s: float       # fixed start-up of one DMA command
    tdp_w: float
    ve_elems_s: float          # Vector Engine elements per second, all slices (float path)
    sources: dict

    @property
    def ridge(self) -> dict:
        """FLOP per HBM byte where compute time equals HBM time, per format."""
        return {f: p / self.hbm_bw for f, p in self.peak.items()}

    def contraction_peak(self, fmt: str) -> float:
        """FLOP/s the book's Contraction Engine geometry gives: slices x lanes x (packet / element
        bytes) multipliers, 2 FLOPs each, every cycle."""
        return self.slices * self.lanes * (self.packet_bytes / BYTES[fmt]) * 2 * self.clock_hz


RNGD = Spec(
    name="Furiosa RNGD (TCP)", peak={"bf16": 256e12, "fp8": 512e12}, hbm_bw=1.5e12, hbm_bytes=48e9,
    sram_bytes=256 * 2 ** 20, dm_bw=2e12, clock_hz=1.0e9, slices=512, lanes=8, packet_bytes=64, pes=8,
    link_bw=30e9, link_latency_s=10e-6, op_overhead_s=500 / 1.0e9, tdp_w=180.0,
    ve_elems_s=512 * 4 * 1.0e9,
    sources={
        "peak": f"{OVERVIEW}: BF16 256 TFLOPS, FP8 512 TFLOPS, 1.0 GHz",
        "hbm": f"{OVERVIEW}: HBM3 48 GB, 1.5 TB/s; {BOOK}moving-tensors/memory-performance.md: "
               "32 channels x 48 GB/s",
        "sram": f"{OVERVIEW}: on-chip SRAM 256 MB; {BOOK}moving-tensors/memory-performance.md: "
                "2 clusters x 8 DMNs x 32 slices x 512 KB",
        "dm_bw": f"{BOOK}moving-tensors/memory-performance.md: DM 2 TB/s per chip (16 DMNs x 128 B/cycle)",
        "geometry": f"{BOOK}computing-tensors/contraction-engine/index.md: 512 slices per chip, "
                    "Lane <= 8, Packet <= 64 B",
        "pes": "developer.furiosa.ai, Furiosa-LLM > Model Parallelism: 8 PEs per card; tensor parallel "
               "size 4 or 8, pipeline parallel size <= cards (2024.2 release)",
        "link": "ASSUMED 30 GB/s and 10 us per transfer between cards: no Furiosa source gives a "
                f"card-to-card rate. {BOOK}moving-tensors/dma-engine.md: PCIe DMA (30 B/cycle) moves host <-> "
                "HBM only; chip-to-chip transfers are Tensor DMA's, at no stated rate",
        "overhead": f"{BOOK}moving-tensors/dma-engine.md: about 500 cycles of start-up per DMA command",
        "tdp": "180 W: Furiosa's RNGD product page as summarised in 2025 (b-lab.team, 2025-04-20); "
               "earlier Furiosa material gave 150 W",
        "ve": f"{BOOK}computing-tensors/vector-engine/intra-slice-chain.md: one chain per slice, 8 elements "
              "per cycle, 4 on the float path: 512 slices x 4 x 1 GHz",
    })


@dataclass(frozen=True)
class Mapping:
    """How the program is run. The chapter's reading (CHAPTER) runs each op on its own at the full
    roofline; Furiosa's (furiosa()) fuses, keeps attention on chip and reaches eta of each roof."""
    name: str
    fused: bool = False              # Vector Engine ops ride a Contraction Engine op's output stream
    online_attention: bool = False   # score-shaped tensors never leave DM (online softmax, tiled)
    pes: int = 1                     # tensor parallel over a card's PEs (an on-chip all-reduce each)
    eta: float = 1.0                 # achieved fraction of every roofline
    overhead: bool = False           # each op pays one DMA command start-up

    def __post_init__(self):
        if not (0 < self.eta <= 1):
            raise LlamanbError(f"eta must be in (0, 1], got {self.eta!r}")
        if isinstance(self.pes, bool) or not isinstance(self.pes, int) or self.pes < 1:
            raise LlamanbError(f"pes must be an integer >= 1, got {self.pes!r}")


CHAPTER = Mapping("the chapter's program, op by op, at the roofline")
# Furiosa's mapping before calibration: everything furiosa() has except eta
FURIOSA_UNCALIBRATED = Mapping("Furiosa's mapping at the roofline", fused=True, online_attention=True,
                               pes=RNGD.pes, eta=1.0, overhead=True)

PUBLISHED = [
    dict(model="Llama 3.1 70B", cfg=LLAMA3_70B, cards=8, weights="fp8", n_in=2048, n_out=128, tok_s=957.05,
         role="calibration",
         source="Furiosa's RNGD product page (FuriosaSDK, FP8, 8 cards; batch not stated), as quoted by "
                "b-lab.team's RNGD summary of 2025-04-20"),
    dict(model="Llama 3.1 8B", cfg=LLAMA31_8B, cards=1, weights="fp8", n_in=128, n_out=4096, tok_s=3935.25,
         role="validation",
         source="the same table (FuriosaSDK, FP8, 1 card; batch not stated)"),
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
             weights: str = "bf16", kv: str = "bf16", act: str = "bf16", cards: int = 1,
             mapping: Mapping = CHAPTER) -> list[OpCost]:
    """Per-op costs of one step on one card of `cards` (tensor parallel across cards)."""
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
    eta = mapping.eta
    peak, wb, kb, ab = spec.peak[weights] * eta, BYTES[weights], BYTES[kv], BYTES[act]
    hbm_bw, dm_bw = spec.hbm_bw * eta, spec.dm_bw * eta
    fits = spec.sram_bytes / 2

    def numel(axes, dd=card):
        return math.prod(dd[a] for a in axes)

    def on_chip(axes, nbytes):
        scores = mapping.online_attention and "s_in" in axes and "s" in axes
        return scores or nbytes <= fits

    def reduce_op(label, engine, nbytes, bw, parts, times, bound):
        t = times * (2 * (parts - 1) / parts * nbytes / bw + (spec.link_latency_s if bound == "link" else 0.0))
        if mapping.overhead:
            t += times * spec.op_overhead_s
        return OpCost(label, engine, times, 0.0, 0.0, 0.0 if bound == "link" else times * 2 * nbytes, t, bound)

    out = []
    for op, times in prog.ops():
        hd = card if op.name != "lm_head" else dict(d, V=math.ceil(d["V"] / n))
        flops = times * op.flops(hd)
        hbm = dm = 0.0
        if op.kind == "gather":
            hbm = times * numel(op.out_axes, hd) * (wb if op.name == "embed" else 4.0)
        elif op.kind == "store":
            hbm = times * numel(op.arg_axes[0], hd) * kb
        elif op.kind == "vector" and mapping.fused:
            pass                                          # applied to the stream that produced it
        elif op.kind in ("einsum", "vector"):
            for a, ax in zip(op.args, op.arg_axes):
                size = numel(ax, hd)
                if a.startswith("w_") and op.kind == "einsum":
                    hbm += times * size * wb
                elif a.startswith("kv_cache"):
                    hbm += times * size * kb
                elif a.startswith("w_"):
                    dm += times * size * ab               # a norm's [D] weight
                elif not on_chip(ax, size * ab):          # a spilled activation is read back
                    hbm += times * size * ab
                else:
                    dm += times * size * ab
            res = numel(op.out_axes, hd) * ab
            if not on_chip(op.out_axes, res):
                hbm += times * res
            else:
                dm += times * res
        t = {"compute": flops / peak, "HBM": hbm / hbm_bw,
             "DM": dm / ab / 2 / (spec.ve_elems_s * eta) if op.kind == "vector" else 0.0}
        # a vector op streams each input element through its slice's chain once (dm counts bytes in
        # and out, hence / 2); it does not pass through the 2 TB/s DMN network
        bound = max(t, key=t.get) if any(t.values()) else "none"     # views, the host's sampling
        time_s = t.get(bound, 0.0)
        if mapping.overhead and time_s:
            time_s += times * spec.op_overhead_s
        out.append(OpCost(op.name, op.engine, times, flops, hbm, dm, time_s, bound))
        if op.name in ("o_proj", "down_proj"):
            nbytes = numel(("B", "s_in", "D"), d) * ab
            if mapping.pes > 1:                                      # the card's PEs sum partials
                out.append(reduce_op(f"pe_all_reduce({op.name})", "Tensor DMA + Vector Engine (on chip)",
                                     nbytes, dm_bw, mapping.pes, times, "DM"))
            if n > 1:                                                # Megatron all-reduce over cards
                out.append(reduce_op(f"all_reduce({op.name})", "inter-card link + Vector Engine (chip reduce)",
                                     nbytes, spec.link_bw, n, times, "link"))
    return out


def step_time(costs: list[OpCost]) -> float:
    return sum(c.time_s for c in costs)


PARALLEL = ("tensor", "pipeline")


def _split(cfg: LlamaConfig, cards: int, parallel: str) -> tuple[LlamaConfig, int, int]:
    """(the config one card runs, tensor-parallel cards, pipeline stages)."""
    if parallel not in PARALLEL:
        raise LlamanbError(f"parallel must be one of {', '.join(PARALLEL)}, got {parallel!r}")
    cards = _check("cards", cards)
    if parallel == "tensor" or cards == 1:
        return cfg, cards, 1
    if cards > cfg.n_layers:
        raise LlamanbError(f"{cfg.name}: {cards} pipeline stages for {cfg.n_layers} layers")
    return cfg.replace(n_layers=math.ceil(cfg.n_layers / cards)), 1, cards


def weight_bytes_per_card(cfg: LlamaConfig, weights: str = "bf16", cards: int = 1,
                          parallel: str = "tensor") -> float:
    """HBM each card holds for weights. Tensor: the split matrices / cards, norms and embedding
    whole. Pipeline: the busiest stage, its layers plus the embedding and the head."""
    one, tp, _ = _split(cfg, cards, parallel)
    p = one.param_breakdown()
    split = sum(v for k, v in p.items() if k.endswith("proj") or k == "lm_head")
    return (split / tp + p["embedding"] + p["attn_norm"] + p["ffn_norm"] + p["final_norm"]) * BYTES[weights]


def kv_bytes_per_card(cfg: LlamaConfig, tokens: int, kv: str = "bf16", cards: int = 1,
                      parallel: str = "tensor") -> float:
    """One sequence's K and V at `tokens` positions, on the card that holds the most of it."""
    one, tp, _ = _split(cfg, cards, parallel)
    return 2 * one.n_layers * max(one.n_kv_heads // tp, 1) * one.head_dim * tokens * BYTES[kv]


def max_batch(cfg: LlamaConfig, tokens: int, spec: Spec = RNGD, weights: str = "bf16", kv: str = "bf16",
              cards: int = 1, parallel: str = "tensor") -> int:
    """Largest batch whose KV cache at `tokens` positions fits in HBM beside the weights."""
    free = spec.hbm_bytes - weight_bytes_per_card(cfg, weights, cards, parallel)
    return max(int(free // kv_bytes_per_card(cfg, tokens, kv, cards, parallel)), 0)


@dataclass(frozen=True)
class Workload:
    B: int
    ttft_s: float            # one prefill group through every stage: the first requests' wait
    prefill_s: float         # every request's prefill
    decode_s: float          # all n_out - 1 remaining decode steps
    tok_s: float             # output tokens per second, all requests
    step_s_first: float      # first and last decode round (every sequence advances one token)
    step_s_last: float
    stages: int = 1          # pipeline stages (cards in "pipeline")
    micro_batch: int = 0     # sequences per micro-batch in decode


def workload(cfg: LlamaConfig, B: int, n_in: int, n_out: int, spec: Spec = RNGD, weights: str = "bf16",
             kv: str = "bf16", cards: int = 1, prefill_batch: int = 1, samples: int = 64,
             parallel: str = "tensor", mapping: Mapping = CHAPTER) -> Workload:
    """B requests prefilled `prefill_batch` at a time, then decoded together until each has n_out
    tokens; tok/s counts output tokens. Decode step times are linear in the context between bound
    changes: their sum is the mean over `samples` evenly spaced context lengths times the steps.

    Pipeline over P cards: P micro-batches of ceil(B / P) sequences are in flight, so a decode
    round (every sequence one token further) takes P stage times; prefill chunks follow each
    other one stage time apart after P - 1 stage times of filling. Each stage hands [b, s_in, D]
    to the next card over the link."""
    B, n_in, n_out = _check("B", B), _check("n_in", n_in), _check("n_out", n_out)
    pb = min(_check("prefill_batch", prefill_batch), B)
    one, tp, P = _split(cfg, cards, parallel)
    kw = dict(spec=spec, weights=weights, kv=kv, cards=tp, mapping=mapping)

    def stage(phase, nb, s_in, s=None):
        t = step_time(op_costs(one, phase, nb, s_in, s, **kw))
        if P > 1:
            t += nb * s_in * cfg.hidden * BYTES["bf16"] / spec.link_bw + spec.link_latency_s
        return t

    t_pre = stage("prefill", pb, n_in)
    ttft = P * t_pre
    pre = (B // pb + P - 1) * t_pre + (stage("prefill", B % pb, n_in) if B % pb else 0.0)
    b = math.ceil(B / P)
    steps = n_out - 1
    if steps == 0:
        return Workload(B, ttft, pre, 0.0, B * n_out / pre, 0.0, 0.0, P, b)
    ctx = np.unique(np.linspace(n_in + 2, n_in + n_out, min(samples, steps)).round().astype(int))
    times = [P * stage("decode", b, 1, int(s)) for s in ctx]
    dec = float(np.mean(times)) * steps
    return Workload(B, ttft, pre, dec, B * n_out / (pre + dec), times[0], times[-1], P, b)


def engine_share(costs: list[OpCost]) -> dict[str, float]:
    """Fraction of the step each engine is the binding one."""
    total = step_time(costs)
    out: dict[str, float] = {}
    for c in costs:
        out[c.busy_engine] = out.get(c.busy_engine, 0.0) + c.time_s / total
    return out


# ---- calibration on one published figure, prediction of the others ------------------------------
@dataclass(frozen=True)
class Assumptions:
    """What Furiosa did not publish, chosen once for every figure."""
    kv: str = "bf16"                 # KV-cache format
    parallel: str = "pipeline"       # across cards (Furiosa-LLM: tensor over PEs, pipeline over cards)
    batch: str = "paged"             # the largest batch whose KV cache fits beside the weights, each
                                     # sequence holding "paged": n_in + n_out / 2 positions (paged
                                     # blocks, requests at staggered positions: the mean occupancy)
                                     # or "full": n_in + n_out (every sequence at its longest at once)
    prefill_batch: int = 1
    samples: int = 16

    def __post_init__(self):
        if self.batch not in BATCH_RULES:
            raise LlamanbError(f"batch must be one of {', '.join(BATCH_RULES)}, got {self.batch!r}")


BATCH_RULES = ("paged", "full")
ASSUME = Assumptions()


def assumed_batch(p: dict, a: Assumptions = ASSUME, spec: Spec = RNGD) -> int:
    """The batch the assumptions give a published figure: memory-filling, a multiple of the stages."""
    tokens = p["n_in"] + (p["n_out"] // 2 if a.batch == "paged" else p["n_out"])
    B = max_batch(p["cfg"], tokens, spec, p["weights"], a.kv, p["cards"], a.parallel)
    stages = p["cards"] if a.parallel == "pipeline" else 1
    return max(B - B % stages, 1)


def estimate(p: dict, mapping: Mapping, B: int | None = None, a: Assumptions = ASSUME,
             spec: Spec = RNGD) -> Workload:
    """A published configuration under a mapping, at batch B (default: assumed_batch)."""
    B = assumed_batch(p, a, spec) if B is None else B
    return workload(p["cfg"], B, p["n_in"], p["n_out"], spec, p["weights"], a.kv, p["cards"], a.prefill_batch,
                    a.samples, a.parallel, mapping)


def calibrate(p: dict | None = None, a: Assumptions = ASSUME, spec: Spec = RNGD,
              base: Mapping = FURIOSA_UNCALIBRATED) -> float:
    """The eta at which `base` reproduces the calibration figure (bisection; tok/s rises with eta).
    Raises if even eta = 1 falls short."""
    p = p or next(q for q in PUBLISHED if q["role"] == "calibration")
    B = assumed_batch(p, a, spec)

    def rate(eta):
        return estimate(p, dataclasses.replace(base, eta=eta), B, a, spec).tok_s

    # tok/s rises with eta: halve [0.001, 1] until it is 1e-5 wide (llamanb.platform.calibration.bisect)
    _, hi = cal.bisect(rate, p["tok_s"], 1e-3, 1.0, increasing=True, tol=1e-5,
                       what=f"eta for {p['model']} at {p['tok_s']:,.0f} tok/s")
    return round(hi, 4)


@functools.lru_cache(maxsize=None)
def furiosa(a: Assumptions = ASSUME) -> Mapping:
    """Furiosa's mapping with eta calibrated on the calibration figure under assumptions `a`."""
    return dataclasses.replace(FURIOSA_UNCALIBRATED, name="Furiosa's mapping, calibrated", eta=calibrate(a=a))


def prediction_table(a: Assumptions = ASSUME) -> list[dict]:
    """One row per published figure: role, assumed batch, estimate under the calibrated mapping,
    error. Calibration rows come first; their error is zero by construction."""
    m = furiosa(a)
    rows = []
    for p in sorted(PUBLISHED, key=lambda q: q["role"] != "calibration"):
        B = assumed_batch(p, a)
        w = estimate(p, m, B, a)
        rows.append(dict(role=p["role"], model=p["model"], cards=p["cards"], n_in=p["n_in"], n_out=p["n_out"],
                         B=B, published=p["tok_s"], estimate=w.tok_s, error=cal.rel_error(w.tok_s, p["tok_s"]),
                         ttft_s=w.ttft_s, round_s=(w.step_s_first + w.step_s_last) / 2))
    return rows


def checks(a: Assumptions = ASSUME) -> list[cal.Check]:
    """prediction_table as llamanb.platform.calibration.Check rows (output tok/s)."""
    src = {p["model"]: p["source"] for p in PUBLISHED}
    return [cal.Check(f"{r['model']}, {r['cards']} card(s), B = {r['B']}", r["published"], r["estimate"],
                      r["role"], "tok/s", src[r["model"]]) for r in prediction_table(a)]


def sensitivity(rel: float = 0.01) -> dict:
    """{input: {validation model: elasticity}}: the calibration figure moved by `rel`, eta
    re-calibrated (its 4-decimal rounding quantises the answer to about 0.01), the held-back
    figure predicted again."""
    calib = next(q for q in PUBLISHED if q["role"] == "calibration")

    def predict(values):
        eta = calibrate(dict(calib, tok_s=values[calib["model"]]))
        m = dataclasses.replace(FURIOSA_UNCALIBRATED, eta=eta)
        return {p["model"]: estimate(p, m).tok_s for p in PUBLISHED if p["role"] == "validation"}
    return cal.sensitivity(predict, {calib["model"]: calib["tok_s"]}, rel)

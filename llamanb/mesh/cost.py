"""Llama 3 70B on a Galaxy without the Galaxy: what each chip holds, what each layer sends, and
a latency model built from public hardware numbers. Everything here is an estimate, and says so.

Bytes per device follow the placement of llamanb.mesh.layers and the formats the demo uses
(tenstorrent/tt-metal, models/demos/llama3_70b_galaxy): bfloat8_b attention weights, W2 and KV
cache, bfloat4_b W1/W3, bfloat8_b collective buffers. Collective traffic is not typed in: the
plan below is executed by llamanb.mesh.ccl on an emulated mesh, with zero-filled arrays of each
device's real shape, and the bytes are read off its ledger.

The latency model, per step of the forward pass:
    compute = matmul FLOPs / (devices x block-float peak)
            + attention FLOPs / (devices that split it x bf16 peak)
    time = max(compute, bytes read from DRAM per device / DRAM bandwidth)
         + sum over collectives of (steps x hop latency + busiest-link bytes / (links x link bandwidth))
It cannot see: op dispatch and host overheads, synchronisation between chips, matmul efficiency
below peak, the overlap of collectives with compute, L1 (SRAM) residency of activations, and the
demo's own program configs. Comparing it with the published numbers shows how much those cost.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import BYTES_PER_PARAM, LlamaConfig
from ..flops import decode_flops, prefill_flops, total
from . import ccl
from .config import MeshConfig
from .device import EmulatedMesh, MeshTensor
from .layers import Placement


@dataclass(frozen=True)
class Chip:
    """One Wormhole chip and its Ethernet links, with where each number comes from."""
    peak_bfp8: float = 148e12     # FLOP/s, BLOCKFP8 -- Tenstorrent Wormhole n150 specifications
    peak_bf16: float = 74e12      # FLOP/s, FP16 -- same source
    dram_bw: float = 288e9        # B/s, 12 GB GDDR6 -- same source
    dram_bytes: float = 12e9
    link_bw: float = 23.5e9 / 2   # B/s per direction: half of the ~23.5 GB/s of tt-metal PR #9966's
                                  # bidirectional test on one Wormhole Ethernet link
    hop_latency: float = 0.655e-6  # s per hop: the same PR's ring-latency microbenchmark


WORMHOLE = Chip()

# The demo's formats (tt-metal models/demos/llama3_70b_galaxy); embedding and LM head: see notes.
DEMO_FORMATS = {"wqkv": "bfp8", "wo": "bfp8", "w1": "bfp4", "w3": "bfp4", "w2": "bfp8",
                "lm_head": "bfp8", "embed": "bf16", "kv": "bfp8", "wire": "bfp8"}


def weight_bytes_per_device(cfg: LlamaConfig, mesh: MeshConfig, formats: dict = DEMO_FORMATS) -> dict:
    """Bytes of each weight one device holds (every matrix is split over all devices; norms,
    a few KB, are left out)."""
    Placement.of(cfg, mesh)                       # refuses a split that does not fit
    n, L, H, F = mesh.n_devices, cfg.n_layers, cfg.hidden, cfg.ffn
    b = lambda k: BYTES_PER_PARAM[formats[k]]     # noqa: E731
    per = {
        "wqkv": L * H * (cfg.q_dim + 2 * cfg.kv_dim) * b("wqkv") / n,
        "wo": L * cfg.q_dim * H * b("wo") / n,
        "w1": L * H * F * b("w1") / n,
        "w3": L * H * F * b("w3") / n,
        "w2": L * F * H * b("w2") / n,
        "lm_head": cfg.vocab * H * b("lm_head") / n,
    }
    if not cfg.tie_embeddings:
        per["embed"] = cfg.vocab * H * b("embed") / n
    return per


def kv_bytes_per_device(cfg: LlamaConfig, mesh: MeshConfig, tokens: int, fmt: str = "bfp8") -> float:
    """K and V of `tokens` cached positions on one device: its N_kv/P heads, every layer. The
    devices along the hidden axis hold different users' caches (the demo splits the batch), so
    `tokens` counts the positions of the users one device serves."""
    pl = Placement.of(cfg, mesh)
    return 2 * cfg.n_layers * pl.kv_heads * tokens * cfg.head_dim * BYTES_PER_PARAM[fmt]


def collective_plan(cfg: LlamaConfig, mesh: MeshConfig, rows: int) -> list[tuple]:
    """One block's collectives, in the order llamanb.mesh.layers runs them:
    (op, label, cluster_axis, per-device input shape, dim)."""
    pl = Placement.of(cfg, mesh)
    ha, xa, d = mesh.head_axis, mesh.hidden_axis, cfg.head_dim
    return [
        ("all_gather", "norm stats", xa, (rows, 1), 1),
        ("all_reduce", "QKV", xa, (rows, (pl.heads + 2 * pl.kv_heads) * d), 1),
        ("all_reduce", "WO", ha, (rows, pl.hidden), 1),
        ("all_gather", "norm stats", xa, (rows, 1), 1),
        ("reduce_scatter", "FF1", xa, (rows, pl.ffn), 1),
        ("reduce_scatter", "FF3", xa, (rows, pl.ffn), 1),
        ("all_gather", "FF2 in", xa, (rows, pl.ffn // pl.Q), 1),
        ("all_reduce", "FF2", ha, (rows, pl.hidden), 1),
    ]


def sdpa_gather_plan(cfg: LlamaConfig, mesh: MeshConfig, rows: int) -> list[tuple]:
    """Long prompts (over 1024 tokens, batch 1): the demo splits attention's sequence over the
    devices of the hidden axis (ring-distributed SDPA, tt/llama_attention.py) and all-gathers the
    outputs along that axis before WO. The emulated layers do not (they compute attention once
    per head group); the cost model adds this gather."""
    pl = Placement.of(cfg, mesh)
    return [("all_gather", "SDPA out", mesh.hidden_axis, (rows // pl.Q, pl.heads * cfg.head_dim), 0)]


def layer_traffic(cfg: LlamaConfig, mesh: MeshConfig, rows: int, wire: str | None = "bfp8",
                  count_rows: int = 32, plan=None) -> list[ccl.Traffic]:
    """Run one block's collective plan on an emulated mesh and return the ledger. Every message
    is a block of whole rows, so traffic is linear in `rows`: the plan runs at `count_rows` rows
    (zeros) and the bytes are scaled by rows / count_rows."""
    m = EmulatedMesh(mesh)
    R, C = mesh.shape
    run_rows = min(rows, count_rows)
    plan = plan or collective_plan
    for op, label, axis, shape, dim in plan(cfg, mesh, run_rows):
        z = np.zeros(shape, dtype=np.float32)
        if op == "all_gather":
            t = MeshTensor(m, [[z] * C for _ in range(R)], {axis: dim})
            ccl.all_gather(t, dim, axis, wire=wire, label=label)
        elif op == "reduce_scatter":
            ccl.reduce_scatter(MeshTensor(m, [[z] * C for _ in range(R)], {}), dim, axis, wire, label)
        else:
            ccl.all_reduce(MeshTensor(m, [[z] * C for _ in range(R)], {}), axis, wire, label)
    scale = rows / run_rows
    for t in m.ledger:
        t.link_bytes = {k: v * scale for k, v in t.link_bytes.items()}
    return m.ledger


def ccl_seconds(traffic: list[ccl.Traffic], mesh: MeshConfig, chip: Chip = WORMHOLE) -> float:
    return sum(t.steps * chip.hop_latency + t.busiest / (mesh.num_links * chip.link_bw)
               for t in traffic)


@dataclass
class Estimate:
    what: str
    compute_s: float
    dram_s: float
    ccl_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.dram_s) + self.ccl_s


ATTENTION_OPS = ("attn_scores", "attn_values")


def _compute_s(flops: dict, mesh: MeshConfig, attn_devices: int, chip: Chip) -> float:
    """Weight matmuls at the block-float peak on every device; attention (bf16, as the demo's
    SDPA) on the devices that split it."""
    attn = sum(flops[k] for k in ATTENTION_OPS)
    return (total(flops) - attn) / (mesh.n_devices * chip.peak_bfp8) + attn / (attn_devices * chip.peak_bf16)


def prefill_estimate(cfg: LlamaConfig, mesh: MeshConfig, prompt: int, chunk: int = 2048,
                     chip: Chip = WORMHOLE, formats: dict = DEMO_FORMATS) -> Estimate:
    """Time to first token for one prompt, run in chunks of `chunk` rows (weights read once per
    chunk; attention of a later chunk reads the earlier ones from the cache). Attention is split
    by heads over the head axis; for prompts over 1024 tokens also by sequence over the hidden
    axis, followed by an all-gather of its output (the demo's ring-distributed SDPA)."""
    compute, dram, ccl_s, start = 0.0, 0.0, 0.0, 0
    weights = sum(weight_bytes_per_device(cfg, mesh, formats).values())
    per_chunk = {}                                 # traffic depends on the chunk's rows only
    while start < prompt:
        S = min(chunk, prompt - start)
        if S not in per_chunk:
            t = ccl_seconds(layer_traffic(cfg, mesh, S, formats["wire"]), mesh, chip)
            if prompt > 1024:
                t += ccl_seconds(layer_traffic(cfg, mesh, S, formats["wire"], plan=sdpa_gather_plan),
                                 mesh, chip)
            per_chunk[S] = cfg.n_layers * t
        ring_sdpa = prompt > 1024
        compute += _compute_s(prefill_flops(cfg, S, start=start), mesh,
                              mesh.n_devices if ring_sdpa else mesh.heads_split, chip)
        dram += weights + kv_bytes_per_device(cfg, mesh, start + S, formats["kv"])
        ccl_s += per_chunk[S]
        start += S
    return Estimate(f"prefill {prompt}", compute, dram / chip.dram_bw, ccl_s)


def decode_estimate(cfg: LlamaConfig, mesh: MeshConfig, batch: int, context: int,
                    chip: Chip = WORMHOLE, formats: dict = DEMO_FORMATS) -> Estimate:
    """One decode step for `batch` users, each with `context` cached tokens. The users are
    spread over the hidden axis's devices for attention (the demo's split)."""
    flops = decode_flops(cfg, context, batch)
    users_per_device = -(-batch // mesh.hidden_split)
    dram = (sum(weight_bytes_per_device(cfg, mesh, formats).values())
            + kv_bytes_per_device(cfg, mesh, users_per_device * (context + 1), formats["kv"]))
    ccl_s = cfg.n_layers * ccl_seconds(layer_traffic(cfg, mesh, batch, formats["wire"]), mesh, chip)
    attn_devices = mesh.heads_split * min(batch, mesh.hidden_split)
    return Estimate(f"decode batch {batch} context {context}",
                    _compute_s(flops, mesh, attn_devices, chip), dram / chip.dram_bw, ccl_s)

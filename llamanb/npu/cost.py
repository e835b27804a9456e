"""A cost model of NPU2 from published specifications only -- every number it prints is ESTIMATED.

The specifications (each from its original source):

    compute tiles      32 = 8 columns x 4 rows           mlir-aie's npu2 device model (Xilinx/mlir-aie,
                                                          AIETargetModel.h); llamanb.npu.array
    bf16 MACs/cycle    128 per tile                       AMD AM020 (AIE-ML architecture manual):
                                                          256 bfloat16 operations per tile per cycle
    clock              1.53 GHz                           derived: AMD's 50 TOPS (int8) for the Strix
                                                          NPU / (32 tiles x 1024 int8 ops/cycle)
    L1 / L2            64 KiB per tile / 512 KiB per mem tile   AM020 (and mlir-aie's device model)
    tile stream        32 bits per cycle per DMA channel  AM020 (AIE-ML stream interface)
    shim DMA           2 MM2S + 2 S2MM channels per column       AM020 (interface tiles)
    DDR                120 GB/s: LPDDR5X-7500 on a 128-bit bus   AMD's Ryzen AI 300 product specs
    dispatch           100 us per xrt.run                 the MLIR-AIR Llama guide (Xilinx/mlir-air,
                                                          programming_examples/llama32_1b)
    host <-> device    20 GB/s for buffer syncs           the same guide

The model of one launch:  max(compute, data)  where
    compute = FLOPs / (tiles x 2 x 128 x clock)                  (every MAC unit busy every cycle)
    data    = DDR bytes / min(DDR, streams x 4 B x clock)        (streams = reading tiles, at most
                                                                  2 per column)
and of one call (one xrt.run of a stitched ELF): dispatch + the sum over its launches + its host
syncs at the host<->device rate. FLOPs come from llamanb.flops (shapes), bytes from the argument
shapes; nothing is fitted to the published timings.

What a spec-only model cannot see: how close the bf16 matmul kernel gets to 128 MACs/cycle (the
vector unit's load slots, accumulator spills, loop prologues), DMA buffer-descriptor setup and
L2 bank conflicts, launch-to-launch reconfiguration inside one ELF, how the host's Python runtime
overlaps with the device, and host attention's real speed. Those are why prefill is predicted far
below the published time (llamanb.npu.cost.compare prints the errors).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..config import LlamaConfig
from ..errors import LlamanbError
from ..flops import decode_flops, layer_flops


@dataclass(frozen=True)
class NPU2Specs:
    tiles: int = 32
    columns: int = 8
    bf16_macs_per_cycle: int = 128
    clock_hz: float = 50e12 / (32 * 1024)
    l1_bytes: int = 64 * 1024
    l2_bytes: int = 512 * 1024
    stream_bytes_per_cycle: int = 4
    shim_read_channels_per_column: int = 2
    ddr_bytes_per_s: float = 7500e6 * 16
    dispatch_s: float = 100e-6
    host_sync_bytes_per_s: float = 20e9

    @property
    def peak_bf16_flops(self) -> float:
        return self.tiles * 2 * self.bf16_macs_per_cycle * self.clock_hz

    def read_bandwidth(self, reading_tiles: int) -> float:
        streams = min(max(1, reading_tiles), self.shim_read_channels_per_column * self.columns)
        return min(self.ddr_bytes_per_s, streams * self.stream_bytes_per_cycle * self.clock_hz)


SPECS = NPU2Specs()

# Published Llama-3.2-1B bf16 timings on NPU2 (the targets; never inputs of the model)
PUBLISHED = {
    "guide (docs/profile.md): prefill, 2048 tok": 1.27,
    "guide (docs/profile.md): decode per token": 0.092,
    "llms/README.md: TTFT, 2048 tok": 1.21,
    "llms/README.md: decode (12.2 tok/s)": 1 / 12.2,
    "3-launch o_gemv_ffn: decode per token": 0.078,
}


@dataclass(frozen=True)
class Launch:
    """One launch: FLOPs, DDR bytes read and written, tiles computing and tiles reading DDR."""
    name: str
    flops: int
    ddr_bytes: int
    tiles: int
    reading_tiles: int

    def seconds(self, s: NPU2Specs = SPECS) -> float:
        compute = self.flops / (min(self.tiles, s.tiles) * 2 * s.bf16_macs_per_cycle * s.clock_hz)
        return max(compute, self.ddr_bytes / s.read_bandwidth(self.reading_tiles))


@dataclass
class Call:
    """One NPU call (one xrt.run of one ELF) -- or a host step (host=True, no dispatch)."""
    name: str
    launches: list = field(default_factory=list)
    sync_bytes: int = 0              # host <-> device bytes synced around the call
    host: bool = False
    host_bytes: int = 0              # bytes a host step reads (at DDR rate)

    def seconds(self, s: NPU2Specs = SPECS) -> float:
        if self.host:
            return self.host_bytes / s.ddr_bytes_per_s
        return (s.dispatch_s + sum(l.seconds(s) for l in self.launches)
                + self.sync_bytes / s.host_sync_bytes_per_s)


def kernel_time(spec, s: NPU2Specs = SPECS) -> float:
    """Estimated seconds for one call of a built kernel spec (used by the emulated device).

    FLOPs from the argument shapes of the kernels whose work is a product (gemm, gemv, flash
    attention, by the builder's argument names); other kernels are charged their bytes only."""
    args = {a.name: a for a in spec.args}
    tiles = spec.herd[0] * spec.herd[1]
    flops = 0
    if {"a", "b", "c"} <= args.keys() and len(args["a"].shape) == 2:        # gemm
        (m, k), n = args["a"].shape, args["b"].shape[1]
        flops = 2 * m * k * n
    elif {"a", "x", "y"} <= args.keys() and len(args["a"].shape) == 2:      # gemv
        m, k = args["a"].shape
        flops = 2 * m * k
    elif {"q", "k", "v", "out"} <= args.keys():                              # flash attention
        S, qd = args["q"].shape
        causal = spec.params.get("causal", True)
        pairs = S * (S + 1) // 2 if causal else S * S
        flops = 4 * qd * pairs
        tiles = max(tiles, 16)
    ddr = sum(a.nbytes for a in spec.args if a.role != "intermediate")
    return Call(spec.name, [Launch(spec.name, flops, ddr, tiles, tiles)]).seconds(s)


# ---------------------------------------------------------------- Llama on NPU2, by group

def _b(*shape) -> int:
    n = 2
    for d in shape:
        n *= d
    return n


def prefill_calls(cfg: LlamaConfig, S: int) -> list[Call]:
    """The calls of one prefill at S tokens: per layer rms_gemms_rope, flash_attn, o_ffn; then
    lm_head_gemv for the last row. GEMMs on [8, 4] herds (32 tiles), FlashAttention on 16 tiles
    (4 Q tiles x 4 cascade stages), elementwise launches on [8, 1]."""
    H, F, qd, kvd, V = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim, cfg.vocab
    f = layer_flops(cfg, S)
    calls = []
    for _ in range(cfg.n_layers):
        calls.append(Call("rms_gemms_rope", [
            Launch("rmsnorm", 0, _b(S, H) * 2 + _b(H), 8, 8),
            Launch("q_gemm", f["q_proj"], _b(S, H) + _b(H, qd) + _b(S, qd), 32, 16),
            Launch("k_gemm", f["k_proj"], _b(S, H) + _b(H, kvd) + _b(S, kvd), 32, 16),
            Launch("v_gemm", f["v_proj"], _b(S, H) + _b(H, kvd) + _b(S, kvd), 32, 16),
            Launch("rope_q", 0, 3 * _b(S, qd), 8, 8),
            Launch("rope_k", 0, 3 * _b(S, kvd), 8, 8)], sync_bytes=_b(S, H) + _b(S, qd + 2 * kvd)))
        calls.append(Call("flash_attn", [
            Launch("flash_attn", f["attn_scores"] + f["attn_values"],
                   2 * _b(S, qd) + 2 * _b(S, kvd), 16, 16)], sync_bytes=2 * _b(S, qd)))
        calls.append(Call("o_ffn", [
            Launch("o_gemm", f["o_proj"], _b(S, qd) + _b(qd, H) + _b(S, H), 32, 16),
            Launch("add", 0, 3 * _b(S, H), 8, 8),
            Launch("rmsnorm", 0, 2 * _b(S, H) + _b(H), 8, 8),
            Launch("gate_gemm", f["gate_proj"], _b(S, H) + _b(H, F) + _b(S, F), 32, 16),
            Launch("up_gemm", f["up_proj"], _b(S, H) + _b(H, F) + _b(S, F), 32, 16),
            Launch("silu_mul", 0, 3 * _b(S, F), 8, 8),
            Launch("down_gemm", f["down_proj"], _b(S, F) + _b(F, H) + _b(S, H), 32, 16),
            Launch("add", 0, 3 * _b(S, H), 8, 8)], sync_bytes=_b(S, H)))
    calls.append(lm_head_call(cfg))
    return calls


def lm_head_call(cfg: LlamaConfig) -> Call:
    return Call("lm_head_gemv", [Launch("lm_head", 2 * cfg.hidden * cfg.vocab,
                                        _b(cfg.vocab, cfg.hidden) + _b(cfg.vocab), 8, 8)],
                sync_bytes=_b(cfg.hidden) + _b(cfg.vocab))


def decode_calls(cfg: LlamaConfig, context: int) -> list[Call]:
    """The calls of one decode token after `context` cached tokens: per layer rms_gemv_rope, host
    attention over the cache, o_gemv_ffn (3 launches: o, packed gate/up with silu, down); then
    lm_head_gemv. GEMVs on [8, 1] herds."""
    H, F, qd, kvd = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim
    f = decode_flops(cfg, context)
    L = cfg.n_layers
    calls = []
    for _ in range(L):
        calls.append(Call("rms_gemv_rope", [
            Launch("rmsnorm", 0, 2 * _b(H) + _b(H), 1, 1),
            Launch("q_gemv", f["q_proj"] // L, _b(qd, H), 8, 8),
            Launch("k_gemv", f["k_proj"] // L, _b(kvd, H), 8, 8),
            Launch("v_gemv", f["v_proj"] // L, _b(kvd, H), 8, 8),
            Launch("rope_q", 0, 3 * _b(qd), 1, 1),
            Launch("rope_k", 0, 3 * _b(kvd), 1, 1)], sync_bytes=_b(H) + _b(qd + 2 * kvd)))
        calls.append(Call("host_attention", host=True,
                          host_bytes=2 * (context + 1) * kvd * 4 + 2 * qd * 4))
        calls.append(Call("o_gemv_ffn", [
            Launch("o_gemv_add", f["o_proj"] // L, _b(H, qd), 8, 8),
            Launch("gate_up_gemv_silu", (f["gate_proj"] + f["up_proj"]) // L, _b(2 * F, H), 8, 8),
            Launch("down_gemv_add", f["down_proj"] // L, _b(H, F), 8, 8)],
            sync_bytes=_b(qd) + _b(H)))
    calls.append(lm_head_call(cfg))
    return calls


def total_seconds(calls, s: NPU2Specs = SPECS) -> float:
    return sum(c.seconds(s) for c in calls)


def profile(calls, s: NPU2Specs = SPECS) -> list[tuple[str, int, float, float]]:
    """(name, calls, estimated ms, share) per call name, largest first -- ESTIMATED."""
    acc: dict = {}
    for c in calls:
        n, t = acc.get(c.name, (0, 0.0))
        acc[c.name] = (n + (0 if c.host else 1), t + c.seconds(s))
    tot = sum(t for _, t in acc.values())
    rows = [(k, n, t * 1e3, t / tot) for k, (n, t) in acc.items()]
    return sorted(rows, key=lambda r: -r[2])


def profile_table(calls, title: str, s: NPU2Specs = SPECS) -> str:
    lines = [f"{title} (ESTIMATED by the spec-only cost model, not measured)",
             f"{'kernel':<18}{'calls':>6}{'est. ms':>10}{'share':>8}"]
    for name, n, ms, share in profile(calls, s):
        lines.append(f"{name:<18}{n:>6}{ms:>10.2f}{share:>8.1%}")
    lines.append(f"{'total':<18}{sum(r[1] for r in profile(calls, s)):>6}"
                 f"{total_seconds(calls, s) * 1e3:>10.2f}")
    return "\n".join(lines)


def predict(cfg: LlamaConfig, seq: int = 2048, s: NPU2Specs = SPECS) -> dict:
    """Estimated prefill seconds at `seq` tokens and decode seconds per token (context seq/2,
    the mean over a generation that fills the cache)."""
    if seq < 1:
        raise LlamanbError(f"seq must be >= 1, got {seq}")
    return {"prefill_s": total_seconds(prefill_calls(cfg, seq), s),
            "decode_s": total_seconds(decode_calls(cfg, seq // 2), s)}


def compare(cfg: LlamaConfig, seq: int = 2048, s: NPU2Specs = SPECS) -> list[tuple[str, float, float, float]]:
    """(published figure, published s, predicted s, relative error) for Llama-3.2-1B."""
    p = predict(cfg, seq, s)
    rows = []
    for label, pub in PUBLISHED.items():
        pred = p["prefill_s"] if ("prefill" in label or "TTFT" in label) else p["decode_s"]
        rows.append((label, pub, pred, pred / pub - 1))
    return rows

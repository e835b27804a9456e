"""A cost model of NPU2 from published specifications only -- every number it prints is ESTIMATED.

NPU2 (Strix, "XDNA 2") is built from AIE2P tiles (AMD calls the architecture AIE-ML v2, manual
AM027); its predecessor NPU1 (Phoenix) from AIE2 = AIE-ML (AM020). The specifications, each with
the generation it is a figure OF:

    compute tiles      32 = 8 columns x 4 rows    AIE2P   mlir-aie's npu2 device model
                                                          (AIETargetModel.h); llamanb.npu.array
    bf16 MACs/cycle    128 per tile               AIE2    AM020 (AIE-ML): 256 bf16 ops per tile
                                                          per cycle. AMD publishes no AIE2P bf16
                                                          rate that we found; on AIE2P upstream's
                                                          bf16 GEMM runs through the 8x8x8 matrix
                                                          unit as block-float bfp16 (mlir-air
                                                          kernel_registry/details/GEMV_bf16.md)
    clock              1.53 GHz                   AIE2P   derived: AMD's 50 TOPS (int8) for the
                                                          Strix NPU / (32 tiles x 1024 int8 ops per
                                                          cycle, twice AIE-ML's 512 in AM020 -- an
                                                          assumption, not a published AIE2P figure)
    => peak bf16       12.5 TFLOP/s               mixed   a sanity check, not a source: upstream
                                                          measures its bf16-in/fp32-out GEMM at
                                                          ~9.8 TFLOP/s (mlir-air matrix_multipli-
                                                          cation/bf16_in_fp32_out/README.md), 78 %
                                                          of this, and its bf16-out GEMMs at the
                                                          Llama-3.2-1B shapes at 5.6-7.2 TFLOP/s
                                                          (kernel_registry/details/
                                                          GEMM_bf16_in_bf16_out.md)
    L1 / L2            64 KiB per tile / 512 KiB per mem tile   both generations (AM020, AM027)
    tile stream        32 bits per cycle per DMA channel  AIE2    AM020; AIE2P's stream switch is
                                                          64-bit (AM027, UG1603): the model keeps
                                                          AIE2's 32 bits, a conservative choice
    shim DMA           2 MM2S + 2 S2MM channels per column       AM020 (interface tiles)
    DDR                120 GB/s: LPDDR5X-7500 on a 128-bit bus   AMD's Ryzen AI 300 product specs
    dispatch           100 us per xrt.run         the MLIR-AIR Llama guide (Xilinx/mlir-air,
                                                  programming_examples/llms/llama32_1b)
    host <-> device    20 GB/s for buffer syncs   the same guide

The model of one launch:  max(compute, data)  where
    compute = FLOPs / (tiles x 2 x 128 x clock)                  (every MAC unit busy every cycle)
    data    = DDR bytes / min(DDR, streams x 4 B x clock)        (streams = reading tiles, at most
                                                                  2 per column)
and of one call (one xrt.run of a stitched ELF): dispatch + the sum over its launches + its host
syncs at the host<->device rate. FLOPs come from llamanb.flops (shapes), bytes from the argument
shapes; nothing is fitted to the published timings. Tiles per launch are upstream's: GEMMs [8, 4]
= 32, FlashAttention 2 unrolled segments x a [4 Q tiles, 4 cascade stages] herd = 32 (the prefill
builder's num_q_tiles=4, num_cascade_stages=4 and attn_npu2_seqfirst.py's default
num_heads_per_unroll=2; the guide's "~16-24" undercounts), elementwise launches and GEMVs [8, 1].

Decode comes in the two designs upstream published, compared like with like: the guide's 8-launch
o_gemv_ffn (docs/profile.md: 92 ms/token) and the 3-launch one of commit 462bf133b (78 ms/token in
its message; llms/README.md's 12.2 tok/s is the same design at HEAD). The 3-launch model charges
its GEMVs the tiles upstream gives them: 16 (two per column) for O and down, 32 for gate/up.

What a spec-only model cannot see: how close the bf16 matmul kernel gets to its peak (the vector
unit's load slots, accumulator spills, loop prologues), DMA buffer-descriptor setup and L2 bank
conflicts, reconfiguration between launches inside one ELF, how the host's Python runtime
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

# Published Llama-3.2-1B bf16 timings on NPU2 (the targets; never inputs of the model), each with
# the design it was measured on: "prefill", or the decode FFN's launch count (8 or 3).
PUBLISHED = {
    "guide (docs/profile.md): prefill, 2048 tok": (1.27, "prefill"),
    "llms/README.md: TTFT, 2048 tok": (1.21, "prefill"),
    "guide (docs/profile.md): decode, 8-launch FFN": (0.092, 8),
    "commit 462bf133b: decode, 3-launch FFN": (0.078, 3),
    "llms/README.md: decode 12.2 tok/s, 3-launch FFN": (1 / 12.2, 3),
}

# Upstream's per-call profile of prefill (docs/profile.md, "Per-Kernel Timing"), seconds per call
PUBLISHED_KERNELS = {"o_ffn": 41.0e-3, "flash_attn": 21.6e-3, "rms_gemms_rope": 7.3e-3,
                     "lm_head_gemv": 13.6e-3}
# ... and of one decode token with the 8-launch o_gemv_ffn ("Per-Component Timing"), per call
PUBLISHED_DECODE_KERNELS = {"o_gemv_ffn": 3.6e-3, "rms_gemv_rope": 0.9e-3, "lm_head_gemv": 14e-3}


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
        tiles *= spec.tiles.get("heads_per_unroll", 1)          # the unrolled segments' herds
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
    lm_head_gemv for the last row. GEMMs on [8, 4] herds (32 tiles), FlashAttention on 32 tiles
    (2 unrolled segments x [4 Q tiles, 4 cascade stages]), elementwise launches on [8, 1]."""
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
                   2 * _b(S, qd) + 2 * _b(S, kvd), 32, 16)], sync_bytes=2 * _b(S, qd)))
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


def decode_calls(cfg: LlamaConfig, context: int, ffn_launches: int = 3) -> list[Call]:
    """The calls of one decode token after `context` cached tokens: per layer rms_gemv_rope, host
    attention over the cache, o_gemv_ffn; then lm_head_gemv. `ffn_launches` picks upstream's
    design of o_gemv_ffn: 8 (the guide's: O GEMV, add, RMSNorm, gate, up, SwiGLU, down, add, GEMVs
    on [8, 1]) or 3 (commit 462bf133b: O GEMV + add on 2 tiles per column = 16 tiles of which the
    8 upper ones stream the weights, RMSNorm + interleaved gate/up GEMV + SwiGLU cascading over
    [8, 4] = 32 tiles, down GEMV + add like the first)."""
    if ffn_launches not in (3, 8):
        raise LlamanbError(f"ffn_launches must be 3 or 8 (upstream's two designs), got {ffn_launches}")
    H, F, qd, kvd = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim
    f = decode_flops(cfg, context)
    L = cfg.n_layers
    if ffn_launches == 3:
        ffn = [Launch("o_gemv_add", f["o_proj"] // L, _b(H, qd) + 2 * _b(H), 16, 8),
               Launch("rms_gate_up_gemv_silu", (f["gate_proj"] + f["up_proj"]) // L,
                      _b(2 * F, H) + 2 * _b(H), 32, 16),
               Launch("down_gemv_add", f["down_proj"] // L, _b(H, F) + _b(F) + _b(H), 16, 8)]
    else:
        ffn = [Launch("o_gemv", f["o_proj"] // L, _b(H, qd), 8, 8),
               Launch("add", 0, 3 * _b(H), 8, 8),
               Launch("rmsnorm", 0, 3 * _b(H), 1, 1),
               Launch("gate_gemv", f["gate_proj"] // L, _b(F, H), 8, 8),
               Launch("up_gemv", f["up_proj"] // L, _b(F, H), 8, 8),
               Launch("silu_mul", 0, 3 * _b(F), 8, 8),
               Launch("down_gemv", f["down_proj"] // L, _b(H, F), 8, 8),
               Launch("add", 0, 3 * _b(H), 8, 8)]
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
        calls.append(Call("o_gemv_ffn", list(ffn), sync_bytes=_b(qd) + _b(H)))
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
    the mean over a generation that fills the cache) for both decode designs."""
    if seq < 1:
        raise LlamanbError(f"seq must be >= 1, got {seq}")
    return {"prefill_s": total_seconds(prefill_calls(cfg, seq), s),
            "decode_s": {n: total_seconds(decode_calls(cfg, seq // 2, n), s) for n in (8, 3)}}


def compare(cfg: LlamaConfig, seq: int = 2048, s: NPU2Specs = SPECS) -> list[tuple[str, float, float, float]]:
    """(published figure, published s, predicted s, relative error) for Llama-3.2-1B, each
    figure against the prediction for the design it was measured on."""
    p = predict(cfg, seq, s)
    rows = []
    for label, (pub, design) in PUBLISHED.items():
        pred = p["prefill_s"] if design == "prefill" else p["decode_s"][design]
        rows.append((label, pub, pred, pred / pub - 1))
    return rows


def compare_kernels(cfg: LlamaConfig, seq: int = 2048, s: NPU2Specs = SPECS) -> list[tuple]:
    """(call, published s per call, estimated s per call, published / estimated) for the prefill
    calls upstream's profile lists: where the spec-only model misses, kernel by kernel."""
    calls = prefill_calls(cfg, seq)
    rows = []
    for name, pub in PUBLISHED_KERNELS.items():
        est = next(c for c in calls if c.name == name).seconds(s)
        rows.append((name, pub, est, pub / est))
    return rows


def peak_seconds(call: Call, s: NPU2Specs = SPECS) -> float:
    """The call's FLOPs at the whole array's peak: the floor no schedule can beat."""
    return sum(l.flops for l in call.launches) / s.peak_bf16_flops

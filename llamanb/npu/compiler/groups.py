"""The production groups: a Llama layer (and the LM head) as a handful of stitched NPU modules.

    gs = layer_groups(config, seq=128)        # {name: Group}, prefill and decode
    gs["o_gemv_ffn"].launches                 # 8, read from the stitched module's text
    print(group_table(gs))                    # launches, arguments by role, herds per group

Following the MLIR-AIR Llama guide (Xilinx/mlir-air, programming_examples/llms/llama32_1b, its
docs/profile.md; at upstream HEAD the builders in llms/shared/builders make 7 / 1 / 12 launches for
prefill -- a large bf16 GEMM writes an f32 scratch and adds an on-chip cast launch -- and
6 / 3 / 8 for decode):
  prefill  rms_gemms_rope  RMSNorm, Q/K/V GEMMs, RoPE on Q and K                      (6 launches)
           flash_attn      causal GQA FlashAttention, alone (its compile is the slow one)
           o_ffn           O GEMM, residual add, RMSNorm, gate/up GEMMs, SwiGLU, down GEMM,
                           residual add                                                (8 launches)
  decode   rms_gemv_rope   the same first half with GEMVs                               (6 launches)
           o_gemv_ffn      the same second half with GEMVs                              (8 launches)
           o_gemv_ffn3     this course's 3-launch packing of the same members: [O GEMV, add],
                           [RMSNorm, ONE packed gate/up GEMV, SwiGLU], [down GEMV, add]
                           (NOT upstream's 3-launch design, which fuses different kernels)
           lm_head_gemv    the LM head as `lm_parts` GEMVs over row slices of the vocabulary
Decode attention over the cache and the final RMSNorm (one row) run on the host.

Inside one module an external kernel's declaration has one type, so a second L1 shape needs a
second symbol (the guide's mv_k8192.o): the down projection's K = ffn gets `matvec_bf16_k<ffn>`
and RoPE on the K heads gets `rope_halfsplit_bf16_kv`; every GEMV with the same K in a group shares
one tile_m (the largest that fits the L1 budget and divides every row count of that K).
o_gemv_ffn3 is THIS COURSE's packing of the same member kernels into 3 launches (several
members' herds share one launch via stitch(..., launches=...); gate and up are ONE GEMV over
w_gate_up [2*ffn, hidden], gate rows then up rows, whose output gu [2*ffn] the packed SwiGLU reads
as two halves). It is not upstream's design. Upstream's 3-launch o_gemv_ffn (Xilinx/mlir-air
462bf133b, now programming_examples/llms/shared/builders/o_gemv_ffn_multi.py; its commit message
reports decode 91 -> 78 ms/token) stitches three *different, fused* kernels, each its own device
configuration inside the one ELF: matvec_2tile_add (two tiles per column joined by a cascade, the
residual add done by the lower tile), matvec_swiglu_rms (RMSNorm inside a gate/up GEMV over
interleaved rows whose K-split cascades over an 8 x 4 herd, SwiGLU in the cascade tail) and
matvec_2tile_add again for down + add. Both designs are one xrt.run per layer; what upstream's
extra launches cost is reconfiguration between launches inside the ELF, not dispatches. The
backend runs the 8-launch o_gemv_ffn.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from math import gcd

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.builders import add, flash_attn, gemm, gemv, rmsnorm, rope, silu_and_mul
from llamanb.npu.compiler.builders.gemv import L1_A_BYTES
from llamanb.npu.compiler.plan import Plan, read_plan
from llamanb.npu.compiler.spec import KernelSpec
from llamanb.npu.compiler.stitch import Member, stitch

# mlir-air's XRTBackend options per group, as upstream compiles its groups (Xilinx/mlir-air,
# programming_examples/llms): the decode GEMV groups from shared/infra/backend_presets.py (GEMV
# K=2048 with ping-pong and shim-DMA tiling [16, 16], :39-50, :61-65; o_gemv_ffn without ping-pong
# because its K=8192 down projection does not fit L1 twice, :52-59), the prefill GEMM groups with
# tiling [2, 2] (llama32_1b/llama32_1b_prefill.py:67-76, :179-185), FlashAttention without
# ping-pong and tiling [1, 1] (llama32_1b_prefill.py:247-258, :282-288). llamanb.npu.compiler.compile adds
# output_format="elf", instance_name=<group>, target_device="npu2", omit_while_true_loop=False.
_GEMV_K2048 = {"omit_pingpong": "", "runtime_loop_tiling_sizes": [16, 16],
               "use_lock_race_condition_fix": False}
COMPILE_OPTIONS = {
    "rms_gemms_rope": {"runtime_loop_tiling_sizes": [2, 2]},
    "flash_attn": {"omit_pingpong": "all", "runtime_loop_tiling_sizes": [1, 1]},
    "o_ffn": {"runtime_loop_tiling_sizes": [2, 2]},
    "rms_gemv_rope": dict(_GEMV_K2048),
    "o_gemv_ffn": {**_GEMV_K2048, "omit_pingpong": "all"},
    "o_gemv_ffn3": {**_GEMV_K2048, "omit_pingpong": "all"},
    "lm_head_gemv": dict(_GEMV_K2048),
}

PREFILL = ("rms_gemms_rope", "flash_attn", "o_ffn")
DECODE = ("rms_gemv_rope", "o_gemv_ffn", "o_gemv_ffn3", "lm_head_gemv")


@dataclass(frozen=True)
class Group:
    name: str
    phase: str                       # "prefill" | "decode"
    spec: KernelSpec                 # the stitched module and its argument table
    members: tuple[Member, ...]

    @cached_property
    def plan(self) -> Plan:
        return read_plan(self.spec.text)

    @property
    def launch_runs(self) -> tuple[tuple[int, ...], ...]:
        """Member indices sharing each launch, as passed to stitch (one per member by default)."""
        return self.spec.params["launches"]

    @property
    def launches(self) -> int:
        return len(self.plan.launches)

    @property
    def herds(self) -> list[tuple[str, tuple[int, int], int]]:
        """(kernel op, herd size, tiles) per herd, in launch order, read from the text."""
        return [(h.op, h.size, h.tiles) for lp in self.plan.launches for h in lp.herds]

    def roles(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.spec.args:
            out[a.role] = out.get(a.role, 0) + 1
        return out


def _tile_m(ms, k: int, tiles: int = 8) -> int:
    """Largest tile_m within the L1 weight block dividing every m/tiles (one per K family)."""
    per = 0
    for m in ms:
        if m % tiles:
            raise LlamanbError(f"GEMV of {m} rows does not split over a herd of {tiles} tiles")
        per = gcd(per, m // tiles)
    cap = max(1, L1_A_BYTES // (2 * k))
    return max(t for t in range(1, min(per, cap) + 1) if per % t == 0)


def _herd_for(n: int, want=(8, 1)):
    return want if n % (want[0] * want[1]) == 0 else (1, 1)


def _with_options(spec: KernelSpec) -> KernelSpec:
    """The stitched group with its compile options, its L1 checked under them (double buffers
    unless ping-pong is omitted; llamanb.npu.compiler.array)."""
    from llamanb.npu.compiler.array import usage

    spec = replace(spec, backend=dict(COMPILE_OPTIONS[spec.name]))
    usage(spec)
    return spec


def decode_groups(cfg, lm_parts: int = 8) -> dict[str, Group]:
    H, F, qd, kvd = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim
    Nh, Nkv, d, eps = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rms_eps
    if cfg.vocab % lm_parts:
        raise LlamanbError(f"lm_parts={lm_parts} does not divide the vocabulary ({cfg.vocab})")
    t_h = _tile_m([qd, kvd, F], H)             # every GEMV with K = hidden in the layer
    t_q = _tile_m([H], qd)                     # the O projection (K = q_dim)
    t_f = _tile_m([H], F)                      # the down projection (K = ffn)
    if qd == H:
        t_h = t_q = _tile_m([qd, kvd, F, H], H)

    def gv(m, k, tile, kfam="", group="rms_gemv_rope"):
        kw = {} if not kfam else {"symbol": f"matvec_bf16_k{k}", "link_with": f"mv_k{k}.o"}
        pp = COMPILE_OPTIONS[group].get("omit_pingpong", "")      # the module's, not the kernel's
        return gemv(m, k, tile_m=tile, omit_pingpong=pp, **kw)

    norm = rmsnorm(1, H, eps, herd_xy=(1, 1), flat_out=True)
    first = [
        Member(norm, {"x": "x", "w": "attn_norm", "y": "xn"}, "norm"),
        Member(gv(qd, H, t_h), {"a": "wq", "x": "xn", "y": "q_pre"}, "q"),
        Member(gv(kvd, H, t_h), {"a": "wk", "x": "xn", "y": "k_pre"}, "k"),
        Member(gv(kvd, H, t_h), {"a": "wv", "x": "xn", "y": "v"}, "v"),
        Member(rope(1, Nh, d, herd_xy=(1, 1), flat=True),
               {"x": "q_pre", "lut": "lut_q", "y": "q"}, "rope_q"),
        Member(rope(1, Nkv, d, herd_xy=(1, 1), flat=True, symbol="rope_halfsplit_bf16_kv",
                    link_with="rope_kv.o"), {"x": "k_pre", "lut": "lut_k", "y": "k"}, "rope_k")]
    res = add(1, H, herd_xy=_herd_for(H), flat=(True, True, True))
    second = [
        Member(gv(H, qd, t_q, "" if qd == H else "q", "o_gemv_ffn"),
               {"a": "wo", "x": "attn", "y": "o"}, "o"),
        Member(res, {"a": "o", "b": "x", "out": "h"}, "res1"),
        Member(norm, {"x": "h", "w": "ffn_norm", "y": "hn"}, "norm"),
        Member(gv(F, H, t_h, group="o_gemv_ffn"), {"a": "w_gate", "x": "hn", "y": "g"}, "gate"),
        Member(gv(F, H, t_h, group="o_gemv_ffn"), {"a": "w_up", "x": "hn", "y": "u"}, "up"),
        Member(silu_and_mul(1, F, herd_xy=_herd_for(F), flat=True),
               {"gate": "g", "up": "u", "out": "act"}, "silu"),
        Member(gv(H, F, t_f, "ffn", "o_gemv_ffn"), {"a": "w_down", "x": "act", "y": "down"},
               "down"),
        Member(res, {"a": "down", "b": "h", "out": "out"}, "res2")]
    packed = [*second[:3],
              Member(gv(2 * F, H, t_h, group="o_gemv_ffn3"),
                     {"a": "w_gate_up", "x": "hn", "y": "gu"}, "gate_up"),
              Member(silu_and_mul(1, F, herd_xy=_herd_for(F), flat=True, packed=True),
                     {"gu": "gu", "out": "act"}, "silu"),
              *second[6:]]
    part = cfg.vocab // lm_parts
    t_v = _tile_m([part], H)
    head = [Member(gv(part, H, t_v, group="lm_head_gemv"), {"a": f"w_head{i}", "x": "xn", "y": f"logits{i}"},
                   f"part{i}") for i in range(lm_parts)]
    out = {}
    for name, members, runs in (("rms_gemv_rope", first, None), ("o_gemv_ffn", second, None),
                                ("o_gemv_ffn3", packed, [[0, 1], [2, 3, 4], [5, 6]]),
                                ("lm_head_gemv", head, None)):
        out[name] = Group(name, "decode", _with_options(stitch(name, members, launches=runs)),
                          tuple(members))
    return out


def prefill_groups(cfg, seq: int) -> dict[str, Group]:
    H, F, qd, kvd = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim
    Nh, Nkv, d, eps = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rms_eps
    first = [
        Member(rmsnorm(seq, H, eps), {"x": "x", "w": "attn_norm", "y": "xn"}, "norm"),
        Member(gemm(seq, H, qd), {"a": "xn", "b": "wq_t", "c": "q_pre"}, "q"),
        Member(gemm(seq, H, kvd), {"a": "xn", "b": "wk_t", "c": "k_pre"}, "k"),
        Member(gemm(seq, H, kvd), {"a": "xn", "b": "wv_t", "c": "v"}, "v"),
        Member(rope(seq, Nh, d), {"x": "q_pre", "lut": "lut_q", "y": "q"}, "rope_q"),
        Member(rope(seq, Nkv, d, symbol="rope_halfsplit_bf16_kv", link_with="rope_kv.o"),
               {"x": "k_pre", "lut": "lut_k", "y": "k"}, "rope_k")]
    fa = flash_attn(seq, Nh, Nkv, d)           # alone: its arguments keep the kernel's names
    attn = [Member(fa, {a.name: a.name for a in fa.args}, "fa")]
    res = add(seq, H, flat=(False, True, True))
    second = [
        Member(gemm(seq, qd, H), {"a": "attn", "b": "wo_t", "c": "o"}, "o"),
        Member(res, {"a": "o", "b": "x", "out": "h"}, "res1"),
        Member(rmsnorm(seq, H, eps), {"x": "h", "w": "ffn_norm", "y": "hn"}, "norm"),
        Member(gemm(seq, H, F), {"a": "hn", "b": "w_gate_t", "c": "g"}, "gate"),
        Member(gemm(seq, H, F), {"a": "hn", "b": "w_up_t", "c": "u"}, "up"),
        Member(silu_and_mul(seq, F), {"gate": "g", "up": "u", "out": "act"}, "silu"),
        Member(gemm(seq, F, H), {"a": "act", "b": "w_down_t", "c": "down"}, "down"),
        Member(res, {"a": "down", "b": "h", "out": "out"}, "res2")]
    out = {}
    for name, members in (("rms_gemms_rope", first), ("flash_attn", attn), ("o_ffn", second)):
        out[name] = Group(name, "prefill", _with_options(stitch(name, members)), tuple(members))
    return out


def layer_groups(cfg, seq: int = 128, lm_parts: int = 8) -> dict[str, Group]:
    """Every group of the layout: prefill at `seq` rows, decode at one row."""
    return {**prefill_groups(cfg, seq), **decode_groups(cfg, lm_parts)}


def _runs(items: list[str]) -> list[str]:
    """Consecutive equal items as one, counted: [a, b, b, b] -> [a, 3x b]."""
    out: list[str] = []
    for it in items:
        if out and out[-1][0] == it:
            out[-1][1] += 1
        else:
            out.append([it, 1])
    return [it if n == 1 else f"{n}x {it}" for it, n in out]


def group_table(groups: dict[str, Group], width: int = 120) -> str:
    """One row per group: phase, launches, arguments (by role), herds -- all read from the text.
    Herds in launch order, consecutive equal ones counted ("8x gemv 8x1"); a herd list longer than
    its column continues on the next line, so that every line fits `width` columns (a notebook's
    output column)."""
    rows = [("group", "phase", "launches", "args", "weight/input/interm./output", "herds")]
    for g in groups.values():
        r = g.roles()
        herds = ", ".join(_runs([f"{op} {x}x{y}" for op, (x, y), _ in g.herds]))
        rows.append((g.name, g.phase, str(g.launches), str(len(g.plan.args)),
                     "/".join(str(r.get(k, 0)) for k in ("weight", "input", "intermediate",
                                                          "output")), herds))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    indent = sum(w) + 2 * len(w)
    lines = []
    for r in rows:
        lead = "  ".join(c.ljust(x) for c, x in zip(r, w)) + "  "
        parts = r[-1].split(", ")
        line = lead + parts[0]
        for p in parts[1:]:
            if len(line) + 2 + len(p) > width:
                lines.append(line + ",")
                line = " " * indent + p
            else:
                line += ", " + p
        lines.append(line.rstrip())
    return "\n".join(lines)

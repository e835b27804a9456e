"""A run's profile in the shape of the MLIR-AIR Llama example's `docs/profile.md`: per group, its
calls, the bytes synced each way, and the host time split into BO write / run / BO read.

Three kinds of time, three columns, never added together:

    measured   what this machine spent, per call (KernelCache.load_and_run's own clock). On the
               emulated NPU2 that is the host emulating the device; on a real NPU2 it is the
               XRT call, with the device's run inside "run".
    estimated  the calibrated NPU2 cost model's time for the same call (llamanb.npu.cost: five
               constants fitted to five published figures, the rest predicted).
    published  upstream's measured per-call time for Llama-3.2-1B bf16 on NPU2 (Strix), from
               Xilinx/mlir-air programming_examples/llms/llama32_1b/docs/profile.md: a different
               model's shapes, shown as the real machine's scale, not as a prediction.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

from llamanb.npu.cost import BY_KEY, CALIBRATION, PUBLISHED_DECODE_KERNELS, PUBLISHED_KERNELS

# Llama-3.2-1B bf16 on NPU2, milliseconds per call, from upstream's docs/profile.md (prefill at
# seq_len 2048; decode with the 8-launch o_gemv_ffn the emulated backend runs): llamanb.npu.cost.
PUBLISHED_MS = {**{("prefill", k): 1e3 * v for k, v in PUBLISHED_KERNELS.items()},
                **{("decode", k): 1e3 * v for k, v in PUBLISHED_DECODE_KERNELS.items()}}
# The same page's prefill sum over its 49 XRT calls, ms: BO write / NPU run / BO read.
PUBLISHED_PREFILL_SPLIT_MS = (46.0, 1062.0, 5.0)
SOURCE = "Xilinx/mlir-air programming_examples/llms/llama32_1b/docs/profile.md"


@dataclass(frozen=True)
class GroupRow:
    phase: str
    group: str
    calls: int
    bytes_to: int            # per call
    bytes_from: int          # per call
    write_ms: float          # measured, per call
    run_ms: float
    read_ms: float
    estimated_ms: float      # cost model, per call
    published_ms: float | None

    @property
    def measured_ms(self) -> float:
        return self.write_ms + self.run_ms + self.read_ms


def rows(phase: str, counters) -> list[GroupRow]:
    """One row per group in a Counters delta (e.g. a prefill's, or a decode's summed over tokens)."""
    out = []
    for name, (n, to_b, from_b, w, r, rd) in counters.per_call.items():
        est = counters.per_kernel.get(name, (n, 0.0))[1]
        out.append(GroupRow(phase, name, n, to_b // n, from_b // n, 1e3 * w / n, 1e3 * r / n,
                            1e3 * rd / n, 1e3 * est / n, PUBLISHED_MS.get((phase, name))))
    return out


def derived_bytes(spec, cfg, rows: int) -> tuple[int, int]:
    """(bytes written to the device, bytes read back) per call of a group, from its arguments'
    roles (llamanb.npu.compiler.spec.Arg) and the model config alone -- not from the runtime's
    index sets, so that it checks what KernelCache counted:

        to    every "input" argument (the activation, new each call), plus the RoPE tables of a
              group that calls the RoPE kernel: role "weight" because they are a table, but they
              hold this call's positions, so they travel every call: `rows` positions x
              (N_h + N_kv) heads x d_h bf16 values (cos | sin of d_h / 2 angles per head);
        from  every "output" argument.

    Weights are preloaded once and intermediates never leave the device, so neither counts. This
    is the steady state: the first call on a buffer set also writes its intermediates' initial
    zeros, once (KernelCache.load_and_run)."""
    to = sum(a.nbytes for a in spec.args if a.role == "input")
    if any(e.startswith("rope") for e in spec.externs):
        to += rows * (cfg.n_heads + cfg.n_kv_heads) * cfg.head_dim * 2
    return to, sum(a.nbytes for a in spec.args if a.role == "output")


def _ms(v: float | None) -> str:
    return "--" if v is None else f"{v:.2f}"


def _caption(width: int, *kinds: str) -> list[str]:
    """A table's caption, "per call, ms." and then one line per kind of time, each wrapped (at a
    space, indented under its name) to the table's own width, so that the caption never runs
    wider than the table it describes (a notebook's column holds about 120 characters)."""
    lines = ["per call, ms."]
    for kind in kinds:
        lines += textwrap.wrap(kind, width, initial_indent="  ", subsequent_indent=" " * 13,
                               break_long_words=False, break_on_hyphens=False)
    return lines


def table(groups: list[GroupRow], measured_what: str) -> str:
    """The profile table. `measured_what` says what the measured columns timed."""
    head = (f"{'phase':<8}{'group':<16}{'calls':>6}{'B to/call':>11}{'B from/call':>12} | "
            f"{'write':>7}{'run':>8}{'read':>7}{'measured':>9} | {'estimated':>9} | {'published':>9}")
    lines = [*_caption(len(head), f"measured: {measured_what}", "estimated: NPU2 cost model (calibrated)",
                       f"published: Llama-3.2-1B on NPU2 ({SOURCE})"), head, "-" * len(head)]
    for g in groups:
        lines.append(f"{g.phase:<8}{g.group:<16}{g.calls:>6}{g.bytes_to:>11,}{g.bytes_from:>12,} | "
                     f"{g.write_ms:>7.2f}{g.run_ms:>8.2f}{g.read_ms:>7.2f}{g.measured_ms:>9.2f} | "
                     f"{g.estimated_ms:>9.3f} | {_ms(g.published_ms):>9}")
    return "\n".join(lines)


def spec_rows(cfg, seq: int, context: int) -> list[GroupRow]:
    """Llama-shaped rows from the cost model alone (nothing runs): its calls for a prefill at
    `seq` and a decode token after `context` cached positions; bytes are the host->device writes
    of each call. No measured time exists for these rows (NaN)."""
    from llamanb.npu.cost import decode_calls, prefill_calls

    out = []
    for phase, calls in (("prefill", prefill_calls(cfg, seq)),
                         ("decode", decode_calls(cfg, context, ffn_launches=8))):
        acc: dict = {}
        for c in calls:
            if c.host:
                continue
            n, b, t = acc.get(c.name, (0, 0, 0.0))
            acc[c.name] = (n + 1, b + c.write_bytes, t + c.seconds())
        for name, (n, b, t) in acc.items():
            nan = float("nan")
            out.append(GroupRow(phase, name, n, b // n, 0, nan, nan, nan, 1e3 * t / n,
                                PUBLISHED_MS.get((phase, name))))
    return out


# (phase, call) of the figures the cost model was calibrated on: their estimate equals the
# published figure by construction, so they check nothing
FITTED = {("prefill" if BY_KEY[k].design == "prefill" else "decode", BY_KEY[k].call)
          for k in CALIBRATION if BY_KEY[k].design in ("prefill", "decode8")}


def spec_table(groups: list[GroupRow]) -> str:
    head = (f"{'phase':<8}{'group':<16}{'calls':>6}{'write B/call':>13} | {'measured':>9} | "
            f"{'estimated':>9} | {'published':>9} | {'est/pub':>7} | {'role':<10}")
    lines = [*_caption(len(head), "measured: none (not run)", "estimated: the NPU2 cost model (calibrated "
                       "on the rows marked 'fitted', the others predicted)", f"published: {SOURCE}"),
             head, "-" * len(head)]
    for g in groups:
        ratio = "--" if g.published_ms is None else f"{g.estimated_ms / g.published_ms:.2f}"
        role = "fitted" if (g.phase, g.group) in FITTED else "predicted"
        lines.append(f"{g.phase:<8}{g.group:<16}{g.calls:>6}{g.bytes_to:>13,} | {'--':>9} | "
                     f"{g.estimated_ms:>9.2f} | {_ms(g.published_ms):>9} | {ratio:>7} | {role:<10}")
    return "\n".join(lines)

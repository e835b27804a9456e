"""Furiosa's real compiler on the Llama block: furiosa-tcc's cycle estimates and RNGD binaries.

    missing()          what this machine lacks (furiosa-tcc, furiosa-kernels, the cross compiler)
    kernels(cfg, ...)  the block's ops as TCL kernels for one step: name, kernel, axis sizes, runs
    evaluate(src, t)   furiosa-tcc --evaluate-tcl: the compiler's estimated cycles on target t
    compile_edf(...)   furiosa-tcc --output x.edf: a real RNGD binary, its size and the stages
    cycle_table(...)   every op of a step on each target, as rows (what data/tcp/ stores)

furiosa-tcc (PyPI, proprietary) is one native x86-64 binary; `--evaluate-tcl` needs no device and
no other tool; `--output` ends by calling `aarch64-linux-gnu-gcc` (Debian gcc-aarch64-linux-gnu).
Every number here is the COMPILER'S ESTIMATE, not a measurement on an RNGD.

The clock: furiosa-tcc 2026.4.0 embeds its NPU configurations (renegade.yaml ... renegade-8pe-8chip
.yaml, printed by `strings` on the binary), and each says `profiling_frequency_in_mhz: 1000`; RNGD's
specification table (developer.furiosa.ai, "FuriosaAI RNGD") gives the same 1.0 GHz. Cycles are
converted to time at CLOCK_HZ = 1e9.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from llamanb.model.config import LlamaConfig
from llamanb.errors import LlamanbError

CLOCK_HZ = 1.0e9
CLOCK_SOURCE = ("furiosa-tcc 2026.4.0's embedded npu configs (renegade*.yaml): profiling_frequency_in_mhz: "
                "1000; RNGD specification table (developer.furiosa.ai): 1.0 GHz")
TARGETS = ("renegade", "renegade-2pe", "renegade-4pe", "renegade-8pe", "renegade-8pe-2chip",
           "renegade-8pe-4chip", "renegade-8pe-8chip")
PES = {"renegade": 1, "renegade-2pe": 2, "renegade-4pe": 4}      # others: 8 PEs per chip
CROSS_CC = "aarch64-linux-gnu-gcc"
TIMEOUT_S = 600


def tcc_path() -> str | None:
    """furiosa-tcc: beside this Python (a venv's bin/, not always on PATH), else on PATH."""
    here = Path(sys.executable).parent / "furiosa-tcc"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("furiosa-tcc")


def has_kernels() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("furiosa.tcl") is not None
    except (ImportError, ValueError):
        return False


def missing(edf: bool = False) -> tuple[str, ...]:
    """What a compile lacks here (empty: ready). edf=True also asks for the cross compiler."""
    out = []
    if tcc_path() is None:
        out.append("furiosa-tcc (pip install furiosa-tcc)")
    if not has_kernels():
        out.append("furiosa-kernels (pip install --no-deps furiosa-kernels)")
    if edf and shutil.which(CROSS_CC) is None:
        out.append(f"{CROSS_CC} (apt-get install gcc-aarch64-linux-gnu) for the EDF stage")
    return tuple(out)


def require(edf: bool = False) -> str:
    m = missing(edf)
    if m:
        raise LlamanbError("the Furiosa compiler cannot run here, missing: " + "; ".join(m))
    return tcc_path()


def version() -> str:
    """furiosa-tcc's own version line, e.g. 'tcc v2026.4.0 (...), furiosa-compiler 2026.4.0 (...)'."""
    r = subprocess.run([require(), "--version"], capture_output=True, text=True, timeout=60)
    return r.stdout.strip()


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise LlamanbError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    return target


def _run(args: list[str], source: str, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([require(), *args], input=source, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LlamanbError(f"furiosa-tcc {' '.join(args)} ran past {timeout:.0f} s") from None


def _fail(r: subprocess.CompletedProcess, what: str) -> LlamanbError:
    lines = [ln for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()]
    return LlamanbError(f"furiosa-tcc {what} failed (exit {r.returncode}): "
                        + (lines[-1].strip()[:300] if lines else "no output"))


def evaluate(source: str, target: str, timeout: float = TIMEOUT_S) -> int:
    """The compiler's estimated cycles for one TCL kernel (`--evaluate-tcl`, last integer line)."""
    r = _run(["--target-npu", check_target(target), "--evaluate-tcl", "--stdin"], source, timeout)
    if r.returncode != 0:
        raise _fail(r, "--evaluate-tcl")
    for line in reversed(r.stdout.splitlines()):
        if line.strip().isdigit():
            return int(line.strip())
    raise LlamanbError("furiosa-tcc --evaluate-tcl printed no cycle count")


def schedule(source: str, target: str, timeout: float = TIMEOUT_S) -> tuple[int, list[dict]]:
    """The cycles and the schedule behind them (`--tcl-plot`): one entry per instruction with its
    engine context (DmaEngine: a Tensor DMA transfer HBM <-> DM; MainContext/SubContext: the Tensor
    Unit), its name and its [begin, end) cycles. It shows what the estimate contains."""
    import json

    with tempfile.TemporaryDirectory() as d:
        plot = Path(d) / "plot.json"
        r = _run(["--target-npu", check_target(target), "--evaluate-tcl", "--stdin", "--tcl-plot", str(plot)],
                 source, timeout)
        if r.returncode != 0 or not plot.exists():
            raise _fail(r, "--tcl-plot")
        doc = json.loads(plot.read_text())
    steps = []
    for ins in doc["instructions"]:
        if ins["lifetime"]["end"] > ins["lifetime"]["begin"]:
            name = next((ln.split(":", 1)[1].strip() for ln in ins["description"].splitlines()
                         if ln.startswith("name:")), "")
            steps.append(dict(context="+".join(ins["contexts"]), name=name, begin=ins["lifetime"]["begin"],
                              end=ins["lifetime"]["end"]))
    cycles = int([ln for ln in r.stdout.splitlines() if ln.strip().isdigit()][-1])
    return cycles, steps


@dataclass(frozen=True)
class Edf:
    path: Path
    size: int              # bytes
    stages: tuple          # (stage, seconds) as the compiler prints them
    seconds: float         # wall time of the whole compile


def compile_edf(source: str, target: str, out: Path, timeout: float = TIMEOUT_S) -> Edf:
    """furiosa-tcc --output OUT: an RNGD binary. Written to a temporary file, then renamed."""
    require(edf=True)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".edf", dir=out.parent)
    os.close(fd)
    src = Path(tmp).with_suffix(".tcl")
    try:
        src.write_text(source)
        t0 = time.perf_counter()
        r = _run(["--target-npu", check_target(target), "--output", tmp, str(src)], "", timeout)
        dt = time.perf_counter() - t0
        if r.returncode != 0 or os.path.getsize(tmp) == 0:
            raise _fail(r, "--output")
        os.replace(tmp, out)
    finally:
        for p in (tmp, src):
            if os.path.exists(p):
                os.unlink(p)
    return Edf(out, out.stat().st_size, parse_stages(r.stdout + r.stderr), dt)


def parse_stages(log: str) -> tuple:
    """('tcl to dfg', 0.008), ... from the compiler's '[i/n] ... Compiling from A to B' / 'Done in'."""
    stages, name = [], None
    for line in log.splitlines():
        if "Compiling from" in line:
            name = line.split("Compiling from", 1)[1].strip()
        elif line.startswith("Done in") and name:
            stages.append((name, float(line.split()[2].rstrip("s"))))
            name = None
    return tuple(stages)


# ---- the block as kernels ----------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    op: str                # the op's name in chapter 08's program (llamanb.tcp.program)
    function: str          # the TCL kernel (llamanb.tcp.tcl_kernels.FUNCTIONS)
    bindings: tuple        # ((axis, size), ...)
    times: int             # runs per step (L for layer ops)
    source: str            # Furiosa's module where the op's body comes from

    def tcl(self) -> str:
        from llamanb.tcp.tcl_kernels import tcl_source

        require()
        return tcl_source(self.function, dict(self.bindings))


FK = "furiosa.kernels.common."
SOURCES = {
    "rms_norm": FK + "rms_norm.rms_norm_bf16_naive", "einsum_rope_naive": FK + "naive.einsum_rope.einsum_rope_naive",
    "attn_softmax": FK + "softmax.softmax", "swiglu": FK + "activation.silu + " + FK + "math.binary_mul",
    "residual": FK + "math.binary_add",
}
PHASES = ("prefill", "decode")
WEIGHTS = ("bf16", "fp8")


def kernels(cfg: LlamaConfig, phase: str, B: int, s: int, weights: str = "bf16") -> list[Kernel]:
    """One step's ops as kernels. prefill: B sequences of s new tokens; decode: B sequences, one new
    token each, attending to s keys. Projections and the LM head take fp8 weights (and fp8
    activations, Furiosa's W8A8) when weights="fp8"; the KV cache and the rest stay bf16."""
    if phase not in PHASES:
        raise LlamanbError(f"phase must be one of {PHASES}, got {phase!r}")
    if weights not in WEIGHTS:
        raise LlamanbError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    for name, v in (("B", B), ("s", s)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise LlamanbError(f"{name} must be an integer >= 1, got {v!r}")
    D, H, K, E, F, V, L = (cfg.hidden, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn, cfg.vocab,
                           cfg.n_layers)
    I = s if phase == "prefill" else 1
    T = B * I
    w = "_fp8" if weights == "fp8" else ""
    dpe = FK + "contract." + ("einsum_dpe_typed" if w else "einsum_dpe")
    att = dict(B=B, K=K, G=H // K, I=I, S=s)
    rows = [
        ("attn_norm", "rms_norm", dict(T=T, D=D), L),
        ("q_proj", "head_proj" + w, dict(T=T, D=D, H=H, E=E), L),
        ("k_proj", "head_proj" + w, dict(T=T, D=D, H=K, E=E), L),
        ("v_proj", "head_proj" + w, dict(T=T, D=D, H=K, E=E), L),
        ("rope_q", "einsum_rope_naive", dict(I=T, H=H, Rx=2, Ry=2, Dhr=E // 2), L),
        ("rope_k", "einsum_rope_naive", dict(I=T, H=K, Rx=2, Ry=2, Dhr=E // 2), L),
        ("attn_scores", "attn_scores", dict(att, E=E), L),
        ("softmax", "attn_softmax", att, L),
        ("attn_values", "attn_values", dict(att, E=E), L),
        ("o_proj", "out_proj" + w, dict(T=T, H=H, E=E, D=D), L),
        ("attn_residual", "residual", dict(T=T, D=D), L),
        ("ffn_norm", "rms_norm", dict(T=T, D=D), L),
        ("gate_proj", "ffn_proj" + w, dict(T=T, D=D, F=F), L),
        ("up_proj", "ffn_proj" + w, dict(T=T, D=D, F=F), L),
        ("swiglu", "swiglu", dict(T=T, F=F), L),
        ("down_proj", "down_proj" + w, dict(T=T, F=F, D=D), L),
        ("ffn_residual", "residual", dict(T=T, D=D), L),
        ("final_norm", "rms_norm", dict(T=B, D=D), 1),          # the last row of each sequence
        ("lm_head", "lm_head" + w, dict(T=B, D=D, V=V), 1),
    ]
    return [Kernel(op, fn, tuple(sorted(b.items())), times, SOURCES.get(fn.removesuffix("_fp8"), dpe))
            for op, fn, b, times in rows]


def cycle_table(cfg: LlamaConfig, phase: str, B: int, s: int, targets=("renegade", "renegade-8pe"),
                weights: str = "bf16", log=None, seen: dict | None = None) -> list[dict]:
    """Compile every op of one step on each target: one row per op and target, with the compiler's
    cycles, or cycles None and `refused` (its one-line message) where it found no way to compile
    the kernel. Kernels that are the same TCL (k/v, gate/up, norms, residuals) are evaluated once;
    `seconds` is the wall time of that evaluation (a timing on the machine that built the table)."""
    rows, seen = [], ({} if seen is None else seen)      # seen: results shared across calls
    for k in kernels(cfg, phase, B, s, weights):
        src = None
        for t in targets:
            key = (k.function, k.bindings, t)
            if key not in seen:
                src = src or k.tcl()
                t0 = time.perf_counter()
                try:
                    seen[key] = (evaluate(src, t), time.perf_counter() - t0, None)
                except LlamanbError as e:                   # the compiler refused this shape: say so
                    seen[key] = (None, time.perf_counter() - t0, str(e))
                if log:
                    log(f"{cfg.name} {phase} B={B} s={s} {weights} {k.op:<13} {t:<18} "
                        f"{seen[key][0] if seen[key][2] is None else 'refused':>10} cycles ({seen[key][1]:.1f} s)")
            row = dict(model=cfg.name, phase=phase, B=B, s=s, weights=weights, op=k.op, function=k.function,
                       bindings=dict(k.bindings), times=k.times, target=t, cycles=seen[key][0], source=k.source,
                       seconds=round(seen[key][1], 1))
            if seen[key][2]:
                row["refused"] = seen[key][2]
            rows.append(row)
    return rows

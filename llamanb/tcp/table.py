"""The stored per-op cycle table: what furiosa-tcc said about every op of the block, per step shape.

    GRID       the step shapes stored (model, phase, B, s, weights, targets)
    build(p)   recompile the whole grid and write data/tcp/cycles.json (temp file, then rename)
    load()     the stored table: {"compiler": version line, "command": ..., "clock_hz", "rows": [...]}
    rows(...)  the stored rows of one step shape, one per op (and target)
    step_cycles(...)  one step on one target: sum over ops of cycles x runs

Regenerate with REGENERATE (below); it takes a few minutes on two cores. The chapter and the cost
model (llamanb.tcp.predict) read the stored file, so nothing slow runs at import or in the notebook.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from llamanb.model.config import LLAMA3_70B, LLAMA31_8B, SMOLLM2_135M, LlamaConfig
from llamanb.errors import LlamanbError

TABLE = Path(__file__).resolve().parents[2] / "data" / "tcp" / "cycles.json"
REGENERATE = "python -m llamanb tcp store"
MODELS = {c.name: c for c in (SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B)}
BOTH = ("renegade", "renegade-8pe")


def _grid(fp8_shapes) -> list[tuple]:
    """(cfg, phase, B, s, weights, targets). The chapter's table (bf16, 1 PE and 8 PE, prefill of
    one 2048-token prompt -- 128 for SmolLM2 -- and decode at 2048 keys), then the shapes the cost
    model reads (fp8 weights, 8 PEs): (model, phase, B, s) as llamanb.tcp.predict.SHAPES names
    them (passed in: the prediction reads this table, so the table does not import it)."""
    g = [(SMOLLM2_135M, "prefill", 1, 128, "bf16", BOTH), (SMOLLM2_135M, "decode", 1, 2048, "bf16", BOTH)]
    for c in (LLAMA31_8B, LLAMA3_70B):
        g += [(c, "prefill", 1, 2048, "bf16", BOTH), (c, "decode", 1, 2048, "bf16", BOTH)]
    g += [(MODELS[m], ph, B, s, "fp8", ("renegade-8pe",)) for m, ph, B, s in fp8_shapes]
    seen, out = set(), []
    for row in g:
        key = (row[0].name,) + row[1:5]
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def build(fp8_shapes, path: Path = TABLE, log=print, reuse: bool = False) -> Path:
    """Compile the grid (fp8_shapes: llamanb.tcp.predict.SHAPES()) and write the table. reuse=True keeps the cycles of kernels the stored
    table already holds for the same compiler version (same TCL: same answer) and compiles the rest."""
    from llamanb.tcp.compiler import CLOCK_HZ, CLOCK_SOURCE, cycle_table, version

    rows, seen, ver = [], {}, version()
    if reuse and Path(path).exists():              # rows the same compiler already evaluated
        old = load(path)
        if old["compiler"] == ver:
            for r in old["rows"]:
                key = (r["function"], tuple(sorted(r["bindings"].items())), r["target"])
                seen[key] = (r["cycles"], r.get("seconds", 0.0), r.get("refused"))
    for cfg, phase, B, s, w, targets in _grid(fp8_shapes):
        rows += cycle_table(cfg, phase, B, s, targets, w, log=log, seen=seen)
    doc = dict(compiler=ver, command=REGENERATE, clock_hz=CLOCK_HZ, clock_source=CLOCK_SOURCE,
               note="furiosa-tcc --evaluate-tcl estimates (cycles), one kernel per op, compiled on its own; "
                    "not measured on an RNGD", rows=rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=0)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def load(path: Path = TABLE) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise LlamanbError(f"the stored cycle table {path} is missing (it ships with the repository; "
                           f"regenerate it with `{REGENERATE}`)") from None


def rows(cfg: LlamaConfig | str, phase: str, B: int, s: int, weights: str = "bf16", target: str = "renegade-8pe",
         doc: dict | None = None) -> list[dict]:
    name = cfg if isinstance(cfg, str) else cfg.name
    doc = doc or load()
    out = [r for r in doc["rows"] if (r["model"], r["phase"], r["B"], r["s"], r["weights"], r["target"])
           == (name, phase, B, s, weights, target)]
    if not out:
        raise LlamanbError(f"no stored rows for {name} {phase} B={B} s={s} {weights} on {target}; "
                           f"regenerate the table with `{REGENERATE}`")
    return out


def step_cycles(cfg, phase, B, s, weights="bf16", target="renegade-8pe", doc=None, layers: int | None = None) -> int:
    """One step's cycles: every op's cycles x its runs (L for layer ops; `layers` overrides L, e.g.
    one pipeline stage's share). Ops run one after another: the compiler saw each kernel alone."""
    total = 0
    for r in rows(cfg, phase, B, s, weights, target, doc):
        if r["cycles"] is None:
            raise LlamanbError(f"{r['model']} {phase} B={B} s={s}: furiosa-tcc refused {r['op']} on {target} "
                               f"({r['refused']})")
        n = r["times"] if (layers is None or r["times"] == 1) else layers
        total += r["cycles"] * n
    return total

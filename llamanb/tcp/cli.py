"""`python -m llamanb tcp ...`: the Llama block compiled by Furiosa's furiosa-tcc.

    tcp compile [--preset NAME | --model PATH] [--phase prefill|decode] [--batch B] [--seq S]
                [--weights bf16|fp8] [--targets renegade,renegade-8pe] [--op NAME] [--edf DIR]
        every op of one step as a TCL kernel through `furiosa-tcc --evaluate-tcl`: the compiler's
        estimated cycles per target (and microseconds at its 1 GHz); with --edf, each distinct
        kernel also compiled to an RNGD binary DIR/<op>.edf (its size), or one line saying what
        is missing for that stage.
    tcp store [--out PATH] [--reuse]
        recompile the grid of data/tcp/cycles.json (llamanb.tcp.table) and write it.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from llamanb.errors import LlamanbError


def add_parser(sub, model_arg, positive_int) -> None:
    t = sub.add_parser("tcp", help="Furiosa TCP: compile the block's TCL kernels with furiosa-tcc")
    tsub = t.add_subparsers(dest="tcp_cmd", required=True, parser_class=type(t))
    c = tsub.add_parser("compile", help="per-op cycle estimates (and EDF binaries) from furiosa-tcc")
    model_arg(c)
    c.add_argument("--preset", default=None, help="a config preset (smollm2-135m, llama3.1-8b, llama3-70b, "
                   "...) instead of a model's own config; no weights needed")
    c.add_argument("--phase", default="decode", choices=("prefill", "decode"))
    c.add_argument("--batch", type=positive_int, default=1, help="sequences in the step")
    c.add_argument("--seq", type=positive_int, default=128, help="prefill: tokens per prompt; decode: keys")
    c.add_argument("--weights", default="bf16", choices=("bf16", "fp8"))
    c.add_argument("--targets", default="renegade,renegade-8pe",
                   help="comma-separated furiosa-tcc targets (renegade = 1 PE ... renegade-8pe-4chip)")
    c.add_argument("--op", default=None, help="only this op (q_proj, softmax, lm_head, ...)")
    c.add_argument("--edf", default=None, help="also compile each distinct kernel to DIR/<op>.edf")
    s = tsub.add_parser("store", help="recompile the stored cycle table (a few minutes)")
    s.add_argument("--out", default=None, help="where to write (default: data/tcp/cycles.json)")
    s.add_argument("--reuse", action="store_true", help="keep rows the stored table holds for this same "
                   "compiler version; compile only the rest")


def _config(a):
    from llamanb.model.config import PRESETS

    if a.preset:
        if a.preset not in PRESETS:
            raise LlamanbError(f"unknown preset {a.preset!r}; known: {', '.join(PRESETS)}")
        return PRESETS[a.preset]
    if a.model:
        from llamanb.io.store import load_model

        return load_model(a.model).config
    return PRESETS["smollm2-135m"]


def main(a) -> int:
    from llamanb.tcp import compiler

    if a.tcp_cmd == "store":
        from llamanb.tcp.predict import SHAPES
        from llamanb.tcp.table import TABLE, build

        compiler.require()
        path = build(SHAPES(), Path(a.out) if a.out else TABLE, log=lambda s: print(s, flush=True),
                     reuse=a.reuse)
        print(f"wrote {path}")
        return 0
    cfg = _config(a)
    targets = [compiler.check_target(t.strip()) for t in a.targets.split(",") if t.strip()]
    if not targets:
        raise LlamanbError("--targets is empty")
    ks = compiler.kernels(cfg, a.phase, a.batch, a.seq, a.weights)
    if a.op:
        ks = [k for k in ks if k.op == a.op]
        if not ks:
            raise LlamanbError(f"no op {a.op!r}; ops: {', '.join(k.op for k in compiler.kernels(cfg, 'decode', 1, 1))}")
    compiler.require()
    print(f"{compiler.version()} | {cfg.name} {a.phase} B={a.batch} s={a.seq} {a.weights} | estimates, "
          f"cycles at {compiler.CLOCK_HZ / 1e9:.0f} GHz", flush=True)
    print(f"{'op':<14} {'runs':>4} " + " ".join(f"{t:>20}" for t in targets) + "  kernel")
    total = dict.fromkeys(targets, 0)
    seen = {}
    for k in ks:
        src = k.tcl()
        cells = []
        for t in targets:
            key = (k.function, k.bindings, t)
            if key not in seen:
                seen[key] = compiler.evaluate(src, t)
            total[t] += seen[key] * k.times
            cells.append(f"{seen[key]:>10} ({seen[key] / compiler.CLOCK_HZ * 1e6:>6.1f} us)")
        print(f"{k.op:<14} {k.times:>4} " + " ".join(cells) + f"  {k.function} <- {k.source}", flush=True)
    print(f"{'step':<14} {'':>4} " + " ".join(f"{total[t] / compiler.CLOCK_HZ * 1e3:>17.3f} ms" for t in targets))
    if a.edf:
        miss = compiler.missing(edf=True)
        if miss:
            print("EDF not built, missing: " + "; ".join(miss))
            return 0
        done = {}
        for k in ks:
            key = (k.function, k.bindings)
            if key in done:
                print(f"EDF {k.op:<14} same kernel as {done[key]}")
                continue
            t0 = time.perf_counter()
            e = compiler.compile_edf(k.tcl(), targets[0], Path(a.edf) / f"{k.op}.edf")
            done[key] = k.op
            print(f"EDF {k.op:<14} {e.size:>9,} bytes  {len(e.stages)} stages  {time.perf_counter() - t0:5.1f} s"
                  f"  {e.path}", flush=True)
    return 0


if __name__ == "__main__":          # pragma: no cover
    sys.exit(main(None))

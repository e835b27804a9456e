"""`python -m llamanb bench --backend cpu[:DTYPE] --kernels DIR [DIR ...]`: the cpu engine's decode
on llamanb's own kernels (kernels/cpu) against the same engine on changed copies of them, in one
process, alternated: the A/B that a kernel change is judged by.

Why one process, alternated, and many short rounds: these VMs' memory bandwidth jumps every few
seconds (docs/performance.md), so two runs minutes apart, or two processes, differ by more than
most kernel changes do. In a round every variant prefills the bench's prompt
(runners.DECODE_CONTEXT tokens) into a fresh cache, then they decode `--decode-tokens` greedily
in turns of one token each, every turn in an order that rotates, and each one's decode time is
summed. The verdict is each round's ratio, the packaged kernels' time over the variant's (above
1: the variant is faster), as a median with its quartiles (report.spread, as the bench's own
ratios) over `--runs` rounds (default 61). An
A/A pair -- a plain copy of kernels/cpu as a variant -- shows how wide the machine's noise is.
And the bits: a variant must give the packaged kernels' logits exactly, at every step of every
round, or the table says where they first differ.

Every variant is its own Engine (its own packed weights), so a variant may change how the
panels are packed too."""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from llamanb.bench.report import show_and_save, spread
from llamanb.errors import LlamanbError

DEFAULT_ROUNDS = 61
PACKAGED = "packaged"


def run_ab(variants: dict[str, Callable[[], Callable[[], np.ndarray]]], rounds: int, steps: int,
           progress: Callable[[str], None] = lambda msg: None,
           clock: Callable[[], float] = time.perf_counter) -> dict:
    """Alternate `variants` over `rounds` rounds after one warm-up. variants[name]() starts a
    fresh sequence (not timed: a new cache and the prompt's prefill) and returns step(), which
    decodes one token and returns its logits; the first variant is the reference. In a round
    every variant starts a sequence, then each step s runs every variant once, in an order that
    rotates with the round and the step, so that all of them meet the same moment of the
    machine. Returns, per variant: its decode seconds per round, each round's ratio (the
    reference's seconds / its own) and the first place its logits differ from the reference's
    in the same round (None: nowhere)."""
    names = list(variants)
    out = {n: {"seconds": [], "ratios": [], "first_difference": None} for n in names}
    for r in range(rounds + 1):                         # round 0: the warm-up, not kept
        step = {n: variants[n]() for n in names}
        secs = dict.fromkeys(names, 0.0)
        logits = {n: [] for n in names}
        for s in range(steps):
            k = (r + s) % len(names)
            for n in names[k:] + names[:k]:
                t = clock()
                got = step[n]()
                secs[n] += clock() - t
                logits[n].append(np.array(got, copy=True).reshape(-1))
        if r == 0:
            continue
        ref = np.stack(logits[names[0]])
        for n in names:
            out[n]["seconds"].append(secs[n])
            out[n]["ratios"].append(secs[names[0]] / secs[n])
            mine = np.stack(logits[n])
            if out[n]["first_difference"] is None and not np.array_equal(mine, ref):
                bad = np.flatnonzero(np.any(mine != ref, axis=-1)) if mine.shape == ref.shape \
                    else np.array([0])
                out[n]["first_difference"] = {"round": r, "step": int(bad[0])}
        progress(f"round {r}/{rounds}: " + ", ".join(f"{n} {1e3 * secs[n]:.1f} ms" for n in names))
    return {"variants": out}


def check_dirs(dirs: list[str], packaged: Path) -> list[Path]:
    """Each --kernels DIR as a Path, or one line saying why it cannot be a variant: it must be a
    directory holding at least the sources the packaged kernels are built from."""
    from llamanb.platform.cxx_build import sources

    need = [p.name for p in sources(packaged)]
    out = []
    for d in dirs:
        p = Path(d).expanduser()
        if not p.is_dir():
            raise LlamanbError(f"--kernels {d}: not a directory (a changed copy of {packaged})")
        lacking = [n for n in need if not (p / n).is_file()]
        if lacking:
            raise LlamanbError(f"--kernels {d}: lacks {', '.join(lacking)} (a changed copy of "
                               f"{packaged} has every file of it)")
        out.append(p.resolve())
    return out


def shorten(name: str, width: int = 40) -> str:
    return name if len(name) <= width else "..." + name[-(width - 3):]


def report(res: dict) -> str:
    s = res["settings"]
    lines = [f"kernel A/B: {s['backend']} decode, {s['decode_tokens']} tokens after a "
             f"{s['prompt_tokens']}-token prompt, {s['rounds']} rounds alternated in one "
             f"process ({s['threads']} threads)",
             f"{'kernels':<40} {'ms/token':>9}   {'speed vs packaged: median [q1, q3]':<36} "
             "same bits"]
    for name, v in res["variants"].items():
        sp = spread(v["ratios"])
        q1, med, q3 = sp["q1"], sp["median"], sp["q3"]
        ms = 1e3 * statistics.median(v["seconds"]) / s["decode_tokens"]
        shown = f"{PACKAGED} ({res['dirs'][name]})" if name == PACKAGED else res["dirs"][name]
        diff = v["first_difference"]
        same = "yes" if diff is None else f"NO: from round {diff['round']}, step {diff['step']}"
        speed = "" if name == PACKAGED else f"{med:.3f}x [{q1:.3f}x, {q3:.3f}x]"
        lines.append(f"{shorten(shown):<40} {ms:>9.2f}   {speed:<36} {same}")
    lines.append("speed: each round's packaged seconds / the variant's (above 1: the variant is "
                 "faster); bits: every step's logits against the packaged kernels' in the same "
                 "round")
    return "\n".join(lines)


def main(args) -> int:
    """The A/B that `bench --kernels` runs (bench/cli.py hands it over)."""
    from llamanb.bench.runners import DECODE_CONTEXT, llamanb_backend, prompt_ids, refuse_emulated
    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.engine.engine import Engine
    from llamanb.io.store import load_model

    backend, options = llamanb_backend(args.backend or "")
    if backend != "cpu":
        raise LlamanbError("bench --kernels compares builds of the cpu kernels: use --backend cpu, "
                           "cpu:bf16 or cpu:q4_1")
    if args.batching:
        raise LlamanbError("bench --kernels and --batching measure different things: pass one")
    refuse_emulated(options.get("march") or "", "--backend")
    dirs = check_dirs(args.kernels, cpu_kernels.KERNELS_DIR)
    rounds, steps = args.runs or DEFAULT_ROUNDS, args.decode_tokens

    def progress(msg):
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    model = load_model(args.model)
    cfg = model.config
    if cfg.max_seq < DECODE_CONTEXT + steps + 1:
        raise LlamanbError(f"{cfg.name}: context {cfg.max_seq} is too short for "
                           f"{DECODE_CONTEXT} + {steps} tokens")
    ids = prompt_ids(model.tokenizer, DECODE_CONTEXT, cfg.vocab)
    where = {PACKAGED: cpu_kernels.KERNELS_DIR, **{str(d): d for d in dirs}}
    engines = {}
    for name, d in where.items():
        progress(f"loading the engine on {d}" + (" (building its kernels first where needed)"
                                                 if name != PACKAGED else ""))
        try:
            engines[name] = Engine(model, "cpu", kernels_dir=d, **options)
        except LlamanbError as e:                     # (its advice to use numpy is not for an A/B)
            why = str(e).removesuffix(" (use --backend numpy)")
            raise LlamanbError(f"--kernels {d}: {why}" if name != PACKAGED else str(e)) from None

    def sequence(eng):
        """A fresh sequence on eng: its prompt prefilled, then one greedy token per step()."""
        def start():
            cache = eng.new_cache(max_seq=len(ids) + steps + 1)
            logits = eng.prefill(np.asarray(ids), cache)
            last = [int(np.argmax(logits[-1] if logits.ndim > 1 else logits))]

            def step():
                logits = eng.decode(last[0], cache).reshape(-1)
                last[0] = int(np.argmax(logits))
                return logits
            return step
        return start

    got = run_ab({n: sequence(e) for n, e in engines.items()}, rounds, steps, progress)
    res = {"settings": {"backend": args.backend, "rounds": rounds, "decode_tokens": steps,
                        "prompt_tokens": len(ids), "threads": engines[PACKAGED].backend.k.threads,
                        "isa": engines[PACKAGED].backend.k.isa},
           "dirs": {n: str(d) for n, d in where.items()}, **got}
    show_and_save(report(res), res, args.json, progress)
    return 0

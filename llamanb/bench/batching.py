"""`python -m llamanb bench --batching`: one request at a time vs static vs continuous batching.

The workload: N requests, all queued at t = 0, with prompt and output lengths drawn from fixed
ranges (llamanb.serve.workload.mixed_workload: slices of the benchmark's English text; no stop
ids, so every request generates exactly its max_new_tokens whatever the tokens are). Three ways
to serve it, on one llamanb engine (numpy, float32, the default -- not batch-invariant -- rows:
prompt steps padded to the BLAS row multiple, decode-only steps unpadded):

    one at a time   llamanb.engine.generate for each request in turn (prefill, then GEMV decodes)
    static          BatchRunner(policy="static"): a batch of `slots` requests is admitted only
                    when the previous batch has finished, so it waits for its longest member
    continuous      BatchRunner: a finished request's slot is refilled in the next step
    continuous lof  the same with the queue ordered longest output first (order="longest-first",
                    SGLang's "lof" policy; llamanb.serve.scheduler), at 8 slots: the long
                    requests start first, so the drain is not one latecomer decoding alone

Throughput = generated tokens / wall seconds from the first step to the last token. Latency is
per request, from t = 0 (all arrived together) to its last token; time to first token likewise.
Rounds are interleaved (one at a time, then every slot count's static and continuous run),
round 0 is a warm-up, and the table shows medians of the timed rounds. The targets are decided
round by round, as between engines in `bench --backend cpu`: each round's continuous/8 over its
one-at-a-time (or static/8) is one paired sample, and a target is met when the samples' lower
quartile clears it over at least 7 rounds (fewer: undecided).
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from llamanb.bench.report import decide, rounds_text, verdict_text

SLOT_COUNTS = (1, 2, 4, 8, 16)
TARGETS = {"continuous / one at a time, 8 slots": 3.0, "continuous / static, 8 slots": 1.3,
           "continuous lof / one at a time, 8 slots": 3.0}
# the batched modes: (name in the table, BatchRunner policy, queue order)
MODES = {"static": ("static", "fifo"), "continuous": ("continuous", "fifo"),
         "continuous_lof": ("continuous", "longest-first")}


def _summary(tokens: int, seconds: float, lat: list[float], ttft: list[float]) -> dict:
    pct = lambda v, q: float(np.percentile(v, q))                          # noqa: E731
    return {"tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds,
            "latency_p50_s": pct(lat, 50), "latency_p90_s": pct(lat, 90),
            "ttft_p50_s": pct(ttft, 50), "ttft_p90_s": pct(ttft, 90)}


def one_at_a_time(engine, work) -> tuple[dict, list[list[int]]]:
    from llamanb.engine.generate import generate

    t0, lat, ttft, outs = time.perf_counter(), [], [], []
    prefill_s = decode_s = 0.0
    decode_steps = 0
    for prompt, k in work:
        r = generate(engine, prompt, k, stop_ids=())
        outs.append(r.ids)
        now = time.perf_counter()
        ttft.append(now - t0 - r.decode_s)
        lat.append(now - t0)
        prefill_s, decode_s, decode_steps = (prefill_s + r.prefill_s, decode_s + r.decode_s,
                                             decode_steps + r.decode_steps)
    out = _summary(sum(map(len, outs)), time.perf_counter() - t0, lat, ttft)
    out.update(prefill_s=prefill_s, decode_s=decode_s, decode_step_s=decode_s / max(1, decode_steps))
    return out, outs


def batched(engine, work, slots: int, policy: str, order: str = "fifo") -> tuple[dict, list[list[int]]]:
    """Also splits the run's time: steps that carry prompt rows, and decode-only steps (the
    median time of those that ran every slot, `full_decode_step_s`; NaN if none did)."""
    from llamanb.serve.runner import BatchRunner

    runner = BatchRunner(engine, slots=slots, block=16, kv_positions=16 * 1024, policy=policy,
                         order=order)
    reqs = [runner.add(p, k, stop_ids=()) for p, k in work]
    t0 = time.perf_counter()
    runner.run()
    out = _summary(sum(len(r.output) for r in reqs), time.perf_counter() - t0,
                   [r.t_finished - t0 for r in reqs], [r.t_first_token - t0 for r in reqs])
    hist = runner.history
    prompt = [any(kind == "prefill" for _, _, kind, _ in h.rows) for h in hist]
    full = [h.t1 - h.t0 for h, p in zip(hist, prompt) if not p and len(h.rows) == slots]
    out.update(steps=len(hist), mean_requests_per_step=float(np.mean([len(h.rows) for h in hist])),
               peak_kv_blocks=max(h.blocks_used for h in hist),
               prompt_steps_s=sum(h.t1 - h.t0 for h, p in zip(hist, prompt) if p),
               decode_rows_in_other_steps=sum(len(h.rows) for h, p in zip(hist, prompt) if not p),
               full_decode_step_s=statistics.median(full) if full else float("nan"))
    return out, [r.output for r in reqs]


def fewest_steps(lengths: list[int], slots: int) -> int:
    """The fewest steps any schedule can serve these requests in, when a request of k new tokens
    holds one of `slots` slots for k steps (its prompt step makes the first token, each later
    step one more) and runs to its end once started: the shortest way to pack the lengths into
    `slots` runs of back-to-back requests. Prompts too long for one step, or several admitted in
    one step past its token budget, only add steps. Exact, by branch and bound: longest first,
    each into every run that could still beat the best packing found (longest into the least
    loaded first, which is the longest-first schedule's packing)."""
    ks = sorted((int(k) for k in lengths), reverse=True)
    if not ks:
        return 0
    floor = max(ks[0], -(-sum(ks) // slots))      # a token a step per request, `slots` a step
    loads = [0] * slots
    best = sum(ks)

    def place(i: int) -> None:
        nonlocal best
        if i == len(ks):
            best = min(best, max(loads))
            return
        tried = set()
        for j in sorted(range(slots), key=loads.__getitem__):
            if loads[j] in tried or loads[j] + ks[i] >= best:
                continue                           # an equal run was tried; or no better
            tried.add(loads[j])
            loads[j] += ks[i]
            place(i + 1)
            loads[j] -= ks[i]
            if best == floor:
                return

    place(0)
    return best


def ceiling(one: dict, cont: dict, slots: int) -> float:
    """What continuous batching could reach over one-at-a-time if every decode-only step ran all
    `slots` rows, with this engine's prompt steps as measured: one-at-a-time's seconds over
    (prompt steps' seconds + decode rows outside them x a full step's seconds / slots). Ramp-up,
    drain and the partial steps between are what the measured ratio loses against it."""
    return one["seconds"] / (cont["prompt_steps_s"] + cont["decode_rows_in_other_steps"]
                             * cont["full_decode_step_s"] / slots)


def step_for(one: dict, cont: dict, slots: int, target: float) -> float | None:
    """The full decode step (seconds, `slots` rows) at which `ceiling` would equal `target`: what
    a multi-row step must cost for the target to be reachable at all with these prompt steps.
    None when the prompt steps alone take more than one-at-a-time's seconds over the target (no
    decode speed reaches it then)."""
    room = one["seconds"] / target - cont["prompt_steps_s"]
    rows = cont["decode_rows_in_other_steps"]
    if room <= 0:
        return None
    return room * slots / rows if rows else float("inf")


def measure(model_spec, runs: int, n_requests: int = 16, slot_counts=SLOT_COUNTS,
            progress=lambda m: None, backend: str = "numpy", **workload) -> dict:
    """workload: prompt_range / new_range for mixed_workload (tests use short ones). backend: a
    name, or "cpu:bf16" for a backend with a dtype (runners.llamanb_backend)."""
    from llamanb.io.store import load_model
    from llamanb.engine.engine import Engine
    from llamanb.serve.workload import mixed_workload
    from llamanb.bench.runners import PROMPT_TEXT, llamanb_backend

    model = load_model(model_spec)
    name, options = llamanb_backend(backend)
    engine = Engine(model, name, **options)
    unit = model.tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)
    work = mixed_workload(unit, n_requests, **workload)
    modes = [("one_at_a_time", 1)] + [(p, s) for s in slot_counts for p in ("static", "continuous")]
    if 8 in slot_counts:
        modes.insert(modes.index(("continuous", 8)) + 1, ("continuous_lof", 8))
    samples = {m: [] for m in modes}
    agree = {}
    for rnd in range(runs + 1):
        tag = "warm-up" if rnd == 0 else f"run {rnd}/{runs}"
        for mode in modes:
            if mode[0] == "one_at_a_time":
                res, outs = one_at_a_time(engine, work)
                ref = outs
            else:
                res, outs = batched(engine, work, mode[1], *MODES[mode[0]])
                agree[mode] = sum(a == b for a, b in zip(outs, ref))
            progress(f"  {tag} [{mode[0]}, {mode[1]} slots]: {res['tok_s']:.1f} tok/s")
            if rnd:
                samples[mode].append(res)
    table = {}
    for (policy, slots), rs in samples.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        med["same_tokens_as_one_at_a_time"] = agree.get((policy, slots), len(work))
        table[f"{policy}/{slots}"] = {"policy": policy, "slots": slots, **med,
                                      "samples_tok_s": [r["tok_s"] for r in rs]}
    ratios = []
    if 8 in slot_counts:
        # decided as bench --backend cpu decides between engines: a paired sample per round (the
        # modes of one round met the same state of the machine), met when the lower quartile
        # clears the target over at least MIN_ROUNDS rounds, undecided with fewer
        for name, mode, other in (
                ("continuous / one at a time, 8 slots", "continuous/8", "one_at_a_time/1"),
                ("continuous / static, 8 slots", "continuous/8", "static/8"),
                ("continuous lof / one at a time, 8 slots", "continuous_lof/8", "one_at_a_time/1")):
            ours = table[mode]["samples_tok_s"]
            ratios.append({"name": name, "target": TARGETS[name],
                           **decide([a / b for a, b in zip(ours, table[other]["samples_tok_s"])],
                                    TARGETS[name])})
        one, c8 = table["one_at_a_time/1"], table["continuous/8"]
        target = TARGETS["continuous / one at a time, 8 slots"]
        bound = {"ceiling": ceiling(one, c8, 8),
                 "step_for_target_s": step_for(one, c8, 8, target), "target": target,
                 "prefill_share_one_at_a_time": one["prefill_s"] / one["seconds"],
                 "decode_step_1_row_s": one["decode_step_s"],
                 "decode_step_8_rows_s": c8["full_decode_step_s"],
                 "steps_at_least": fewest_steps([k for _, k in work], 8),
                 "steps": {m: table[m]["steps"] for m in ("static/8", "continuous/8",
                                                         "continuous_lof/8")}}
    else:
        bound = None
    return {"workload": {"requests": len(work), "prompt_tokens": [len(p) for p, _ in work],
                         "max_new_tokens": [k for _, k in work]},
            "engine": f"{engine.backend.description}, {getattr(engine.backend, 'dtype', 'float32')}, not batch-invariant; prompt steps "
                      f"padded to {engine.backend.row_multiple} rows, decode-only steps unpadded",
            "runs": runs, "table": table, "ratios": ratios, "bound": bound}


def report(res: dict) -> str:
    w = res["workload"]
    lines = [f"batching: {w['requests']} requests queued at t = 0, prompts {min(w['prompt_tokens'])}-"
             f"{max(w['prompt_tokens'])} tokens, outputs {min(w['max_new_tokens'])}-"
             f"{max(w['max_new_tokens'])} tokens ({sum(w['max_new_tokens'])} in all); "
             f"{res['engine']}; medians of {res['runs']} runs after a warm-up", ""]
    head = (f"{'mode':<14} {'slots':>5} {'tok/s':>8} {'x 1-at-a-time':>14} {'latency p50':>12} "
            f"{'p90':>7} {'TTFT p50':>9} {'p90':>7} {'same tokens':>12}")
    lines += [head, "-" * len(head)]
    base = res["table"]["one_at_a_time/1"]["tok_s"]
    for row in res["table"].values():
        lines.append(f"{row['policy'].replace('_', ' '):<14} {row['slots']:>5} {row['tok_s']:>8.1f} "
                     f"{row['tok_s'] / base:>13.2f}x {row['latency_p50_s']:>11.1f}s "
                     f"{row['latency_p90_s']:>6.1f}s {row['ttft_p50_s']:>8.1f}s "
                     f"{row['ttft_p90_s']:>6.1f}s {row['same_tokens_as_one_at_a_time']:>7}/"
                     f"{w['requests']}")
    lines.append("")
    for r in res["ratios"]:
        lines.append(f"{r['name']:<40} {r['value']:>6.2f}x  target >= {r['target']:.1f}x "
                     f"{verdict_text(r)}{rounds_text(r.get('spread'))}")
    b = res.get("bound")
    if b:
        lines.append(f"where the time goes: prefill is {100 * b['prefill_share_one_at_a_time']:.0f} % of "
                     f"one-at-a-time; a decode step costs {1e3 * b['decode_step_1_row_s']:.1f} ms for one "
                     f"row and {1e3 * b['decode_step_8_rows_s']:.1f} ms for 8 "
                     f"({b['decode_step_8_rows_s'] / b['decode_step_1_row_s']:.2f}x the time for 8x the "
                     f"tokens); with every decode-only step full, continuous at 8 slots would reach "
                     f"{b['ceiling']:.2f}x one at a time")
        need = b["step_for_target_s"]
        lines.append(f"what {b['target']:.1f}x needs: " + (
            f"the prompt steps alone take more than 1/{b['target']:.1f} of one-at-a-time's "
            "time, so no decode step reaches it" if need is None else
            f"an 8-row decode step of at most {1e3 * need:.1f} ms "
            f"({need / b['decode_step_1_row_s']:.2f}x a one-row step), every decode-only "
            "step full, with these prompt steps"))
        lines.append("steps at 8 slots: " + ", ".join(f"{m.split('/')[0].replace('_', ' ')} {n:.0f}"
                                                      for m, n in b["steps"].items()) +
                     f"; no schedule takes fewer than {b['steps_at_least']} (the best packing "
                     "of the requests' tokens, one a step each, into 8 slots)")
    lines.append("same tokens: requests whose tokens equal one-at-a-time generation (rows in a "
                 "batch round differently from a lone GEMV decode unless the engine is "
                 "batch-invariant; `llamanb batch --check` checks identity with it)")
    return "\n".join(lines)


def main(args) -> int:
    from llamanb.bench.report import show_and_save

    def progress(msg):
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    progress("batching: one at a time vs static vs continuous, interleaved rounds")
    res = measure(args.model, args.runs, progress=progress,
                  backend=getattr(args, "backend", "numpy") or "numpy")
    show_and_save(report(res), {"batching": res}, args.json, progress)
    return 0

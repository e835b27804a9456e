"""The benchmark's table, its ratios against the targets, and its JSON file."""
from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path

from llamanb.bench.machine import ROUND_PROBE_REPEATS as ROUND_PROBES
from llamanb.bench.runners import DECODE_CONTEXT, PREFILL_LENS, label, split_march
from llamanb.errors import LlamanbError

# Speed targets for other backends, as a ratio to the numpy engine's decode in the same run: an
# emulated NPU2 must keep the course interactive.
BACKEND_DECODE_TARGETS = {"npu2-emulated": 0.5}


# The cpu backend against llama.cpp at the same precision, in the same run (issue 18's targets).
CPU_PEER = {"cpu": "llamacpp_f32", "cpu:bf16": "llamacpp_bf16", "cpu:q4_1": "llamacpp_q4_1",
            "cpu:auto": "llamacpp_file"}

# A cpu engine's decode against its own roofline (the bandwidth probe over the bytes it reads a
# token), at least this by precision (issue 45's targets): float32 and bfloat16 0.90, the
# quantised blocks 0.80 (q4_1, and auto: the file's own blocks, Q4_1 for the embedded model),
# whose unpacking and integer products leave less of a token's time to the memory.
ROOFLINE_TARGETS = {"cpu": 0.90, "cpu:bf16": 0.90, "cpu:q4_1": 0.80, "cpu:auto": 0.80}

# Peak RSS of a cpu engine against llama.cpp's at the same precision, packing included (issue
# 30): at most this. One reading per engine (VmHWM after its last round), so one ratio, no spread.
RSS_TARGET = 1.1

# A ratio between engines is decided per round: the rounds are interleaved (every engine runs once
# in each), so round r's two rates met the same state of a shared machine, and their ratio is one
# paired sample. A target counts as met only when the lower quartile of those samples clears it,
# and only over at least MIN_ROUNDS rounds; fewer leave it undecided. (A ratio of two medians can
# swing 15 % between runs of the same build on a cloud machine.)
MIN_ROUNDS = 7


def spread(values: list[float]) -> dict:
    """min, quartiles (statistics.quantiles, inclusive method) and max of paired ratio samples."""
    v = sorted(values)
    q1, q2, q3 = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else (v[0],) * 3
    return {"n": len(v), "min": v[0], "q1": q1, "median": q2, "q3": q3, "max": v[-1]}


def decide(samples: list[float], target: float | None) -> dict:
    """A ratio decided by its paired samples: value (their median), spread, and pass -- the lower
    quartile clears the target, None without a target or with fewer than MIN_ROUNDS samples."""
    sp = spread(samples)
    return {"value": sp["median"], "spread": sp,
            "pass": None if target is None or sp["n"] < MIN_ROUNDS else sp["q1"] >= target}


def rounds_text(sp: dict | None, unit: str = "x") -> str:
    """The paired samples' spread as printed after a ratio ("" without one)."""
    return "" if not sp else (f"  [rounds {sp['n']}: min {_fmt_ratio(sp['min'], unit)}, q1 "
                              f"{_fmt_ratio(sp['q1'], unit)}, q3 {_fmt_ratio(sp['q3'], unit)}]")


def verdict_text(row: dict) -> str:
    """PASS / MISS of a ratio with a target ("(lower quartile)" when paired samples decided it),
    or UNDECIDED when too few rounds did."""
    if row.get("spread") and row["pass"] is None:
        return f"UNDECIDED (fewer than {MIN_ROUNDS} rounds: --runs {MIN_ROUNDS})"
    return ("PASS" if row["pass"] else "MISS") + (" (lower quartile)" if row.get("spread") else "")


def _paired(a: dict, b: dict | float, key: str) -> list[float] | None:
    """Round-by-round ratios of engine a's `key` rate to engine b's (or to a constant b), from
    the samples the bench keeps; None when either has none."""
    sa = (a.get("samples_tok_s") or {}).get(key)
    if not sa:
        return None
    if isinstance(b, (int, float)):
        return [x / b for x in sa]
    sb = (b.get("samples_tok_s") or {}).get(key)
    if not sb or len(sb) != len(sa):
        return None
    return [x / y for x, y in zip(sa, sb)]


def ratios(engines: dict, roofline: float, gb_s: float | None = None,
           kv_positions: float = 0.0) -> list[dict]:
    """Each ratio and its target. An engine's `round_gb_s` (child.run_rounds: the mean of the
    memory-read probes just before and just after its turn, one per timed round), where it has
    one, pairs its decode / roofline round by round (a shared machine's bandwidth moves within
    seconds); without one, decode / roofline is against `gb_s`, the one probe before the rounds.
    llama.cpp's rows (no target) likewise. `kv_positions`: cached positions a timed decode step
    reads on average (runners.decode_kv_positions); an engine's bytes per token are its weights
    plus its own KV cache's bytes per position (`kv_bytes_per_position`, as the engine reports
    it) times that."""
    def kv(e):
        return (e.get("kv_bytes_per_position") or 0) * kv_positions

    def against_roofline(e, nbytes, key="decode"):
        """(the bandwidth it was divided by, rate / roofline, the paired rounds) for an engine
        reading `nbytes` a token, its `key` rate: each round against the probes around its turn
        when it has them, else against the one probe before the rounds."""
        sa = (e.get("samples_tok_s") or {}).get(key)
        g_r = e.get("round_gb_s")
        if g_r and sa and len(sa) == len(g_r):
            pairs = [x / (g * 1e9 / nbytes) for x, g in zip(sa, g_r)]
            return (f"{min(g_r):.1f}-{max(g_r):.1f} GB/s, probed around each turn",
                    statistics.median(pairs), pairs)
        return (f"{gb_s:.1f} GB/s", e[f"{key}_tok_s"] / (gb_s * 1e9 / nbytes),
                _paired(e, gb_s * 1e9 / nbytes, key))

    lb, hf = engines["llamanb"], engines.get("transformers_fp32")
    memory = []                            # peak RSS against llama.cpp's: lower is better
    rows = [
        ("llamanb decode / transformers fp32 decode", "x", 1.5,
         hf and lb["decode_tok_s"] / hf["decode_tok_s"]),
        ("llamanb decode / decode roofline", "%", 0.85, lb["decode_tok_s"] / roofline),
        ("llamanb prefill_512 / transformers fp32 prefill_512", "x", 1.2,
         hf and lb["prefill_512_tok_s"] / hf["prefill_512_tok_s"]),
    ]
    for name, e in engines.items():       # another backend side by side with the numpy engine
        if name.startswith("llamanb@"):
            b = name.split("@", 1)[1]
            base = split_march(b)[0]       # without the kernels' build flavour ("cpu/x86-64-v3")
            rows.append((f"{b} decode / numpy fp32 decode", "x",
                         BACKEND_DECODE_TARGETS.get(b), e["decode_tok_s"] / lb["decode_tok_s"]))
            rows.append((f"{b} prefill_128 / numpy fp32 prefill_128", "x", None,
                         e["prefill_128_tok_s"] / lb["prefill_128_tok_s"]))
            if base in CPU_PEER:
                rows.append((f"{b} prefill_512 / numpy fp32 prefill_512", "x", None,
                             e["prefill_512_tok_s"] / lb["prefill_512_tok_s"]))
                if gb_s and e.get("weight_bytes"):       # its own bytes per token (bf16: half)
                    wb = e["weight_bytes"] + kv(e)
                    what, v, pairs = against_roofline(e, wb)
                    rows.append((f"{b} decode / its roofline ({what} / {wb / 1e6:.0f} MB read)", "%",
                                 ROOFLINE_TARGETS[base], v, pairs))
                    if e.get("weights_read_tok_s"):
                        # how near a bare read of the same matrices comes to the same roofline (a
                        # diagnostic: the decode reads them too, and beats it only by reading faster)
                        what, v, pairs = against_roofline(e, wb, "weights_read")
                        rows.append((f"{b} weights read alone / its roofline", "%", None, v, pairs))
                if e.get("weights_read_tok_s"):
                    sa = e["samples_tok_s"]
                    pairs = [d / w for d, w in zip(sa["decode"], sa["weights_read"])]
                    rows.append((f"{b} decode / its weights read alone", "%", None,
                                 statistics.median(pairs), pairs))
                peer = engines.get(CPU_PEER[base])
                if peer:
                    rows.append((f"{b} decode / {label(CPU_PEER[base])} decode", "x", 1.0,
                                 e["decode_tok_s"] / peer["decode_tok_s"],
                                 _paired(e, peer, "decode")))
                    # prefill targets: fp32 and bf16 >= 1.0x (the file's blocks: none)
                    rows.append((f"{b} prefill_512 / {label(CPU_PEER[base])} prefill_512", "x",
                                 1.0 if base in ("cpu", "cpu:bf16") else None,
                                 e["prefill_512_tok_s"] / peer["prefill_512_tok_s"],
                                 _paired(e, peer, "prefill_512")))
                    if e.get("peak_rss_mb") and peer.get("peak_rss_mb"):
                        v = e["peak_rss_mb"] / peer["peak_rss_mb"]
                        memory.append({"name": f"{b} peak RSS / {label(CPU_PEER[base])} peak RSS",
                                       "unit": "x", "target": RSS_TARGET, "at_most": True,
                                       "value": v, "pass": v <= RSS_TARGET})
        elif name in CPU_PEER.values() and gb_s:
            # its own tensors' bytes where it reports them (the file's own blocks), else the bytes
            # the cpu engine at the same precision reads per token (the same format)
            mine = next((engines.get(f"llamanb@{b}") for b, p in CPU_PEER.items() if p == name), None)
            nbytes = e.get("weight_bytes") or (mine or {}).get("weight_bytes")
            if nbytes is None and not name.endswith(("q4_1", "file")):
                nbytes = engines["llamanb"].get("weight_bytes")
                nbytes = nbytes and (nbytes // 2 if name.endswith("bf16") else nbytes)
            if nbytes:                    # paired with the probes as the cpu engines are
                nbytes += kv(e)
                what, v, pairs = against_roofline(e, nbytes)
                rows.append((f"{label(name)} decode / roofline ({what} / {nbytes / 1e6:.0f} MB read)",
                             "%", None, v, pairs))
    out = []
    for n, u, t, v, *paired in rows:
        paired = paired[0] if paired else None
        row = {"name": n, "unit": u, "target": t, "value": v,
               "pass": None if v is None or t is None else v >= t}
        if paired:                        # decided by the paired rounds' lower quartile
            row.update(decide(paired, t))
        out.append(row)
    return out + memory


def _fmt_ratio(v, unit) -> str:
    return f"{100 * v:.1f} %" if unit == "%" else f"{v:.2f}x"


def report(res: dict) -> str:
    m, mi, bw = res["machine"], res["model"], res["memory_read"]
    ob = m["openblas"]
    lines = [
        f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB | python {m['python']}, "
        f"numpy {m['numpy']} (OpenBLAS {ob['core']}, {ob['threads']} threads), "
        f"torch {m['torch']}, transformers {m['transformers']}",
        f"model: {mi['name']}, {mi['n_params'] / 1e6:.1f} M params, llamanb weights "
        f"{mi['weights_bytes'] / 1e6:.1f} MB (fp32)",
        f"prompts: {' and '.join(map(str, PREFILL_LENS))} tokens of a fixed English text, same ids "
        f"for every engine; decode: {res['settings']['decode_tokens']} greedy steps after a "
        f"{DECODE_CONTEXT}-token prefill; 1 warm-up + median of {res['settings']['runs']} runs",
        "transformers: forward under inference_mode, prefill with logits_to_keep=1 (last row only, "
        "like llamanb); decode is a manual past_key_values loop (no generate() overhead)",
        f"runs: {res['settings']['schedule']}",
        f"peak RSS: {res['peak_rss_method']}",
        "",
    ]
    w = max([22] + [len(label(name)) for name in res["engines"]])
    for name, e in res["engines"].items():
        lines.append(f"  {label(name):<{w}} {e['backend']} | threads: {e['threads']} | "
                     f"load {e['load_s']:.2f} s")
    head = (f"{'engine':<{w}} {'prefill_128':>12} {'prefill_512':>12} {'decode':>10} "
            f"{'peak RSS':>10}")
    lines += ["", head, f"{'(medians)':<{w}} {'tok/s':>12} {'tok/s':>12} {'tok/s':>10} {'MB':>10}",
              "-" * len(head)]
    for name, e in res["engines"].items():
        lines.append(f"{label(name):<{w}} {e['prefill_128_tok_s']:>12.1f} "
                     f"{e['prefill_512_tok_s']:>12.1f} {e['decode_tok_s']:>10.2f} "
                     f"{e['peak_rss_mb']:>10.0f}")
    lines += ["", f"memory read bandwidth: {res['memory_read_gb_s']:.2f} GB/s (best of: "
              + "; ".join(f"{k} {v['median_gb_s']:.2f}" for k, v in bw["methods"].items())
              + f"; {bw['array_mib']:.0f} MiB array, medians of {bw['repeats']})",
              f"decode roofline: {res['memory_read_gb_s']:.2f} GB/s / ("
              f"{mi['weights_bytes'] / 1e6:.1f} MB of weights + "
              f"{mi.get('kv_bytes_read_per_token', 0) / 1e6:.1f} MB of cached keys and values, over "
              f"{res['settings'].get('decode_kv_positions_mean', 0):.1f} positions on average) per "
              f"token = {res['decode_roofline_tok_s']:.2f} tok/s (each engine's own row: its own "
              "weight and KV bytes)"]
    per_round = res.get("memory_read_per_round_gb_s")
    if per_round:
        lines.append("memory read again at each timed round's start and after every engine's turn "
                     f"(best of the same probes, {ROUND_PROBES} passes each), GB/s: "
                     + "; ".join(f"round {i + 1} {min(r):.1f}-{max(r):.1f}"
                                 for i, r in enumerate(per_round))
                     + "; an engine's decode / roofline in a round uses the mean of the two probes "
                     "around its turn")
    lines.append("")
    for r in res["ratios"]:
        rounds = rounds_text(r.get("spread"), r["unit"])
        if r["target"] is None:
            lines.append(f"{r['name']:<52} {_fmt_ratio(r['value'], r['unit']):>8}  (no target)"
                         + rounds)
            continue
        target = _fmt_ratio(r["target"], r["unit"])
        if r["value"] is None:
            lines.append(f"{r['name']:<52} {'n/a':>8}  (target >= {target}; --no-transformers)")
        else:
            lines.append(f"{r['name']:<52} {_fmt_ratio(r['value'], r['unit']):>8}  target "
                         f"{'<=' if r.get('at_most') else '>='} {target:<7} {verdict_text(r)}"
                         + rounds)
    if res.get("greedy_agreement"):
        g = res["greedy_agreement"]
        lines.append(f"greedy tokens, llamanb vs transformers fp32: first {g['same_prefix']} of "
                     f"{g['of']} identical")
    cpu = res.get("cpu_taken_by_others_pct")
    if cpu is not None:
        taken = cpu["other_processes"] + cpu["steal"]
        lines.append(f"CPU taken by other processes during the run: {cpu['other_processes']:.0f} %"
                     f" (+ {cpu['steal']:.0f} % hypervisor steal)"
                     + (" -- WARNING: timings are skewed, rerun on a quiet machine" if taken > 10
                        else ""))
    return "\n".join(lines)


def write_json(path: str, data: dict) -> None:
    dest = Path(path).expanduser()
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def show_and_save(text: str, data: dict, path: str | None, progress) -> None:
    """Print a run's table on stdout, then write its JSON to `path` (if any) with write_json; a
    write that fails is one line saying that the results are printed above."""
    print(text, flush=True)                         # on stdout first: a failed write loses nothing
    if path:
        try:
            write_json(path, data)
        except OSError as e:
            raise LlamanbError(f"--json {path}: the write failed ({e.strerror}); the results "
                               "are printed above") from None
        progress(f"wrote {path}")

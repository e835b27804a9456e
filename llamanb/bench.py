"""`python -m llamanb bench`: llamanb against HF transformers (fp32 and bf16) on this CPU.

What is measured, all in one invocation, on the same model and the same token ids:

* prefill of 128 and 512 tokens (tok/s): one forward over the prompt that fills the KV cache and
  computes logits for the last position only (llamanb always does; transformers is called with
  `logits_to_keep=1` so that it does the same work instead of a [S, V] LM head);
* decode (tok/s): after a 128-token prefill, N single-token steps, greedy (argmax), each feeding
  the KV cache of the previous one. For transformers this is a hand-written loop of
  `model(tok, past_key_values=..., use_cache=True)` under `torch.inference_mode()`: the same work
  as llamanb's loop, without `generate()`'s logits processors and stopping criteria on top
  (on the 2-core dev machine generate() gave the same tokens at 0-15 % lower tok/s);
* peak memory (peak RSS, MB = 10^6 bytes) of each engine, including loading its model: every
  engine lives in its own child process, so this is that process's RSS high-water mark (VmHWM in
  /proc/self/status), read by the child after its last run. It includes the interpreter and the
  imports (numpy; torch and transformers for the transformers engines), as for a real user.

How: the parent measures the memory-read bandwidth first, with nothing else running. Then it
starts one long-lived child process per engine (multiprocessing, 'spawn': a fresh interpreter;
torch is imported only in the transformers children, never in the parent or the llamanb child)
and loads the engines one after another. The timed rounds are interleaved round-robin: round r
asks each engine in turn for prefill 128, prefill 512 and decode N and waits for its reply (and
0.3 s more, while OpenBLAS's idle threads stop spinning) before asking the next, so only one
engine computes at any moment, on all cores (numpy's OpenBLAS with its default thread count,
torch with torch.set_num_threads(os.cpu_count())). The order rotates every round (A B C, B C A,
C A B, ...) so that no engine is always first. Round 0 is the warm-up, rounds 1 .. --runs are
timed, and the table shows each engine's medians. A shared host's speed drifts (10-20 % over a
minute); interleaving spreads that drift over all engines alike, where running them one after
another charged it to whichever ran in the slow minute.

Parent and child speak over a multiprocessing Pipe, one request and one reply at a time: the
child answers ("ready", info) once loaded, ("round", (tok/s, greedy tokens)) to "round" and
("finished", {"peak_rss_mb": ...}) to "finish", after which it exits; any exception in a child
comes back as ("error", one line) and is raised in the parent as a LlamanbError ("bench:
transformers_fp32 failed: ..."). Children ignore Ctrl-C (SIGINT); on any error or interrupt the
parent terminates them (SIGTERM, then SIGKILL); a child whose parent dies anyway (SIGKILL) exits
at once too (a watchdog thread waits on the parent's sentinel), so none is left behind.

Roofline: decode is bound by reading every weight once per token (the LM head included; the
embedding is read one row at a time). The machine's memory-read bandwidth is measured with a
1 GiB float32 array (far larger than any cache) in four ways: np.add.reduce and
np.maximum.reduce, each with one Python thread per core on its own slice (numpy drops the GIL),
and OpenBLAS's two GEMV kernels (matrix @ vector and vector @ matrix, OpenBLAS threads). The best
median of the four is taken as the bandwidth: the higher it is, the harder the roofline is to
reach. Decode roofline tok/s = bandwidth / weight bytes (KV-cache reads, < 2 MB per token here,
are left out).

Other processes on the machine skew everything; the share of CPU they used during the run is
printed, with a warning when it is large.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from .errors import LlamanbError
from .machine import (BANDWIDTH_BYTES, CpuShare, machine_info, memory_read_bandwidth,
                      openblas_info, peak_rss_mb, release_memory, rss_mb)

PREFILL_LENS = (128, 512)
DECODE_CONTEXT = 128                     # prompt length before the decode steps
# OpenBLAS's worker threads spin for a while after their last call (~130 ms of a core on the
# 2-core dev machine; torch's OpenMP threads go idle at once): the parent waits this long before
# each engine's turn, so that the engine before it takes no core from it.
SETTLE_S = 0.3
SCHEDULE = ("interleaved round-robin: each round runs every engine in turn (prefill 128, prefill "
            "512, decode), one at a time, each in its own process; the order rotates every round; "
            "round 0 is the warm-up")
PEAK_RSS_METHOD = ("VmHWM of each engine's own child process (multiprocessing 'spawn'), read after "
                   "its last run; includes the interpreter, its imports and the model load")
LABELS = {"llamanb": "llamanb (numpy fp32)", "transformers_fp32": "transformers fp32",
          "transformers_bf16": "transformers bf16"}

# A fixed English text; its token ids, repeated and truncated, are every engine's prompt.
PROMPT_TEXT = (
    "The old lighthouse stood at the end of a narrow spit of rock, where the harbour met the open "
    "sea. For more than a century its keepers climbed the spiral stairs each evening to trim the "
    "wick, polish the great lens and wind the clockwork that turned it. Fishermen coming home in "
    "the dark counted the flashes, three short and one long, and knew exactly where they were. "
    "When the light was finally automated, the last keeper moved into the village and spent his "
    "afternoons teaching children how to read the tides, tie a bowline and tell a cormorant from "
    "a shag. People say that on stormy nights he still walked to the end of the pier, just to "
    "make sure the beam was turning. "
)


# --- process memory --------------------------------------------------------------------------

class LlamanbRunner:
    def __init__(self, model_spec):
        from .engine import Engine
        from .store import load_model

        self.model = load_model(model_spec)
        self.engine = Engine(self.model)
        self.info = {"backend": self.engine.backend.description, "dtype": "float32",
                     "threads": f"numpy/OpenBLAS {openblas_info()['threads']}"}

    def prefill(self, ids) -> float:
        cache = self.engine.new_cache(len(ids))
        t0 = time.perf_counter()
        self.engine.prefill(ids, cache)
        return time.perf_counter() - t0

    def decode(self, ids, steps: int) -> tuple[float, list[int]]:
        cache = self.engine.new_cache(len(ids) + steps)
        tok = int(np.argmax(self.engine.prefill(ids, cache)))
        tokens = [tok]
        t0 = time.perf_counter()
        for _ in range(steps):
            tok = int(np.argmax(self.engine.decode(tok, cache)))
            tokens.append(tok)
        return time.perf_counter() - t0, tokens


class TransformersRunner:
    def __init__(self, cache_dir, dtype: str):
        import torch
        import transformers
        from transformers import LlamaForCausalLM

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        torch.set_num_threads(os.cpu_count() or 1)
        self.torch = torch
        self.model = LlamaForCausalLM.from_pretrained(
            str(cache_dir), dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]).eval()
        self.info = {"backend": f"transformers {transformers.__version__} LlamaForCausalLM, "
                                f"attention {self.model.config._attn_implementation}",
                     "dtype": dtype,
                     "threads": f"torch intra-op {torch.get_num_threads()}, "
                                f"inter-op {torch.get_num_interop_threads()}"}

    def prefill(self, ids) -> float:
        x = self.torch.tensor([ids], dtype=self.torch.long)
        with self.torch.inference_mode():
            t0 = time.perf_counter()
            self.model(input_ids=x, use_cache=True, logits_to_keep=1)
            return time.perf_counter() - t0

    def decode(self, ids, steps: int) -> tuple[float, list[int]]:
        torch = self.torch
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=True,
                             logits_to_keep=1)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
            tokens = [int(tok)]
            t0 = time.perf_counter()
            for _ in range(steps):
                out = self.model(input_ids=tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(int(tok))
            return time.perf_counter() - t0, tokens


def make_runner(engine: str, model_spec, cache_dir):
    if engine == "llamanb":
        return LlamanbRunner(model_spec)
    return TransformersRunner(cache_dir, engine.rsplit("_", 1)[1])


def run_round(runner, ids: list[int], steps: int) -> tuple[dict, list[int]]:
    """One round of one engine: tok/s of prefill 128, prefill 512 and decode, and decode's greedy
    tokens."""
    row = {f"prefill_{n}": n / runner.prefill(ids[:n]) for n in PREFILL_LENS}
    dt, tokens = runner.decode(ids[:DECODE_CONTEXT], steps)
    row["decode"] = steps / dt
    return row, tokens


# --- one child process per engine ------------------------------------------------------------

def _one_line(e: BaseException) -> str:
    """An exception as one line; for anything but a LlamanbError, with where it was raised."""
    if isinstance(e, LlamanbError):
        msg = str(e)
    else:
        msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        tb = traceback.extract_tb(e.__traceback__)
        if tb:
            msg += f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})"
    return " ".join(msg.split())


def _exit_with_parent() -> None:
    """A child's watchdog thread: exit at once when the parent is gone (even killed by SIGKILL)
    rather than finish a round nobody will read."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)


def _child_main(conn, engine: str, model_spec, cache_dir, ids: list[int], steps: int) -> None:
    """Body of an engine's child process: load, then answer "round" requests until "finish"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)         # Ctrl-C is the parent's to handle
    threading.Thread(target=_exit_with_parent, name="exit-with-parent", daemon=True).start()
    try:
        rss_start, t0 = rss_mb(), time.perf_counter()
        runner = make_runner(engine, model_spec, cache_dir)
        conn.send(("ready", {"load_s": time.perf_counter() - t0, "rss_at_start_mb": rss_start,
                             **runner.info}))
        while (cmd := conn.recv()) == "round":
            conn.send(("round", run_round(runner, ids, steps)))
        if cmd == "finish":
            conn.send(("finished", {"peak_rss_mb": peak_rss_mb()}))
    except (EOFError, BrokenPipeError):                   # the parent is gone: nobody to tell
        pass
    except BaseException as e:                            # reported, not lost
        with contextlib.suppress(OSError):
            conn.send(("error", _one_line(e)))
    finally:
        conn.close()


@contextlib.contextmanager
def _sigint_ignored():
    """Ignore SIGINT while a child starts: an ignored SIGINT survives exec and Python leaves it
    ignored, so Ctrl-C reaches only the parent, even while a child is still importing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        return f"was killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
    return f"exited with code {code} without a reply"


class EngineProcess:
    """One engine in its own 'spawn' child process, driven over a Pipe one request at a time."""

    def __init__(self, ctx, engine: str, model_spec, cache_dir, ids: list[int], steps: int):
        self.engine = engine
        self.conn, child_end = ctx.Pipe()
        self.proc = ctx.Process(target=_child_main, name=f"llamanb-bench-{engine}", daemon=True,
                                args=(child_end, engine, model_spec, cache_dir, ids, steps))
        try:
            with _sigint_ignored():
                self.proc.start()
        finally:
            child_end.close()         # the child holds the only copy now: its death reads as EOF

    def ask(self, request: str | None = None):
        """Send `request` (None: just wait for the next message) and return the reply's payload."""
        try:
            if request is not None:
                self.conn.send(request)
            kind, payload = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            raise LlamanbError(f"bench: {self.engine} failed: its process "
                               f"{_exit_reason(self.proc.exitcode)}") from None
        if kind == "error":
            raise LlamanbError(f"bench: {self.engine} failed: {payload}")
        return payload

    def finish(self) -> dict:
        """The child's peak RSS after its last run; the child then exits."""
        out = self.ask("finish")
        self.proc.join(30)
        return out

    def stop(self) -> None:
        """End and reap the child, whatever state it is in (idempotent)."""
        self.conn.close()
        if self.proc.pid is None:                           # never started
            return
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
        self.proc.join()


def measure_engines(engines: list[str], model_spec, cache_dir, ids: list[int], runs: int,
                    steps: int, progress) -> tuple[dict, list[list[str]]]:
    """Load every engine in its own child, then run the rounds interleaved round-robin; return
    each engine's medians, samples and peak RSS, and the order of every round."""
    ctx = multiprocessing.get_context("spawn")
    keys = [f"prefill_{n}" for n in PREFILL_LENS] + ["decode"]
    procs, info = {}, {}
    samples = {e: {k: [] for k in keys} for e in engines}
    tokens, orders = {}, []
    try:
        for e in engines:
            progress(f"{e}: starting its process, loading")
            procs[e] = EngineProcess(ctx, e, model_spec, cache_dir, ids, steps)
            info[e] = procs[e].ask()
            progress(f"  loaded in {info[e]['load_s']:.2f} s: {info[e]['backend']}")
        progress(f"rounds: warm-up + {runs} timed, interleaved round-robin "
                 f"(prefill {'/'.join(map(str, PREFILL_LENS))}, decode {steps} each)")
        for r in range(runs + 1):                             # round 0 is the warm-up
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            orders.append(order)
            tag = "warm-up" if r == 0 else f"run {r}/{runs}"
            for e in order:
                time.sleep(SETTLE_S)              # the previous engine's idle threads stop spinning
                row, tokens[e] = procs[e].ask("round")
                print(f"  {tag} [{e}]: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in row.items()),
                      file=sys.stderr, flush=True)
                if r:
                    for k in keys:
                        samples[e][k].append(row[k])
        peaks = {e: procs[e].finish()["peak_rss_mb"] for e in engines}
    finally:
        for p in procs.values():
            p.stop()
    results = {}
    for e in engines:
        results[e] = {f"{k}_tok_s": statistics.median(samples[e][k]) for k in keys}
        results[e].update(peak_rss_mb=peaks[e], samples_tok_s=samples[e], greedy_tokens=tokens[e],
                          **info[e])
    return results, orders


# --- report ----------------------------------------------------------------------------------

def prompt_ids(tokenizer, n: int, vocab: int) -> list[int]:
    unit = tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)
    if not unit:
        raise LlamanbError("the tokenizer turned the benchmark text into no tokens")
    ids = (unit * (n // len(unit) + 1))[:n]
    if max(ids) >= vocab:
        raise LlamanbError(f"tokenizer ids exceed the model's vocabulary ({vocab})")
    return ids


def ratios(engines: dict, roofline: float) -> list[dict]:
    lb, hf = engines["llamanb"], engines.get("transformers_fp32")
    rows = [
        ("llamanb decode / transformers fp32 decode", "x", 1.5,
         hf and lb["decode_tok_s"] / hf["decode_tok_s"]),
        ("llamanb decode / decode roofline", "%", 0.85, lb["decode_tok_s"] / roofline),
        ("llamanb prefill_512 / transformers fp32 prefill_512", "x", 1.2,
         hf and lb["prefill_512_tok_s"] / hf["prefill_512_tok_s"]),
    ]
    return [{"name": n, "unit": u, "target": t, "value": v, "pass": None if v is None else v >= t}
            for n, u, t, v in rows]


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
    for name, e in res["engines"].items():
        lines.append(f"  {LABELS[name]:<22} {e['backend']} | threads: {e['threads']} | "
                     f"load {e['load_s']:.2f} s")
    head = (f"{'engine':<22} {'prefill_128':>12} {'prefill_512':>12} {'decode':>10} "
            f"{'peak RSS':>10}")
    lines += ["", head, f"{'(medians)':<22} {'tok/s':>12} {'tok/s':>12} {'tok/s':>10} {'MB':>10}",
              "-" * len(head)]
    for name, e in res["engines"].items():
        lines.append(f"{LABELS[name]:<22} {e['prefill_128_tok_s']:>12.1f} "
                     f"{e['prefill_512_tok_s']:>12.1f} {e['decode_tok_s']:>10.2f} "
                     f"{e['peak_rss_mb']:>10.0f}")
    lines += ["", f"memory read bandwidth: {res['memory_read_gb_s']:.2f} GB/s (best of: "
              + "; ".join(f"{k} {v['median_gb_s']:.2f}" for k, v in bw["methods"].items())
              + f"; {bw['array_mib']:.0f} MiB array, medians of {bw['repeats']})",
              f"decode roofline: {res['memory_read_gb_s']:.2f} GB/s / "
              f"{mi['weights_bytes'] / 1e6:.1f} MB per token = "
              f"{res['decode_roofline_tok_s']:.2f} tok/s", ""]
    for r in res["ratios"]:
        target = _fmt_ratio(r["target"], r["unit"])
        if r["value"] is None:
            lines.append(f"{r['name']:<52} {'n/a':>8}  (target >= {target}; --no-transformers)")
        else:
            lines.append(f"{r['name']:<52} {_fmt_ratio(r['value'], r['unit']):>8}  target >= "
                         f"{target:<7} {'PASS' if r['pass'] else 'MISS'}")
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


def main(args) -> int:
    from importlib.util import find_spec

    from .store import load_model

    t_start, cpu = time.perf_counter(), CpuShare()
    engines = ["llamanb"]
    if not args.no_transformers:
        missing = [m for m in ("torch", "transformers") if find_spec(m) is None]
        if missing:
            raise LlamanbError(f"bench needs {' and '.join(missing)}: install the test deps "
                               "(`make test`) or pass --no-transformers")
        engines += ["transformers_fp32"] + ([] if args.no_bf16 else ["transformers_bf16"])
    if args.json:
        parent = Path(args.json).expanduser().parent
        if not parent.is_dir():
            raise LlamanbError(f"--json {args.json}: directory {parent} does not exist")
        if Path(args.json).expanduser().is_dir():
            raise LlamanbError(f"--json {args.json} is a directory; give a file name")

    def progress(msg):
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    model = load_model(args.model)                 # weights are memory-mapped, not read yet
    cfg = model.config
    ids = prompt_ids(model.tokenizer, max(PREFILL_LENS), cfg.vocab)
    model_info = {"name": cfg.name, "n_params": cfg.n_params(),
                  "weights_bytes": model.weights.nbytes(), "source": str(model.source),
                  "cache_dir": str(model.cache_dir)}
    if cfg.max_seq < max(max(PREFILL_LENS), DECODE_CONTEXT + args.decode_tokens):
        raise LlamanbError(f"{cfg.name}: context {cfg.max_seq} is too short for the benchmark")
    del model

    machine = machine_info()
    progress(f"{machine['cpu']}, {machine['cores']} cores; numpy OpenBLAS threads "
             f"{machine['openblas']['threads']}; one child process per engine")
    progress(f"measuring memory-read bandwidth ({BANDWIDTH_BYTES >> 20} MiB float32 array)")
    bw = memory_read_bandwidth()
    release_memory()
    roofline = bw["gb_s"] * 1e9 / model_info["weights_bytes"]
    progress(f"  {bw['gb_s']:.2f} GB/s ({bw['best']}) -> decode roofline {roofline:.2f} tok/s")

    results, orders = measure_engines(engines, args.model, model_info["cache_dir"], ids,
                                      args.runs, args.decode_tokens, progress)

    agreement = None
    if "transformers_fp32" in results:
        a, b = results["llamanb"]["greedy_tokens"], results["transformers_fp32"]["greedy_tokens"]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        agreement = {"same_prefix": same, "of": len(a)}

    res = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": machine,
        "model": model_info,
        "settings": {"runs": args.runs, "warmup_runs": 1, "decode_tokens": args.decode_tokens,
                     "decode_context": DECODE_CONTEXT, "prefill_lens": list(PREFILL_LENS),
                     "prompt_ids": ids, "transformers_logits_to_keep": 1,
                     "transformers_decode": "manual past_key_values loop, greedy, inference_mode",
                     "schedule": SCHEDULE, "round_orders": orders},
        "peak_rss_method": PEAK_RSS_METHOD,
        "isolation": "process",
        "memory_read_gb_s": bw["gb_s"],
        "memory_read": bw,
        "decode_roofline_tok_s": roofline,
        "engines": results,
        "ratios": ratios(results, roofline),
        "greedy_agreement": agreement,
    }
    res["cpu_taken_by_others_pct"] = cpu.pct()      # children count as ours: all reaped by now
    res["total_s"] = time.perf_counter() - t_start
    print(report(res))
    if args.json:
        write_json(args.json, res)
        progress(f"wrote {args.json}")
    progress(f"done in {res['total_s']:.0f} s")
    return 0

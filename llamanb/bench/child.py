"""One long-lived child process per engine, spoken to over a Pipe, and the interleaved rounds
(see the package docstring for the protocol and the schedule)."""
from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path

from llamanb.errors import LlamanbError
from llamanb.bench.machine import peak_rss_mb, rss_mb
from llamanb.bench.runners import PREFILL_LENS, make_runner, run_round

# OpenBLAS's worker threads spin for a while after their last call (~130 ms of a core on the
# 2-core dev machine; torch's OpenMP threads go idle at once): the parent waits this long before
# each engine's turn, so that the engine before it takes no core from it.
SETTLE_S = 0.3
SCHEDULE = ("interleaved round-robin: each round runs every engine in turn (prefill 128, prefill "
            "512, decode), one at a time, each in its own process; the order rotates every round; "
            "round 0 is the warm-up")
PEAK_RSS_METHOD = ("VmHWM of each engine's own child process (multiprocessing 'spawn'), read after "
                   "its last run; includes the interpreter, its imports and the model load")
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
                    steps: int, progress, peers: dict | None = None,
                    probe=None) -> tuple[dict, list[list[str]], list[float]]:
    """Load every engine in its own child, then run the rounds interleaved round-robin; return
    each engine's medians, samples and peak RSS, the order of every round, and what `probe()`
    (if given: the memory-read bandwidth, GB/s) measured at the start of each timed round, so
    that a roofline is paired with the decode rates of its own round. `peers`: engine name ->
    (python, gguf path) for the llama.cpp engines (bench.peer)."""
    ctx = multiprocessing.get_context("spawn")
    keys = [f"prefill_{n}" for n in PREFILL_LENS] + ["decode"]
    procs, info = {}, {}
    samples = {e: {k: [] for k in keys} for e in engines}
    tokens, orders, probes = {}, [], []
    try:
        for e in engines:
            progress(f"{e}: starting its process, loading")
            if peers and e in peers:
                from llamanb.bench.peer import PeerProcess

                procs[e] = PeerProcess(e, *peers[e], ids, steps)
            else:
                procs[e] = EngineProcess(ctx, e, model_spec, cache_dir, ids, steps)
            info[e] = procs[e].ask()
            progress(f"  loaded in {info[e]['load_s']:.2f} s: {info[e]['backend']}")
        progress(f"rounds: warm-up + {runs} timed, interleaved round-robin "
                 f"(prefill {'/'.join(map(str, PREFILL_LENS))}, decode {steps} each)")
        for r in range(runs + 1):                             # round 0 is the warm-up
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            orders.append(order)
            tag = "warm-up" if r == 0 else f"run {r}/{runs}"
            if probe is not None:
                time.sleep(SETTLE_S)
                gb_s = probe()
                print(f"  {tag} [memory read]: {gb_s:.2f} GB/s", file=sys.stderr, flush=True)
                if r:
                    probes.append(gb_s)
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
    return results, orders, probes


# --- report ----------------------------------------------------------------------------------

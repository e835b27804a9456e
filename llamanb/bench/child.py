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
                    probe=None) -> tuple[dict, list[list[str]], list[list[float]]]:
    """Load every engine in its own child, then run the rounds (run_rounds); return each
    engine's medians, samples and peak RSS (and `round_gb_s` when `probe` is given), the order
    of every round, and every timed round's probes. `peers`: engine name -> (python, gguf path)
    for the llama.cpp engines (bench.peer)."""
    ctx = multiprocessing.get_context("spawn")
    procs, info = {}, {}
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
        got = run_rounds(procs, runs, probe)
        peaks = {e: procs[e].finish()["peak_rss_mb"] for e in engines}
    finally:
        for p in procs.values():
            p.stop()
    results = {}
    for e in engines:
        sam = got["samples"][e]
        results[e] = {f"{k}_tok_s": statistics.median(v) for k, v in sam.items()}
        results[e].update(peak_rss_mb=peaks[e], samples_tok_s=sam, greedy_tokens=got["tokens"][e],
                          **info[e])
        if probe is not None:
            results[e]["round_gb_s"] = got["round_gb_s"][e]
    return results, got["orders"], got["probes"]


def run_rounds(procs: dict, runs: int, probe=None, settle: float = SETTLE_S) -> dict:
    """The rounds over engines already loaded (name -> an object whose ask("round") returns that
    round's {prefill_128, prefill_512, decode} tok/s (a cpu engine's also weights_read) and the
    greedy tokens): a warm-up and `runs` timed rounds, every engine once a round, the order
    rotating. With `probe()` (the memory-read bandwidth, GB/s) the memory is read at each round's
    start and again after every engine's turn, so each turn lies between two probes a few
    seconds apart, and an engine's `round_gb_s` is, round by round, the mean of those two: its
    decode (the end of its turn) is paired with the bandwidth of the same seconds, not of the
    round's start (on the 2-core cloud VMs of docs/performance.md the read bandwidth moved by a
    third from one probe to the next, 2 s apart). Returns samples, tokens, orders, probes (each
    timed round's, in order) and round_gb_s."""
    engines = list(procs)
    keys = [f"prefill_{n}" for n in PREFILL_LENS] + ["decode"]
    samples = {e: {k: [] for k in keys} for e in engines}
    around = {e: [] for e in engines}
    tokens, orders, probes = {}, [], []
    for r in range(runs + 1):                                 # round 0 is the warm-up
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        orders.append(order)
        tag = "warm-up" if r == 0 else f"run {r}/{runs}"
        seen = []                                             # this round's probes, in order

        def read_memory():
            time.sleep(settle)                # the previous engine's idle threads stop spinning
            seen.append(probe())
            print(f"  {tag} [memory read]: {seen[-1]:.2f} GB/s", file=sys.stderr, flush=True)

        if probe is not None:
            read_memory()
        for e in order:
            time.sleep(settle)
            row, tokens[e] = procs[e].ask("round")
            print(f"  {tag} [{e}]: " + ", ".join(
                f"{k} {v:.1f} {'/s' if k == 'weights_read' else 'tok/s'}" for k, v in row.items()),
                file=sys.stderr, flush=True)
            if probe is not None:
                read_memory()
            if r:
                for k in row:                   # the three rates, and any an engine adds
                    samples[e].setdefault(k, []).append(row[k])
                if probe is not None:
                    around[e].append((seen[-2] + seen[-1]) / 2)
        if r and probe is not None:
            probes.append(seen)
    return {"samples": samples, "tokens": tokens, "orders": orders, "probes": probes,
            "round_gb_s": around}


# --- report ----------------------------------------------------------------------------------

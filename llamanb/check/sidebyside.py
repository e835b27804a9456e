"""Every backend on one prompt, side by side: the answer, checked against a reference backend with
the top-5 rule, and what each backend did per token, counted by the backend itself.

    rows = side_by_side({"numpy": Engine(model), "npu2-emulated": Engine(model, "npu2-emulated")},
                        prompt_ids, steps=16)

Activity per token is what crosses the backend's device boundary, as its own counters record it:

    npu2 / npu2-emulated  KernelCache calls and host<->device bytes (device.counters)
    galaxy-*              collectives and bytes over chip-to-chip links (mesh.ledger)
    tcp                   TCP program ops executed (the interpreter's count); no device
    numpy, cpu            nothing crosses a boundary: the host computes
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from llamanb.check.greedy import GreedyRun, engine_greedy


@dataclass
class BackendRun:
    name: str
    description: str
    run: GreedyRun
    seconds: float                   # host wall time for the whole greedy run (measured)
    activity: str                    # what `units` counts, e.g. "NPU calls"
    units_per_token: float | None
    bytes_per_token: float | None
    agreement: str = ""              # filled in by side_by_side
    passes: bool = True


def _probe(backend):
    """(what is counted, a function returning (units, bytes) so far) for a backend, or None."""
    counters = getattr(backend, "counters", None)
    if counters is not None and hasattr(counters, "dispatches"):
        return "NPU calls", lambda: (backend.counters.dispatches,
                                     backend.counters.bytes_to_device + backend.counters.bytes_from_device)
    mesh = getattr(backend, "mesh", None)
    if mesh is not None and hasattr(mesh, "ledger"):
        return "collectives", lambda: (len(mesh.ledger), sum(t.total for t in mesh.ledger))
    interp = getattr(backend, "run", None)
    if interp is not None and hasattr(interp, "executed"):
        return "TCP program ops", lambda: (interp.executed, None)
    return None


def measure(name: str, engine, prompt_ids, steps: int, stop_ids=()) -> BackendRun:
    probe = _probe(engine.backend)
    before = probe[1]() if probe else None
    t0 = time.perf_counter()
    run = engine_greedy(engine, prompt_ids, steps, stop_ids, k=5)
    seconds = time.perf_counter() - t0
    units = nbytes = None
    if probe:
        after = probe[1]()
        n = len(run.ids)                  # the prefill and every decode step produce one token each
        units = (after[0] - before[0]) / n
        nbytes = None if after[1] is None else (after[1] - before[1]) / n
    return BackendRun(name, engine.backend.description, run, seconds,
                      probe[0] if probe else "host only", units, nbytes)


def agree(ours: GreedyRun, ref: GreedyRun) -> tuple[bool, str]:
    """The top-5 rule between two greedy runs: identical, or at the first difference each side's
    token is in the other's top-5."""
    for i, (a, r) in enumerate(zip(ours.ids, ref.ids)):
        if a != r:
            ok = a in ref.top_ids[i] and r in ours.top_ids[i]
            return ok, f"first difference at token {i} ({'each in the other top-5' if ok else 'NOT in the top-5'})"
    n = min(len(ours.ids), len(ref.ids))
    if len(ours.ids) != len(ref.ids):
        return False, f"{n} identical tokens, then one run stopped"
    return True, f"identical ({n} tokens)"


def side_by_side(engines: dict, prompt_ids, steps: int, reference: str | None = None,
                 stop_ids=()) -> list[BackendRun]:
    """Greedy `steps` tokens on every engine; each checked against `reference` (default: the first)."""
    runs = [measure(name, eng, prompt_ids, steps, stop_ids) for name, eng in engines.items()]
    ref = next(r for r in runs if r.name == (reference or runs[0].name))
    for r in runs:
        r.passes, r.agreement = (True, "the reference") if r is ref else agree(r.run, ref.run)
    return runs


def table(runs: list[BackendRun]) -> str:
    """The deterministic part: answers' agreement and counted activity per token."""
    # columns as wide as their longest entry (the agreement up to 58: "first difference at token
    # N (each in the other top-5)"), so that the table stays aligned and within 120 columns
    pers = ["--" if r.units_per_token is None else f"{r.units_per_token:.1f} {r.activity}" for r in runs]
    nbs = ["--" if r.bytes_per_token is None else f"{r.bytes_per_token:,.0f}" for r in runs]
    wn = max([16] + [len(r.name) + 2 for r in runs])
    wa = max([14] + [len(r.agreement) + 2 for r in runs])
    wp = max([11] + [len(p) + 2 for p in pers])
    lines = [f"{'backend':<{wn}}{'vs reference':<{wa}}{'per token':>{wp}}{'bytes/token':>14}"]
    for r, per, nb in zip(runs, pers, nbs):
        lines.append(f"{r.name:<{wn}}{r.agreement:<{wa}}{per:>{wp}}{nb:>14}")
    return "\n".join(lines)

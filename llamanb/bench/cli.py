"""`python -m llamanb bench`: llamanb against HF transformers (fp32 and bf16) on this CPU.
How it measures: see the package docstring (llamanb/bench/__init__.py)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from llamanb.errors import LlamanbError
from llamanb.bench.child import PEAK_RSS_METHOD, SCHEDULE, measure_engines
from llamanb.bench.machine import (BANDWIDTH_BYTES, ROUND_PROBE_REPEATS, CpuShare, machine_info, memory_read_bandwidth, release_memory)
from llamanb.bench.report import ratios, report, show_and_save
from llamanb.bench.runners import (DECODE_CONTEXT, PREFILL_LENS, decode_kv_positions, prompt_ids,
                                   refuse_emulated)


def also_marches(value: str | None) -> list[str]:
    """The kernel build flavours `--also-march` asks for beside the cpu engines' own (each is
    built here, so a flavour that cannot build or run on this CPU is one line before anything is
    measured): a comma-separated list of -march names (or "portable"); "none"; or "auto" --
    x86-64-v3 (the AVX2 kernels) where this CPU's own build uses AVX-512, none elsewhere.
    The own flavour ($LLAMANB_CPU_MARCH, else native) is never measured twice."""
    from llamanb.cpu import kernels as cpu_kernels

    value = (value or "auto").strip()
    names = [] if value in ("auto", "none") else \
        [cpu_kernels.check_flavour(v.strip(), "--also-march") for v in value.split(",") if v.strip()]
    for name in names:                                   # before anything is built
        refuse_emulated(name, "--also-march")
    own = cpu_kernels.load()
    if value == "auto":
        names = ["x86-64-v3"] if "AVX512F" in own.isa else []
    out = []
    for name in names:
        if name != own.flavour and name not in out:
            cpu_kernels.load(flavour_name=name)            # built now; LlamanbError if it can't
            out.append(name)
    return out


def main(args) -> int:
    from importlib.util import find_spec

    from llamanb.io.store import load_model

    if args.json:                      # checked before anything is measured
        from llamanb.platform.paths import check_output_file

        check_output_file(args.json, "--json")
    from llamanb.cpu import kernels as cpu_kernels

    refuse_emulated(os.environ.get(cpu_kernels.MARCH_VAR, "").strip(), cpu_kernels.MARCH_VAR)
    if getattr(args, "kernels", None):
        from llamanb.bench.kernel_ab import main as kernel_ab

        return kernel_ab(args)
    args.runs = args.runs or 3
    if getattr(args, "batching", False):
        from llamanb.bench.batching import main as batching

        return batching(args)
    t_start, cpu = time.perf_counter(), CpuShare()
    engines = ["llamanb"]
    backend = getattr(args, "backend", "numpy") or "numpy"
    if backend != "numpy":                       # measured side by side with the numpy engine
        from llamanb.engine.registry import BACKENDS, LAZY

        if backend not in BACKENDS and backend not in LAZY:
            raise LlamanbError(f"unknown backend {backend!r}; available: "
                               f"{', '.join({**BACKENDS, **LAZY})}")
        engines.append(f"llamanb@{backend}")
        if backend == "cpu":                     # both precisions, each beside llama.cpp's
            engines.append("llamanb@cpu:bf16")
    if not args.no_transformers:
        missing = [m for m in ("torch", "transformers") if find_spec(m) is None]
        if missing:
            raise LlamanbError(f"bench needs {' and '.join(missing)}: install the test deps "
                               "(`make test`) or pass --no-transformers")
        engines += ["transformers_fp32"] + ([] if args.no_bf16 else ["transformers_bf16"])

    def progress(msg):
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    marches = also_marches(getattr(args, "also_march", "auto")) if backend == "cpu" else []
    model = load_model(args.model)                 # weights are memory-mapped, not read yet
    cfg = model.config
    if backend == "cpu":                       # and the file's own blocks (Q4_1, ...), as stored
        from llamanb.bench.peer import QUANT_PEERS, source_quant

        quant = source_quant(model.source, model)
        if quant:
            engines.insert(engines.index("llamanb@cpu:bf16") + 1,
                           f"llamanb@cpu:{QUANT_PEERS[quant]}")
    if backend == "cpu":                           # the same engines on other kernel builds
        cpu_engines = [e for e in engines if e.startswith("llamanb@cpu")]
        at = engines.index(cpu_engines[-1]) + 1
        engines[at:at] = [f"{e}/{m}" for m in marches for e in cpu_engines]
    ids = prompt_ids(model.tokenizer, max(PREFILL_LENS), cfg.vocab)
    model_info = {"name": cfg.name, "n_params": cfg.n_params(),
                  "weights_bytes": model.weights.nbytes(), "source": str(model.source),
                  "cache_dir": str(model.cache_dir)}
    if cfg.max_seq < max(max(PREFILL_LENS), DECODE_CONTEXT + args.decode_tokens):
        raise LlamanbError(f"{cfg.name}: context {cfg.max_seq} is too short for the benchmark")
    peers = None
    if backend == "cpu":
        from llamanb.io.store import cache_root
        from llamanb.bench.peer import PEERS, make_ggufs, peer_python

        py, version = peer_python(getattr(args, "peer_python", None))
        if py is None:
            progress(version)
        else:
            progress(f"llama.cpp peer: llama-cpp-python {version} in {py}; writing F32/BF16 GGUFs")
            files = make_ggufs(model.source, cache_root() / "peer")
            if quant:                                   # llama.cpp runs the model's own file
                files[quant] = Path(model.source)
            peers = {e: (py, files[prec]) for e, prec in PEERS.items() if prec in files}
            engines += list(peers)
    del model

    machine = machine_info()
    progress(f"{machine['cpu']}, {machine['cores']} cores; numpy OpenBLAS threads "
             f"{machine['openblas']['threads']}; one child process per engine")
    progress(f"measuring memory-read bandwidth ({BANDWIDTH_BYTES >> 20} MiB float32 array)")
    extra = None
    if backend == "cpu":                             # the kernels' own streaming read
        from llamanb.cpu import kernels as cpu_kernels

        k = cpu_kernels.load()
        extra = {f"cpu kernels' streaming sum, {k.threads} threads": k.read_sum}
    bw = memory_read_bandwidth(extra=extra)
    release_memory()
    progress(f"  {bw['gb_s']:.2f} GB/s ({bw['best']})")
    probe = None
    if backend == "cpu":     # a shared machine's bandwidth drifts: probe again every round
        import numpy as np

        arr = np.ones(BANDWIDTH_BYTES // 4, dtype=np.float32)

        def probe():
            return memory_read_bandwidth(extra=extra, array=arr, repeats=ROUND_PROBE_REPEATS)["gb_s"]

    results, orders, probes = measure_engines(engines, args.model, model_info["cache_dir"], ids,
                                              args.runs, args.decode_tokens, progress, peers, probe)
    if probe is not None:
        del probe, arr
        release_memory()
    # what a decode step must read: every weight, and the cached keys and values it attends over
    kv_positions = decode_kv_positions(args.decode_tokens)
    model_info["kv_bytes_read_per_token"] = results["llamanb"]["kv_bytes_per_position"] * kv_positions
    roofline = bw["gb_s"] * 1e9 / (model_info["weights_bytes"] + model_info["kv_bytes_read_per_token"])

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
                     "decode_context": DECODE_CONTEXT, "decode_kv_positions_mean": kv_positions,
                     "prefill_lens": list(PREFILL_LENS),
                     "prompt_ids": ids, "transformers_logits_to_keep": 1,
                     "transformers_decode": "manual past_key_values loop, greedy, inference_mode",
                     "schedule": SCHEDULE, "round_orders": orders},
        "peak_rss_method": PEAK_RSS_METHOD,
        "isolation": "process",
        "memory_read_gb_s": bw["gb_s"],
        "memory_read": bw,
        "memory_read_per_round_gb_s": probes,
        "decode_roofline_tok_s": roofline,
        "engines": results,
        "ratios": ratios(results, roofline, bw["gb_s"], kv_positions),
        "greedy_agreement": agreement,
    }
    res["cpu_taken_by_others_pct"] = cpu.pct()      # children count as ours: all reaped by now
    res["total_s"] = time.perf_counter() - t_start
    show_and_save(report(res), res, args.json, progress)
    progress(f"done in {res['total_s']:.0f} s")
    return 0

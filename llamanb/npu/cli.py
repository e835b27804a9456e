"""`python -m llamanb npu ...`: the stitched groups of a model, as files or as compiled artifacts.

    npu emit --out DIR [--preset NAME | --model PATH] [--seq N]
        DIR/<group>.mlir, DIR/kernels/<group>.<label>.mlir, DIR/manifest.json (per group: the
        arguments with roles, the launches with their herds and tiles, the kernels and objects
        linked). Written into a temporary directory and renamed into place.
    npu compile [--preset NAME | --model PATH] [--seq N] [--mode auto|emulated|xrt]
        every kernel and group into the artifact cache (llamanb.npu.compiler.compile), one line each with
        its compile time; "emulated" where no NPU toolchain is installed.
    npu smoke
        the first thing to run on a Ryzen AI machine (and to paste into a bug report): compile
        one GEMV group (2048 x 2048, as Llama-3.2-1B's Q projection) through mlir-air's ELF path,
        run it once through pyxrt, compare with float64 numpy, print the XRT state and the time.
        Where the stack is missing it prints one line, "not ready: ...", and exits 2.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from llamanb.errors import LlamanbError

NOTE = ("emulated NPU2 layout: modules for llamanb's emulator and for mlir-air; launch and argument "
        "counts are read back from the module text")


def add_parser(sub, model_arg, positive_int) -> None:
    n = sub.add_parser("npu", help="NPU kernels and stitched groups: emit MLIR, compile")
    nsub = n.add_subparsers(dest="npu_cmd", required=True, parser_class=type(n))
    nsub.add_parser("smoke", help="compile and run one GEMV group on the real NPU2, compare "
                                  "with numpy (prints 'not ready: ...' where it cannot)")
    for name, help_ in (("emit", "write each kernel and group as .mlir plus manifest.json"),
                        ("compile", "compile every kernel and group into the cache")):
        p = nsub.add_parser(name, help=help_)
        model_arg(p)
        p.add_argument("--preset", default=None, help="a config preset (smollm2-135m, llama3.2-1b, "
                       "...) instead of a model's own config; no weights needed")
        p.add_argument("--seq", type=positive_int, default=128, help="prefill rows of the groups")
        p.add_argument("--lm-parts", type=positive_int, default=8,
                       help="GEMV partitions of the LM head")
        if name == "emit":
            p.add_argument("--out", required=True, help="directory to write")
        else:
            p.add_argument("--mode", default="auto", choices=("auto", "emulated", "xrt"),
                           help="auto: xrt when mlir-air and Peano are installed, else emulated")


def _config(a):
    if a.preset:
        from llamanb.model.config import PRESETS

        if a.preset not in PRESETS:
            raise LlamanbError(f"unknown preset {a.preset!r}; known: {', '.join(PRESETS)}")
        return PRESETS[a.preset]
    from llamanb.io.store import load_model

    return load_model(a.model).config


def describe(groups) -> dict:
    """The manifest entry of each group: arguments, launches (herds, tiles), kernels, links."""
    from llamanb.npu.compiler.array import l1_need, omit_pingpong_of

    out = {}
    for g in groups.values():
        pp = omit_pingpong_of(g.spec)
        launches = []
        for lp, m in zip(g.plan.launches, g.members):
            launches.append({
                "index": lp.index, "sym": lp.sym, "kernel": m.label,
                "args": [g.spec.args[i].name for i in lp.args],
                "herds": [{"op": h.op, "size": list(h.size), "tiles": h.tiles,
                           "l1_bytes": h.l1_bytes, "l1_double_bytes": l1_need(h, ""),
                           "l1_as_compiled_bytes": l1_need(h, pp)} for h in lp.herds],
                "tile_sizes": dict(m.spec.tiles)})
        out[g.name] = {
            "phase": g.phase, "file": f"{g.name}.mlir", "launches": launches,
            "compile_options": dict(g.spec.backend),
            "arguments": [{"slot": i, "name": x.name, "shape": list(x.shape), "dtype": x.dtype,
                           "role": x.role} for i, x in enumerate(g.spec.args)],
            "kernels": [{"label": m.label, "kernel": m.spec.name,
                         "file": f"kernels/{g.name}.{m.label}.mlir",
                         "links": list(m.spec.links)} for m in g.members],
            "links": dict(g.plan.externs)}
    return out


def _replace_dir(tmp: Path, out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise LlamanbError(f"--out {out} exists and is not a directory")
        if any(out.iterdir()) and not (out / "manifest.json").is_file():
            raise LlamanbError(f"--out {out} is a non-empty directory that no `npu emit` wrote; "
                               f"refusing to replace it")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def cmd_emit(a) -> int:
    from llamanb.npu.compiler.groups import layer_groups

    cfg = _config(a)
    groups = layer_groups(cfg, a.seq, a.lm_parts)
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise LlamanbError(f"--out {out} exists and is not a directory")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise LlamanbError(f"--out {out}: parent directory {parent} does not exist")
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        (tmp / "kernels").mkdir()
        for g in groups.values():
            (tmp / f"{g.name}.mlir").write_text(g.spec.text)
            for m in g.members:
                (tmp / "kernels" / f"{g.name}.{m.label}.mlir").write_text(m.spec.text)
        manifest = {"note": NOTE, "model": cfg.name, "seq": a.seq, "lm_parts": a.lm_parts,
                    "groups": describe(groups)}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        _replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    n_k = sum(len(g.members) for g in groups.values())
    print(f"{cfg.name}: {len(groups)} groups ({n_k} kernels) written to {out} ({NOTE.split(':')[0]})")
    from llamanb.npu.compiler.array import NPU2, l1_need, omit_pingpong_of

    for g in groups.values():
        pp, hs = omit_pingpong_of(g.spec), [h for lp in g.plan.launches for h in lp.herds]
        single = max(h.l1_bytes for h in hs) / 1024
        double = max(l1_need(h, "") for h in hs) / 1024
        print(f"  {g.name:15s} {g.phase:8s} {g.launches} launch(es), {len(g.spec.args)} arguments;"
              f" L1 per tile (largest herd) {single:.1f} KiB single, {double:.1f} KiB double "
              f"buffered, omit_pingpong={pp!r} -> {max(l1_need(h, pp) for h in hs) / 1024:.1f} of "
              f"{NPU2.l1_bytes // 1024} KiB")
    return 0


def cmd_compile(a) -> int:
    from llamanb.npu.compiler.compile import compile as compile_spec
    from llamanb.npu.compiler.compile import resolve_mode
    from llamanb.npu.compiler.groups import layer_groups

    cfg = _config(a)
    groups = layer_groups(cfg, a.seq, a.lm_parts)
    mode, why = resolve_mode(a.mode)
    print(f"{cfg.name}: compiling {len(groups)} groups and their kernels, mode {mode}"
          + (f" ({why})" if why else ""))
    for g in groups.values():
        for m in g.members:
            art = compile_spec(m.spec, mode)
            print(f"  kernel {g.name + '.' + m.label:21s} {_how(art)}")
        art = compile_spec(g.spec, mode)
        print(f"  group  {g.name:21s} {_how(art)}  {art.manifest['launches']} launch(es)")
    return 0


def _how(art) -> str:
    return (f"{art.mode}, " + ("cache hit" if art.cache_hit else f"{art.seconds:.2f} s")
            + f"  {art.path}")


def cmd_smoke(a, xrt=None, missing=None) -> int:
    """One GEMV group, compiled, run on the NPU, compared; exit 0 when within the bound."""
    import time

    import numpy as np

    from llamanb.npu.readiness import npu2_missing
    from llamanb.model.numerics import to_bf16
    from llamanb.npu.compiler.builders import gemv
    from llamanb.npu.runtime.kernel_cache import KernelCache
    from llamanb.npu.runtime.devices import FROM_DEVICE, TO_DEVICE, XrtDevice, read, write

    miss = npu2_missing() if missing is None else missing
    if miss:
        print("not ready: missing " + "; ".join(miss))
        return 2
    m = k = 2048
    spec = gemv(m, k)
    dev = XrtDevice(xrt=xrt)
    kc = KernelCache(dev)
    t0 = time.perf_counter()
    kc.compile_and_cache("smoke_gemv", spec, {})
    t_compile = time.perf_counter() - t0
    kernel, _ = kc.load("smoke_gemv")
    rng = np.random.default_rng(0)
    A = to_bf16(rng.standard_normal((m, k)).astype(np.float32))
    x = to_bf16(rng.standard_normal(k).astype(np.float32))
    bos = [dev.alloc(arg.shape, arg.name) for arg in spec.args]
    for bo, arr in zip(bos, (A, x)):
        write(bo, arr, dev.counters)
        bo.sync(TO_DEVICE)
    t1 = time.perf_counter()
    dev.run(kernel, bos)                      # raises one line unless ERT_CMD_STATE_COMPLETED
    t_run = time.perf_counter() - t1
    bos[2].sync(FROM_DEVICE)
    y = read(bos[2], dev.counters)
    want = A.astype(np.float64) @ x
    # float32 accumulation over k, then one bf16 rounding
    bound = 2.0 ** -8 * np.abs(want) + k * 2.0 ** -24 * (np.abs(A) @ np.abs(x)) * 1.01
    bad = int(np.sum(np.abs(y - want) > bound))
    print(f"npu smoke: gemv {m}x{k} ELF {kc.root / 'smoke_gemv'}; compile {t_compile:.1f} s; "
          f"run ERT_CMD_STATE_COMPLETED in {t_run * 1e3:.2f} ms (host wall time of one xrt.run); "
          f"{m - bad}/{m} outputs within the bf16 bound of float64 numpy")
    return 0 if bad == 0 else 1


def main(a) -> int:
    return {"emit": cmd_emit, "compile": cmd_compile, "smoke": cmd_smoke}[a.npu_cmd](a)

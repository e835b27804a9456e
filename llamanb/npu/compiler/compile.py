"""Compiling a kernel or stitched group into an artifact directory in the cache, once.

    art = compile(spec)                   # Artifact(path, key, mode, cache_hit, seconds, manifest)
    art.path / "module.mlir"              # the module text (parsed by MLIR when its bindings exist)
    art.path / "plan.json"                # the launch plan, read back from that text
    art.manifest["mode"]                  # "emulated" (host builds) or "xrt" (mlir-air + Peano)

    $LLAMANB_CACHE/npu-artifacts/<name>-<key[:20]>/
        manifest.json    format, name, mode, key, arguments with roles, launches, links, toolchain
        module.mlir      plan.json
        emulated: host-kernels.so (the g++ build of kernels/*.cc the emulator calls), when built
        xrt:      <object>.o per linked kernel (Peano), <name>.elf from XRTBackend.compile, and in
                  the manifest the artifact it returned: "elf" and "kernel" ("main:<name>")

key = sha256(format, mode, module text, every kernel source and header, the toolchain: for xrt the
installed mlir-air / mlir_aie / llvm-aie distributions' versions and stamps of aircc, Peano's clang++
and mlir-air's libraries, llamanb.npu.locate.identity). Same key, same directory: a second compile
is a cache hit and builds nothing -- unless a file the manifest names is missing or empty, then it
is rebuilt and says so. A failed xrt compile keeps its work directory as <name>.failed/ beside the
artifacts, with compile.log (every command and its full output), and its error line names both. A directory is
assembled under a temporary name beside its final one and renamed into place (os.replace), so an
interrupted compile leaves nothing that looks finished, and two processes racing both end with one
complete artifact.

The real path imports mlir-air (`air.ir`, `air.backend.xrt.XRTBackend`) and Peano lazily, inside
`_compile_xrt`; without them mode="auto" falls back to "emulated" and says so in the manifest.
It does what mlir-air's Llama KernelCache.compile_and_cache does (Xilinx/mlir-air, programming_
examples/llms/shared/infra/cache.py:447-492): XRTBackend(**kwargs).compile(module,
output_binary_name=...) in a working directory that holds the kernels' objects (also under
air_project/, as prepare_air_project stages them, cache.py:16-67), and keeps the
XRTCompileArtifact it returns -- output_binary "<name>.elf" and kernel "main:<name>" (python/air/
backend/xrt.py:429-437, 573-611). The kwargs: ELF output, instance_name = the module's function,
target_device="npu2" (without it XRTBackend asks xrt-smi and falls back to npu1, for which ELF
output is refused, xrt.py:64-126, 381-386), omit_while_true_loop=False, then the spec's own
`backend` options (a group's omit_pingpong and runtime_loop_tiling_sizes).
A kernel compiled under a second symbol (matvec_bf16_k1536 in mv_k1536.o, the MLIR-AIR Llama guide's
mv_k8192.o trick) is the same source built with -D<kernel>=<symbol>.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from llamanb.errors import LlamanbError
from llamanb.io.store import cache_root
from llamanb.platform import cxx_build as hostbuild
from llamanb.npu.compiler.extern import SOURCES
from llamanb.npu.compiler.plan import read_plan
from llamanb.npu.compiler.textir import read_module

FORMAT = "llamanb-npu-artifact-v1"
MODES = ("auto", "emulated", "xrt")
STATS = {"compiled": 0, "hits": 0}        # counted per process (tests count cache hits here)


@dataclass(frozen=True)
class Artifact:
    path: Path
    name: str
    key: str
    mode: str                 # "emulated" | "xrt"
    cache_hit: bool
    seconds: float            # wall time of this call (0-ish on a hit)
    manifest: dict

    @property
    def text(self) -> str:
        return (self.path / "module.mlir").read_text()

    @property
    def plan(self) -> dict:
        return json.loads((self.path / "plan.json").read_text())

    @property
    def elf(self) -> Path | None:
        """The ELF XRTBackend wrote (mode "xrt"), else None."""
        return self.path / self.manifest["elf"] if self.manifest.get("elf") else None

    @property
    def kernel(self) -> str | None:
        """The kernel name the ELF is loaded by, "main:<function>" (mode "xrt"), else None."""
        return self.manifest.get("kernel")

    def __str__(self) -> str:
        how = "cache hit" if self.cache_hit else f"compiled in {self.seconds:.2f} s"
        if not self.cache_hit and self.manifest.get("rebuilt"):
            how += f", rebuilt: {self.manifest['rebuilt']}"
        return (f"{self.name}: {self.mode} artifact {self.path.name} ({how}, "
                f"{self.manifest['launches']} launch(es), {len(self.manifest['args'])} arguments)")


def artifacts_root() -> Path:
    return cache_root() / "npu-artifacts"


def plan_json(text: str) -> dict:
    """The launch plan of a module, as JSON-able data (read back from the text)."""
    p = read_plan(text)
    return {
        "func": p.func,
        "args": [{"name": n, "type": t} for n, t in p.args],
        "externs": p.externs,
        "launches": [{
            "index": lp.index, "sym": lp.sym, "sizes": list(lp.sizes), "args": list(lp.args),
            "operands": list(lp.operands), "l2_bytes": lp.l2_bytes, "tiles": lp.tiles,
            "herds": [{"sym": h.sym, "op": h.op, "size": list(h.size), "instances": h.instances,
                       "tiles": h.tiles, "l1_bytes": h.l1_bytes,
                       "externs": [list(e) for e in h.externs]} for h in lp.herds]}
            for lp in p.launches]}


def links(text: str) -> list[dict]:
    """Each external kernel the module declares: symbol, object, the C kernel it is, its source."""
    out = []
    for sym, d in read_module(text).externs.items():
        impl = str(d.attrs.get("llamanb.impl", sym))
        if impl not in SOURCES:
            raise LlamanbError(f"@{sym} is no known external kernel (known: {', '.join(SOURCES)})")
        out.append({"symbol": sym, "object": str(d.attrs.get("link_with", "")), "impl": impl,
                    "source": SOURCES[impl]})
    return out


def _air_available() -> bool:
    try:
        importlib.import_module("air.ir")
        importlib.import_module("air.backend.xrt")
        return True
    except Exception:                     # noqa: BLE001 - any failure means "not usable here"
        return False


def _peano_version(peano_dir) -> str:
    import subprocess

    from llamanb.npu.compiler.peano import peano_clang

    clang = peano_clang(peano_dir)
    out = subprocess.run([str(clang), "--version"], capture_output=True, text=True, timeout=60)
    return (out.stdout.splitlines() or [str(clang)])[0]


def resolve_mode(mode: str, peano_dir=None) -> tuple[str, str]:
    """(mode to use, why) -- "auto" is "xrt" when mlir-air, its aircc and Peano are all here, found
    where `python -m llamanb info` finds them (llamanb.npu.locate)."""
    from llamanb.npu.locate import find_aircc, find_peano

    if mode not in MODES:
        raise LlamanbError(f"compile mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "auto":
        return mode, ""
    if not _air_available():
        return "emulated", "mlir-air (air.ir, air.backend.xrt) is not installed"
    for found in (find_aircc(), find_peano(peano_dir)):
        if not found:
            return "emulated", "missing " + found.missing
    return "xrt", ""


def toolchain(mode: str, peano_dir=None) -> dict:
    """What builds an artifact, for its key. mode "xrt": the installed distributions' versions and
    stamps of aircc, Peano's clang++ and mlir-air's libraries (llamanb.npu.locate.identity; `air`
    is a namespace package without __version__), and Peano's version line."""
    if mode == "emulated":
        cxx, why = hostbuild.compiler()
        ver = hostbuild._VERSIONS.get(cxx, "").splitlines()[:1] if cxx else []
        return {"host_cxx": (ver[0] if ver else "") or why, "host_flags": list(hostbuild.FLAGS)}
    from llamanb.npu.locate import identity

    return {**identity(peano_dir), "peano": _peano_version(peano_dir)}


def backend_kwargs(spec) -> dict:
    """XRTBackend's keyword arguments for `spec`: the ELF defaults, then the spec's options."""
    kw = {"verbose": False, "omit_while_true_loop": False, "output_format": "elf",
          "instance_name": spec.name, "target_device": "npu2"}
    kw.update(dict(getattr(spec, "backend", None) or {}))
    return kw


def fingerprint(text: str, mode: str, tools: dict, kernels_dir: Path = hostbuild.KERNELS_DIR,
                options: dict | None = None) -> str:
    h = hashlib.sha256(f"{FORMAT}\0{mode}\0".encode())
    h.update(text.encode())
    h.update(json.dumps(options or {}, sort_keys=True).encode())
    for p in hostbuild.sources(kernels_dir) if Path(kernels_dir).is_dir() else []:
        h.update(b"\0" + p.name.encode() + b"\0" + p.read_bytes())
    h.update(json.dumps(tools, sort_keys=True).encode())
    return h.hexdigest()


def _write(path: Path, data: str) -> None:
    path.write_text(data)


def _verify(text: str) -> str:
    from llamanb.npu.compiler import verify as V

    if not V.available():
        return "skipped: MLIR Python bindings not installed"
    V.verify(text)
    return ("parsed by upstream MLIR (AIR ops unregistered there: no AIR verifier ran), AIR "
            "structure checked by llamanb.npu.compiler.verify")


def _compile_emulated(spec, tmp: Path) -> dict:
    built = hostbuild.build()
    if built is None:
        return {"host_build": None, "host_build_reason": hostbuild.reason() or "not built"}
    shutil.copyfile(built.path, tmp / "host-kernels.so")
    return {"host_build": "host-kernels.so", "host_build_key": built.key}


LOG = "compile.log"


def _log(tmp: Path, *lines: str) -> None:
    """Append to the work directory's compile.log (every command and its full output)."""
    with open(tmp / LOG, "a") as f:
        f.write("\n".join(lines) + "\n")


def _compile_xrt(spec, tmp: Path, lk: list[dict], peano_dir=None) -> dict:
    """Peano objects for the linked kernels, then mlir-air's XRTBackend on the module.

    Every command and its full output go to tmp/compile.log (a failure keeps the directory, see
    compile). XRTBackend runs with PEANO_INSTALL_DIR set to the Peano the objects were built with,
    so aircc links them with the same one (it takes PEANO_INSTALL_DIR first, xrt.py:404-427)."""
    import subprocess

    from llamanb.npu.compiler.peano import PEANO_FLAGS, peano_clang
    from llamanb.npu.locate import find_aircc, find_peano

    clang = peano_clang(peano_dir)
    aircc = find_aircc()
    if not aircc:                  # XRTBackend would fail in resolve_tool (xrt.py:559-563)
        raise LlamanbError(f"{spec.name}: missing {aircc.missing}")
    peano_root = find_peano(peano_dir).path
    _log(tmp, f"# {spec.name}: Peano {peano_root} ({clang}), aircc {aircc.path} ({aircc.how})")
    objects = {}
    for link in lk:
        obj = link["object"]
        if obj in objects:
            continue
        define = [] if link["symbol"] == link["impl"] else [f"-D{link['impl']}={link['symbol']}"]
        argv = [str(clang), *PEANO_FLAGS, *define, "-c",
                str(hostbuild.KERNELS_DIR / link["source"]), "-o", str(tmp / obj)]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        _log(tmp, "$ " + " ".join(argv), run.stdout, run.stderr, f"# exit {run.returncode}")
        if run.returncode != 0:
            errors = [ln for ln in run.stderr.splitlines() if "error" in ln.lower()][:3]
            raise LlamanbError(f"Peano failed on {link['source']}: "
                               + (" | ".join(errors) or f"exit {run.returncode}"))
        objects[obj] = link["source"]
    staged = tmp / "air_project"                 # where prepare_air_project puts them
    staged.mkdir()
    for obj in objects:
        shutil.copyfile(tmp / obj, staged / obj)
    air_ir = importlib.import_module("air.ir")
    xrt_backend = importlib.import_module("air.backend.xrt")
    kw = backend_kwargs(spec)
    _log(tmp, f"# XRTBackend({kw}).compile(module, output_binary_name={spec.name!r})")
    backend = xrt_backend.XRTBackend(**kw)
    before = set(os.listdir(tmp))
    cwd = os.getcwd()
    env_peano = os.environ.get("PEANO_INSTALL_DIR")
    os.environ["PEANO_INSTALL_DIR"] = str(peano_root)
    os.chdir(tmp)                  # aircc writes its project and outputs into the working dir
    try:
        with air_ir.Context():
            module = air_ir.Module.parse(spec.text)
            art = backend.compile(module, output_binary_name=spec.name)
    except LlamanbError:
        raise
    except Exception as e:         # noqa: BLE001 - AirBackendError and whatever aircc raised
        full = str(e).strip()
        _log(tmp, f"# XRTBackend.compile raised {type(e).__name__}:", full)
        lines = [ln for ln in full.splitlines() if ln.strip()]
        gist = lines[0] + (f" ... {lines[-1]}" if len(lines) > 1 else "") if lines else ""
        raise LlamanbError(f"{spec.name}: mlir-air's XRTBackend.compile failed: "
                           f"{type(e).__name__}: {gist}") from None
    finally:
        os.chdir(cwd)
        if env_peano is None:
            os.environ.pop("PEANO_INSTALL_DIR", None)
        else:
            os.environ["PEANO_INSTALL_DIR"] = env_peano
        if hasattr(backend, "unload"):
            backend.unload()
    elf = Path(str(getattr(art, "output_binary", "")))
    elf = elf if elf.is_absolute() else tmp / elf
    want = f"main:{spec.name}"
    if elf.suffix != ".elf" or not elf.is_file() or getattr(art, "kernel", None) != want:
        raise LlamanbError(f"{spec.name}: XRTBackend.compile returned output_binary "
                           f"{getattr(art, 'output_binary', None)!r} and kernel "
                           f"{getattr(art, 'kernel', None)!r}; want an existing .elf and {want!r}")
    if elf.parent != tmp:
        shutil.copyfile(elf, tmp / elf.name)
    return {"objects": objects, "backend_kwargs": kw, "elf": elf.name, "kernel": art.kernel,
            "peano_dir": str(peano_root), "aircc": str(aircc.path),
            "backend_outputs": sorted(set(os.listdir(tmp)) - before)}


def _failed_dir(root: Path, name: str) -> Path:
    return root / f"{name}.failed"


def _keep_failed(root: Path, name: str, tmp: Path) -> Path | None:
    """Move a failed compile's work directory to root/<name>.failed (the last failure per name is
    kept: its compile.log, aircc's air_project/, the objects), replacing an older one."""
    dest = _failed_dir(root, name)
    try:
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except OSError:
        return None
    return dest


def _intact(path: Path, manifest: dict) -> str:
    """"" when every file an artifact's manifest names is there and not empty, else which is not
    (a cache hit on an entry whose ELF was deleted would be served forever: `compile it again`
    must rebuild it)."""
    names = ["module.mlir", "plan.json"]
    names += [manifest[k] for k in ("elf", "host_build") if manifest.get(k)]
    names += list(manifest.get("objects") or {})
    for n in names:
        p = path / n
        try:
            if p.stat().st_size == 0:
                return f"{n} is empty"
        except OSError:
            return f"{n} is missing"
    return ""


def compile(spec, mode: str = "auto", root: Path | None = None, peano_dir=None) -> Artifact:
    """The artifact of `spec` (a KernelSpec or stitched group), compiled now or found in the cache."""
    t0 = time.perf_counter()
    if not getattr(spec, "text", None) or not getattr(spec, "name", None):
        raise LlamanbError(f"compile needs a KernelSpec (name, text), got {type(spec).__name__}")
    mode, why = resolve_mode(mode, peano_dir)
    tools = toolchain(mode, peano_dir)
    options = backend_kwargs(spec) if mode == "xrt" else dict(getattr(spec, "backend", {}) or {})
    key = fingerprint(spec.text, mode, tools, options=options)
    root = Path(root) if root is not None else artifacts_root()
    final = root / f"{spec.name}-{key[:20]}"
    damaged = ""
    if (final / "manifest.json").is_file():
        try:
            manifest = json.loads((final / "manifest.json").read_text())
        except (OSError, ValueError) as e:
            manifest, damaged = {}, f"manifest.json unreadable ({type(e).__name__})"
        if manifest.get("key") == key:
            damaged = _intact(final, manifest)
            if not damaged:
                STATS["hits"] += 1
                return Artifact(final, spec.name, key, mode, True, time.perf_counter() - t0,
                                manifest)
    plan = plan_json(spec.text)          # before anything is written: a bad module fails here
    lk = links(spec.text)
    verified = _verify(spec.text)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{spec.name}-{key[:8]}-", suffix=".tmp"))
    try:
        _write(tmp / "module.mlir", spec.text)
        _write(tmp / "plan.json", json.dumps(plan, indent=1))
        extra = _compile_emulated(spec, tmp) if mode == "emulated" else \
            _compile_xrt(spec, tmp, lk, peano_dir)
        manifest = {
            "format": FORMAT, "name": spec.name, "mode": mode, "key": key,
            "note": ("emulated: runs on llamanb's emulated NPU2 (llamanb.npu.compiler.emulator), "
                     "no device code was built" if mode == "emulated" else
                     "compiled by mlir-air's XRTBackend for the NPU"),
            "why_mode": why,
            "verified": verified,
            "args": [{"slot": i, "name": a.name, "shape": list(a.shape), "dtype": a.dtype,
                      "role": a.role} for i, a in enumerate(spec.args)],
            "launches": len(plan["launches"]),
            "herds": [{"op": h["op"], "size": h["size"], "tiles": h["tiles"]}
                      for lp in plan["launches"] for h in lp["herds"]],
            "tiles": dict(getattr(spec, "tiles", {}) or {}),
            "links": lk,
            "toolchain": tools,
            **extra,
        }
        if damaged:
            manifest["rebuilt"] = f"the cached entry was damaged: {damaged}"
        _write(tmp / "manifest.json", json.dumps(manifest, indent=1))
        if damaged:                      # a damaged entry is replaced, not kept
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            # another process finished the same key first: keep theirs
            if not (final / "manifest.json").is_file():
                raise
    except LlamanbError as e:
        kept = _keep_failed(root, spec.name, tmp) if (tmp / LOG).is_file() else None
        if kept is None:
            raise
        raise LlamanbError(f"{e} (full log: {kept / LOG}; work directory kept: {kept})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    STATS["compiled"] += 1
    manifest = json.loads((final / "manifest.json").read_text())
    return Artifact(final, spec.name, key, mode, False, time.perf_counter() - t0, manifest)


def load(path) -> Artifact:
    """An artifact directory written by compile (LlamanbError when it is not one)."""
    path = Path(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise LlamanbError(f"{path} is not an NPU artifact ({e.__class__.__name__})") from None
    if manifest.get("format") != FORMAT:
        raise LlamanbError(f"{path}: artifact format {manifest.get('format')!r}, want {FORMAT}")
    return Artifact(path, manifest["name"], manifest["key"], manifest["mode"], True, 0.0, manifest)

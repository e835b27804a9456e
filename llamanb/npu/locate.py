"""Where a Ryzen AI machine's NPU2 set-up is: Peano, aircc, the mlir-air install, the device node.

One function per piece, used by everything that asks -- `python -m llamanb info` (readiness), the
compile path (llamanb.npu.compiler.compile, .peano) and the kernel cache's key -- so that "ready"
and "compiles" cannot disagree. Each looks where mlir-air itself looks (Xilinx/mlir-air, snapshot
e972f2942; line numbers below are of that snapshot):

    Peano     find_peano()    an explicit directory, else $PEANO_INSTALL_DIR when it is a directory
                              (upstream ignores one that is not, python/air/backend/xrt.py:404-414),
                              else the llvm-aie wheel: distribution("llvm-aie").locate_file("llvm-aie")
                              (xrt.py:129-144), else a `llvm-aie` directory in the site dirs
                              (xrt.py:146-157). It must hold bin/clang++ (the kernels' compiler,
                              programming_examples/llms/shared/infra/external_kernels.py:20-25).
    aircc     find_aircc()    the copy bundled in the mlir-air wheel, <mlir_air>/bin/aircc, first;
                              then PATH (python/air/tools.py:34-58, resolve_tool, which
                              XRTBackend.compile calls, xrt.py:559-563). The wheel's package root is
                              two levels above the `air` package directory (mlir_air/python/air,
                              tools.py:23-26; the wheel's air.pth puts mlir_air/python on sys.path,
                              utils/mlir_air_wheels/setup.py:270-277), so a venv used without
                              activation (no venv/bin on PATH) still finds it.
    versions  identity()      the installed distributions' versions -- "mlir-air" (the wheel's
                              project name, utils/mlir_air_wheels/pyproject.toml:2; `air` itself is a
                              namespace package with no __init__.py and so no __version__),
                              "mlir_aie" / "mlir_aie_no_rtti" (setup.py:331) and "llvm-aie" -- plus
                              size:mtime stamps of the aircc binary, Peano's clang++ and mlir-air's
                              compiled _air*.so, as mlir-air's own Llama KernelCache stamps its
                              toolchain (programming_examples/llms/shared/infra/cache.py:343-395): a
                              local build keeps its version string and changes its binaries.
    device    device_missing()  a /sys/class/accel/accel* node bound to amdxdna, its /dev/accel
                              node present and readable and writable by this user.

Nothing here imports mlir-air or pyxrt: packages are looked up, files are stat'ed.
"""
from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import shutil
import site
import sys
from dataclasses import dataclass
from pathlib import Path

MLIR_AIR_DIST = "mlir-air"                          # pyproject.toml:2
MLIR_AIE_DISTS = ("mlir_aie", "mlir_aie_no_rtti")   # setup.py:331
PEANO_DIST = "llvm-aie"                             # xrt.py:140, setup.py:337


@dataclass(frozen=True)
class Found:
    """A located tool: `path` (None when not found), `how` it was found, and `missing`: the one
    phrase readiness prints and the compile error says when it is not usable ("" when it is)."""
    path: Path | None
    how: str = ""
    missing: str = ""

    def __bool__(self) -> bool:
        return self.path is not None and not self.missing


# ------------------------------------------------------------------------------------- Peano

def _site_dirs() -> list[str]:
    """xrt.py:148-152: site.getsitepackages() and the user site."""
    dirs = list(site.getsitepackages())
    try:
        dirs.append(site.getusersitepackages())
    except Exception:                  # noqa: BLE001 - as upstream
        pass
    return dirs


def _peano_package() -> tuple[Path | None, str]:
    """xrt.py:_find_peano_install_dir (129-157): the llvm-aie distribution's data directory, else a
    `llvm-aie` directory in a site dir."""
    try:
        cand = importlib.metadata.distribution(PEANO_DIST).locate_file("llvm-aie")
        if os.path.isdir(cand):
            return Path(os.path.abspath(cand)), f"the {PEANO_DIST} package"
    except Exception:                  # noqa: BLE001 - not installed, or odd metadata: as upstream
        pass
    for d in _site_dirs():
        for match in glob.glob(os.path.join(d, "llvm-aie")):
            if os.path.isdir(match):
                return Path(os.path.abspath(match)), f"{match} (no {PEANO_DIST} metadata)"
    return None, ""


def find_peano(peano_dir=None) -> Found:
    """Peano's install directory (its bin/clang++ compiles the kernels), in upstream's order."""
    if peano_dir is not None and str(peano_dir):
        root, how, note = Path(peano_dir), "the directory given", ""
    else:
        env = os.environ.get("PEANO_INSTALL_DIR", "")
        note = ""
        if env and not os.path.isdir(env):               # xrt.py:409-414: ignored, said so
            note = f"PEANO_INSTALL_DIR={env} is not a directory (ignored, as mlir-air does); "
            env = ""
        if env:
            root, how = Path(env), "PEANO_INSTALL_DIR"
        else:
            root, how = _peano_package()
            if root is None:
                return Found(None, "", note + "Peano (PEANO_INSTALL_DIR or the llvm-aie package)")
    clang = root / "bin" / "clang++"
    if not clang.is_file():
        return Found(None, how, f"Peano's clang++ not found at {clang} (Peano from {how})")
    return Found(root, how)


def peano_clang_path(peano_dir=None) -> Found:
    """find_peano, with `path` the clang++ inside it."""
    f = find_peano(peano_dir)
    return Found(f.path / "bin" / "clang++", f.how) if f else f


# ------------------------------------------------------------------------------------- aircc

def air_package_dirs() -> list[Path]:
    """The directories of the `air` package (a namespace package: __path__, no __file__), without
    importing it; an `air` already in sys.modules is asked for its __path__."""
    mod = sys.modules.get("air")
    if mod is not None:
        paths = list(getattr(mod, "__path__", None) or [])
    else:
        try:
            spec = importlib.util.find_spec("air")
        except (ImportError, ValueError):
            spec = None
        paths = list(spec.submodule_search_locations or []) if spec is not None else []
    return [Path(p) for p in paths]


def _exe(name: str) -> str:
    return f"{name}.exe" if os.name == "nt" else name      # tools.py:29-31


def bundled_tool_paths(name: str) -> list[Path]:
    """<mlir_air>/bin/<name> for each air package directory (tools.py:23-36)."""
    out = []
    for d in air_package_dirs():
        parents = d.resolve().parents
        if len(parents) >= 2:
            out.append(parents[1] / "bin" / _exe(name))
    return out


def find_tool(name: str) -> Found:
    """resolve_tool (tools.py:39-58): the bundled binary if it is a file, else PATH. A file that is
    not executable is found but not usable (aircc would fail with EACCES)."""
    bundled = bundled_tool_paths(name)
    path, how = next(((p, "the mlir-air package") for p in bundled if p.is_file()), (None, ""))
    if path is None:
        which = shutil.which(_exe(name))
        path, how = (Path(which), "PATH") if which else (None, "")
    if path is None:
        if not bundled:            # no mlir-air package: PATH was the only place to look
            return Found(None, "", f"the {name} compiler on PATH (mlir-air)")
        where = ", ".join(str(p) for p in bundled)
        return Found(None, "", f"the {name} compiler (mlir-air): not in the mlir-air package "
                     f"({where}) and not on PATH")
    if not os.access(path, os.X_OK):
        return Found(None, how, f"{name}: {path} is not executable")
    return Found(path, how)


def find_aircc() -> Found:
    return find_tool("aircc")


# ------------------------------------------------------------------------------------- identity

def dist_version(*names: str) -> str:
    """`name version` of the first of `names` installed, else "absent"."""
    for n in names:
        try:
            return f"{n} {importlib.metadata.version(n)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "absent"


def stamp(path) -> str:
    """name:size:mtime of a file (cache.py:371-373, 386-391: one stat, so a rebuild between two
    calls cannot pair a stale size with a fresh mtime); "absent" when there is none."""
    if path is None:
        return "absent"
    try:
        st = os.stat(path)
    except OSError:
        return "absent"
    return f"{Path(path).name}:{st.st_size}:{st.st_mtime_ns}"


def identity(peano_dir=None) -> dict:
    """What built a real NPU artifact, for its cache key: distribution versions and tool stamps."""
    libs = sorted(lib for d in air_package_dirs() for lib in (d / "_mlir_libs").glob("_air*.so"))
    clang = peano_clang_path(peano_dir)
    return {"mlir-air": dist_version(MLIR_AIR_DIST), "mlir_aie": dist_version(*MLIR_AIE_DISTS),
            "llvm-aie": dist_version(PEANO_DIST), "aircc": stamp(find_aircc().path),
            "air_libs": ";".join(stamp(p) for p in libs) or "absent",
            "peano_clang": stamp(clang.path), "peano_from": clang.how}


# ------------------------------------------------------------------------------------- device

def device_missing(sys_root: Path = Path("/sys/class/accel"), dev_root: Path = Path("/dev/accel"),
                   access=os.access) -> tuple[str, ...]:
    """() when an accel node bound to amdxdna exists and this user may open it read-write, else one
    phrase saying which step of that fails (no node, wrong or no driver, no /dev node, no access)."""
    nodes = sorted(sys_root.glob("accel*")) if sys_root.is_dir() else []
    if not nodes:              # no accel device at all (or no driver created one)
        return (f"a {dev_root}/accel* node bound to the amdxdna driver",)
    amd, other = [], []
    for n in nodes:
        drv = n / "device" / "driver"
        if not drv.exists():
            other.append(f"{n.name} has no driver bound")
        elif drv.resolve().name != "amdxdna":
            other.append(f"{n.name} is bound to {drv.resolve().name}")
        else:
            amd.append(n.name)
    if not amd:
        return (f"a {dev_root}/accel* node bound to the amdxdna driver ({'; '.join(other)})",)
    problems = []
    for name in amd:
        node = dev_root / name
        if not node.exists():
            problems.append(f"the device node {node} ({name} is bound to amdxdna in {sys_root}, "
                            f"but {node} does not exist)")
        elif not access(node, os.R_OK | os.W_OK):
            problems.append(f"read-write access to {node} ({_owner(node)}; this user may not "
                            f"open it)")
        else:
            return ()
    return (problems[0],)


def _owner(node: Path) -> str:
    import grp
    import pwd
    import stat as st

    s = node.stat()
    try:
        user = pwd.getpwuid(s.st_uid).pw_name
    except KeyError:
        user = str(s.st_uid)
    try:
        group = grp.getgrgid(s.st_gid).gr_name
    except KeyError:
        group = str(s.st_gid)
    mode = st.S_IMODE(s.st_mode)
    hint = f": add this user to group {group}" if mode & 0o060 == 0o060 else ""
    return f"owned by {user}:{group}, mode {mode:04o}{hint}"

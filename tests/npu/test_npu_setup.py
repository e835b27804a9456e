"""Setting up the real NPU2 path on a Ryzen AI machine: where Peano, aircc and the mlir-air
version are found (as mlir-air finds them: llamanb/npu/locate.py cites the lines), what a hung run,
a failed compile, a damaged cache entry and a half-working device look like -- each one line.

Everything runs on fakes: a site dir holding the files the mlir-air and llvm-aie wheels install
(tests/npu/npu_fakes.py), a sysfs tree, the contract fakes of pyxrt and XRTBackend. The references
are upstream's rules (the wheel's paths, the distribution's metadata), not llamanb's code."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from llamanb.npu import readiness
from llamanb.errors import LlamanbError
from llamanb.npu import locate
from llamanb.npu.compiler import compile as C
from llamanb.npu.compiler import peano
from llamanb.npu.compiler.builders import gemv

import npu_fakes

AIR = ("pyxrt", "air", "air.ir", "air.backend.xrt")


def _modules(*present):
    return lambda name: name in present


def fake_llvm_aie_wheel(site_dir: Path, version: str = "19.0.0.2026082104+b2a279c1") -> Path:
    """What `pip install llvm-aie` leaves in a site dir: the `llvm-aie` data directory (bin/clang++
    in it) and the llvm_aie-<version>.dist-info whose locate_file("llvm-aie") names it
    (Xilinx/mlir-air python/air/backend/xrt.py:129-144)."""
    root = npu_fakes.fake_peano(site_dir / "llvm-aie")
    npu_fakes.set_dist_version(site_dir, version, name="llvm-aie")
    return root


@pytest.fixture
def clean(tmp_path, monkeypatch):
    """No Peano, no mlir-air, no aircc visible: PEANO_INSTALL_DIR unset, the site-dir scan limited
    to tmp_path/site, PATH an empty directory, no `air` imported."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (tmp_path / "emptybin").mkdir()
    monkeypatch.delenv("PEANO_INSTALL_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "emptybin"))
    monkeypatch.setattr(locate, "_site_dirs", lambda: [str(site_dir)])
    for m in ("air", "air.ir", "air.backend", "air.backend.xrt"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "cache"))
    return site_dir


# ---- 1. Peano from the llvm-aie wheel: info and compile agree -------------------------------------
def test_peano_from_the_wheel_is_ready_and_compiles(clean, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(clean))
    wheel = fake_llvm_aie_wheel(clean)
    # info: ready as far as Peano goes
    assert readiness.peano_found()
    got = readiness.npu2_missing(_modules(*AIR), lambda: ["/dev/accel/accel0"],
                                tool=lambda t: True)
    assert got == ()
    # compile: the same clang++
    assert peano.peano_clang() == wheel / "bin" / "clang++"
    objs = peano.compile_objects(tmp_path / "objs")
    assert sorted(objs) == ["mv.o", "rope.o", "silu_and_mul.o"]
    # a PEANO_INSTALL_DIR that is no directory is ignored, as mlir-air ignores it (xrt.py:409-414)
    monkeypatch.setenv("PEANO_INSTALL_DIR", str(tmp_path / "typo"))
    assert peano.peano_clang() == wheel / "bin" / "clang++" and readiness.peano_found()


def test_without_peano_info_and_compile_say_the_same_line(clean, tmp_path, monkeypatch):
    got = readiness.npu2_missing(_modules(*AIR), lambda: ["/dev/accel/accel0"],
                                tool=lambda t: True)
    assert got == ("Peano (PEANO_INSTALL_DIR or the llvm-aie package)",)
    with pytest.raises(LlamanbError) as e:
        peano.peano_clang()
    msg = str(e.value)
    assert msg.startswith("missing Peano: PEANO_INSTALL_DIR is not set and no llvm-aie package")
    assert "\n" not in msg
    # a typo'd PEANO_INSTALL_DIR and no wheel: both say the variable was ignored and why
    monkeypatch.setenv("PEANO_INSTALL_DIR", str(tmp_path / "typo"))
    got = readiness.npu2_missing(_modules(*AIR), lambda: ["/dev/accel/accel0"],
                                tool=lambda t: True)
    assert "typo is not a directory" in got[0]
    with pytest.raises(LlamanbError, match="typo is not a directory"):
        peano.peano_clang()


# ---- 2. aircc bundled in the mlir-air wheel, found without PATH --------------------------------
def _wheel_on_path(site_dir: Path, monkeypatch) -> Path:
    """The mlir-air wheel's files, and mlir_air/python on sys.path as its air.pth puts it
    (utils/mlir_air_wheels/setup.py:270-277), so `air` is found as the namespace package it is."""
    air_dir = npu_fakes.fake_air_wheel(site_dir)
    monkeypatch.syspath_prepend(str(site_dir))
    monkeypatch.syspath_prepend(str(site_dir / "mlir_air" / "python"))
    return air_dir


def test_aircc_bundled_in_the_wheel_is_found_with_no_venv_on_path(clean, monkeypatch):
    _wheel_on_path(clean, monkeypatch)
    bundled = clean / "mlir_air" / "bin" / "aircc"
    assert locate.air_package_dirs() == [clean / "mlir_air" / "python" / "air"]
    assert locate.find_aircc().path == bundled
    got = readiness.npu2_missing(_modules(*AIR), lambda: ["/dev/accel/accel0"],
                                peano=lambda: True)
    assert got == ()


def test_aircc_lookup_order_is_upstreams(clean, tmp_path, monkeypatch):
    """resolve_tool (tools.py:39-58): the bundled binary first, then PATH; neither: one line
    naming where it looked; a bundled file that cannot run is not ready."""
    onpath = tmp_path / "emptybin" / "aircc"
    onpath.write_text("#!/bin/sh\n")
    onpath.chmod(0o755)
    assert locate.find_aircc().path == onpath and locate.find_aircc().how == "PATH"
    _wheel_on_path(clean, monkeypatch)
    bundled = clean / "mlir_air" / "bin" / "aircc"
    assert locate.find_aircc().path == bundled                 # preferred over PATH
    onpath.unlink()
    bundled.chmod(0o644)
    f = locate.find_aircc()
    assert not f and f.missing == f"aircc: {bundled} is not executable"
    bundled.unlink()
    got = readiness.npu2_missing(_modules(*AIR), lambda: ["/dev/accel/accel0"],
                                peano=lambda: True)
    assert len(got) == 1 and str(bundled) in got[0] and "not on PATH" in got[0]


def test_compile_auto_needs_the_aircc_info_needs(clean, tmp_path, monkeypatch):
    """`npu compile` in auto mode and `info` use one lookup: no aircc, no xrt mode."""
    for name, mod in npu_fakes.air_modules([], _wheel_on_path(clean, monkeypatch)).items():
        monkeypatch.setitem(sys.modules, name, mod)
    fake_llvm_aie_wheel(clean)
    assert C.resolve_mode("auto") == ("xrt", "")
    (clean / "mlir_air" / "bin" / "aircc").unlink()
    mode, why = C.resolve_mode("auto")
    assert mode == "emulated" and "aircc" in why and why == "missing " + locate.find_aircc().missing


# ---- 3. a hung run waits with a timeout --------------------------------------------------------
def _gemv_run(tmp_path, xrt, **dev_kw):
    from llamanb.npu.runtime import devices as D

    spec = gemv(16, 64)
    elf = tmp_path / "gemv.elf"
    elf.write_bytes(npu_fakes.ELF_MAGIC + json.dumps({"kernels": ["main:gemv"],
                                                      "module": spec.text}).encode())
    dev = D.XrtDevice(xrt=xrt, **dev_kw)
    k = dev.kernel(D.ElfArtifact("gemv", str(elf), "main:gemv", spec))
    bos = [dev.alloc(a.shape, a.name) for a in spec.args]
    for bo in bos:
        bo.sync(D.TO_DEVICE)
    dev.run(k, bos)
    return dev


def test_a_hung_run_is_one_line_naming_the_group_and_the_timeout(tmp_path):
    log: list = []
    with pytest.raises(LlamanbError) as e:         # the fake raises BlockedForever on a wait
        _gemv_run(tmp_path, npu_fakes.make_pyxrt(log, hang=("gemv",)))   # with no timeout
    msg = str(e.value)
    assert "\n" not in msg and "gemv" in msg and "60 s" in msg and "TIMEOUT" in msg
    assert ("wait", "main:gemv", 60000) in log      # mlir-air's examples' wait(60000), in ms
    log.clear()
    with pytest.raises(LlamanbError, match="2.5 s"):
        _gemv_run(tmp_path, npu_fakes.make_pyxrt(log, hang=("gemv",)), timeout_s=2.5)
    assert ("wait", "main:gemv", 2500) in log
    _gemv_run(tmp_path, npu_fakes.make_pyxrt())     # a run that completes is unaffected
    for bad in (0, -1, "5", float("nan"), 5e6):
        with pytest.raises(LlamanbError, match="timeout"):
            _gemv_run(tmp_path, npu_fakes.make_pyxrt(), timeout_s=bad)


def test_the_fake_binds_the_waits_pyxrt_binds():
    """pyxrt.cpp:436-447: wait() and wait(unsigned ms) -> ert_cmd_state; wait2() -> None; wait2 with
    a timeout has no Python converter (no <pybind11/chrono.h>), so any argument is refused."""
    xrt = npu_fakes.make_pyxrt()
    r = xrt.run.__new__(xrt.run)
    r.kernel = type("K", (), {"name": "main:k"})()
    r._state = xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED
    assert r.wait(10) is xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED and r.wait2() is None
    for args in ((5000,), (5.0,)):
        with pytest.raises(TypeError, match="incompatible"):
            r.wait2(*args)
    for args in ((-1,), (2 ** 32,), (1.5,)):
        with pytest.raises(TypeError, match="incompatible"):
            r.wait(*args)


# ---- 4. a failed compile keeps its full log -----------------------------------------------------
AIRCC_STDERR = ("error: 'aie.dma_bd' op Cannot give more than 16 buffer descriptors\n"
                "note: see current operation: ...\n"
                "air-opt: pass pipeline failed at air-to-aie\n"
                "aircc: lowering failed")


def test_a_failed_compile_names_its_full_log_and_keeps_the_work_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "cache"))
    npu_fakes.install(monkeypatch, tmp_path, [], aircc_error=AIRCC_STDERR)
    g = gemv(64, 64)
    with pytest.raises(LlamanbError) as e:
        C.compile(g, mode="xrt")
    msg = str(e.value)
    assert "\n" not in msg and "aircc compilation failed" in msg and "aircc: lowering failed" in msg
    log = Path(msg.split("full log: ")[1].split(";")[0])
    kept = Path(msg.split("work directory kept: ")[1].rstrip(")"))
    assert log.is_file() and log.parent == kept
    text = log.read_text()
    assert all(line in text for line in AIRCC_STDERR.splitlines())     # every line, not the last
    assert "clang++" in text                                            # the Peano commands too
    assert (kept / "air.mlir").read_text() == g.text and (kept / "air_project").is_dir()
    # no artifact that looks finished, and a second failure replaces the first
    root = C.artifacts_root()
    assert sorted(p.name for p in root.iterdir()) == [kept.name]
    with pytest.raises(LlamanbError):
        C.compile(g, mode="xrt")
    assert sorted(p.name for p in root.iterdir()) == [kept.name]


# ---- 5. the artifact key follows the installed mlir-air ---------------------------------------
def test_an_mlir_air_upgrade_misses_the_artifact_cache(tmp_path, monkeypatch):
    from llamanb.npu.runtime.kernel_cache import toolchain_fingerprint

    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "cache"))
    log: list = []
    npu_fakes.install(monkeypatch, tmp_path, log)
    g = gemv(64, 64)
    a = C.compile(g, mode="xrt")
    kc_before = toolchain_fingerprint(False)
    assert C.compile(g, mode="xrt").cache_hit
    npu_fakes.set_dist_version(tmp_path / "site", "0.0.1.2026091000+0badc0d")   # pip upgrade
    b = C.compile(g, mode="xrt")
    assert not b.cache_hit and b.key != a.key
    assert a.manifest["toolchain"]["mlir-air"] == f"mlir-air {npu_fakes.MLIR_AIR_VERSION}"
    assert b.manifest["toolchain"]["mlir-air"] == "mlir-air 0.0.1.2026091000+0badc0d"
    assert toolchain_fingerprint(False) != kc_before          # the kernel cache's key follows too
    # a local rebuild keeps its version string and changes its binary: a miss as well
    aircc = tmp_path / "site" / "mlir_air" / "bin" / "aircc"
    aircc.write_text(aircc.read_text() + "# rebuilt\n")
    assert not C.compile(g, mode="xrt").cache_hit


# ---- more set-up faults -------------------------------------------------------------------------
def test_a_deleted_elf_is_rebuilt_not_served(tmp_path, monkeypatch):
    """`ELF ... does not exist (compile it again)` must be true: a second compile rebuilds an entry
    whose ELF (or any file its manifest names) is gone or empty, and says so."""
    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "cache"))
    npu_fakes.install(monkeypatch, tmp_path, [])
    g = gemv(64, 64)
    a = C.compile(g, mode="xrt")
    a.elf.unlink()
    b = C.compile(g, mode="xrt")
    assert not b.cache_hit and b.path == a.path and b.elf.is_file()
    assert f"{a.elf.name} is missing" in b.manifest["rebuilt"] and "rebuilt" in str(b)
    (b.path / "mv.o").write_bytes(b"")                          # truncated to nothing
    c = C.compile(g, mode="xrt")
    assert not c.cache_hit and "mv.o is empty" in c.manifest["rebuilt"]
    assert C.compile(g, mode="xrt").cache_hit


def test_objects_and_aircc_use_the_same_peano(tmp_path, monkeypatch):
    """The objects are built with the Peano compile was given; aircc (through XRTBackend, which
    takes PEANO_INSTALL_DIR first, xrt.py:404-427) must link with that one, not the wheel's."""
    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "cache"))
    log: list = []
    npu_fakes.install(monkeypatch, tmp_path, log)
    monkeypatch.delenv("PEANO_INSTALL_DIR")
    fake_llvm_aie_wheel(tmp_path / "site")                       # another Peano, in the wheel
    given = tmp_path / "peano"
    art = C.compile(gemv(64, 64), mode="xrt", peano_dir=given)
    aircc = next(x[1] for x in log if x[0] == "aircc")
    assert aircc[aircc.index("--peano") + 1] == str(given)
    assert art.manifest["peano_dir"] == str(given) and "PEANO_INSTALL_DIR" not in os.environ


def _sysfs(tmp_path: Path, nodes: dict) -> tuple[Path, Path]:
    """/sys/class/accel/<node>/device/driver -> drivers/<driver> (None: no driver bound), and
    /dev/accel/<node> for each node whose value is a (driver, has_dev_node) pair."""
    sys_root, dev_root = tmp_path / "sys" / "class" / "accel", tmp_path / "dev" / "accel"
    dev_root.mkdir(parents=True)
    for name, (driver, dev_node) in nodes.items():
        (sys_root / name / "device").mkdir(parents=True)
        if driver:
            (tmp_path / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            (sys_root / name / "device" / "driver").symlink_to(tmp_path / "drivers" / driver)
        if dev_node:
            (dev_root / name).write_text("")
    return sys_root, dev_root


@pytest.mark.parametrize("nodes, access, want", [
    ({}, True, "accel* node bound to the amdxdna driver"),
    ({"accel0": (None, True)}, True, "accel0 has no driver bound"),
    ({"accel0": ("habanalabs", True)}, True, "accel0 is bound to habanalabs"),
    ({"accel0": ("amdxdna", False)}, True, "does not exist"),
    ({"accel0": ("amdxdna", True)}, False, "read-write access to"),
    ({"accel0": ("amdxdna", True)}, True, None),
    ({"accel0": ("habanalabs", True), "accel1": ("amdxdna", True)}, True, None),
])
def test_each_device_setup_step_is_named(tmp_path, monkeypatch, nodes, access, want):
    sys_root, dev_root = _sysfs(tmp_path, nodes)
    allowed = (lambda p, m: access)
    got = locate.device_missing(sys_root, dev_root, allowed)
    if want is None:
        assert got == ()
    else:
        assert len(got) == 1 and want in got[0] and "\n" not in got[0]
    if want == "read-write access to":
        assert str(dev_root / "accel0") in got[0] and "mode" in got[0]


def test_info_says_when_the_device_node_cannot_be_opened(tmp_path, monkeypatch):
    """The node is there and bound to amdxdna, but this user may not open it (not in its group):
    `info` says so instead of "ready" (XRT would fail to open the device)."""
    sys_root, dev_root = _sysfs(tmp_path, {"accel0": ("amdxdna", True)})
    os.chmod(dev_root / "accel0", 0o660)
    real = locate.device_missing
    monkeypatch.setattr(locate, "device_missing",
                        lambda: real(sys_root, dev_root, lambda p, m: False))
    got = readiness.npu2_missing(_modules(*AIR), tool=lambda t: True, peano=lambda: True)
    assert len(got) == 1 and "read-write access to" in got[0] and "mode 0660" in got[0]
    assert "add this user to group" in got[0]
    # and XRT's own refusal to open the device carries the same reason
    xrt = npu_fakes.make_pyxrt()

    def refuse(*a, **k):
        raise RuntimeError("open /dev/accel/accel0 failed: Permission denied")
    xrt.device = refuse
    from llamanb.npu.runtime.devices import XrtDevice
    with pytest.raises(LlamanbError) as e:
        XrtDevice(xrt=xrt)
    assert "Permission denied" in str(e.value) and "read-write access to" in str(e.value)

"""`python -m llamanb info` and chapter 13 say, per backend, `ready` or what is missing -- checked
here with stand-ins for Python modules and device nodes (no hardware on a CI machine)."""
from __future__ import annotations

import re
import pytest

from llamanb import readiness
from llamanb.mesh.readiness import ttnn_missing
from llamanb.npu.readiness import npu2_missing
from llamanb.platform import hardware
from llamanb.npu.backend import have_real_npu


def _modules(*present):
    return lambda name: name in present


def _rows(**kw):
    return {r.name: r for r in readiness.readiness(**kw)}


def test_nothing_installed_names_each_missing_piece():
    rows = _rows(module=_modules(), npu_devices=lambda: [], tt_devices=lambda: [])
    assert rows["numpy"].ready and rows["npu2-emulated"].ready and rows["galaxy-emulated"].ready
    npu = rows["npu2"]
    assert not npu.ready and len(npu.missing) >= 3
    assert any("pyxrt" in m for m in npu.missing) and any("air" in m for m in npu.missing)
    assert any("amdxdna" in m for m in npu.missing)
    tt = rows["galaxy-ttnn"]
    assert not tt.ready and any("ttnn" in m for m in tt.missing)
    assert any("/dev/tenstorrent" in m for m in tt.missing)
    assert "not ready, missing:" in npu.line() and npu.line().count("\n") == 0
    for width in (120, 80):                 # wrapped for a notebook or a terminal: every piece kept
        for r in (npu, tt, rows["numpy"]):
            text = r.lines(width)
            assert max(len(line) for line in text.splitlines()) <= width
            assert " ".join(text.split()) .replace("- ", "") .count(r.name) >= 1
            words = " ".join(text.replace("\n", " ").split())
            assert all(" ".join(m.split()) in words.replace(" - ", " ") for m in r.missing)
    report = readiness.readiness_report(list(rows.values()))
    assert max(len(line) for line in report.splitlines()) <= 120


AIR = ("pyxrt", "air", "air.ir", "air.backend.xrt")


@pytest.mark.parametrize("mods, devs, tools, peano, missing", [
    (AIR, ["/dev/accel/accel0"], ("aircc",), True, ()),
    (AIR, [], ("aircc",), True, ("amdxdna",)),                 # the stacks without a device
    (("pyxrt",), ["/dev/accel/accel0"], ("aircc",), True, ("air.ir",)),   # no mlir-air
    (("pyxrt", "air"), ["/dev/accel/accel0"], ("aircc",), True, ("air.ir",)),  # half of it
    (AIR, ["/dev/accel/accel0"], (), True, ("aircc",)),        # no aircc
    (AIR, ["/dev/accel/accel0"], ("aircc",), False, ("Peano",)),
])
def test_npu2_needs_stacks_compiler_peano_and_the_device(mods, devs, tools, peano, missing):
    got = npu2_missing(_modules(*mods), lambda: devs, tool=lambda t: t in tools,
                                peano=lambda: peano)
    assert len(got) == len(missing) and all(w in g for w, g in zip(missing, got))


def test_ttnn_hint_names_the_python_versions_it_has_wheels_for():
    got = ttnn_missing(_modules(), lambda: [], python=(3, 11))
    assert "3.10/3.12" in got[0] and "3.11" in got[0]
    assert "3.10/3.12" not in ttnn_missing(_modules(), lambda: [], python=(3, 12))[0]
    assert ttnn_missing(_modules("ttnn"), lambda: ["/dev/tenstorrent/0"]) == ()


def test_npu_device_nodes_come_from_the_amdxdna_driver(tmp_path):
    """/sys/class/accel/accelN/device/driver -> .../amdxdna counts; another driver does not."""
    for n, drv in (("accel0", "amdxdna"), ("accel1", "habanalabs")):
        (tmp_path / "drivers" / drv).mkdir(parents=True, exist_ok=True)
        (tmp_path / n / "device").mkdir(parents=True)
        (tmp_path / n / "device" / "driver").symlink_to(tmp_path / "drivers" / drv)
    assert hardware.amd_npu_devices(tmp_path) == ["/dev/accel/accel0"]


def test_the_backend_and_info_agree_on_this_machine(llamanb_cache):
    from conftest import run_cli

    ok, why = have_real_npu()
    row = _rows()["npu2"]
    assert ok == row.ready and why == "; ".join(row.missing)
    r = run_cli(["info", "--preset", "smollm2-135m"], cache=llamanb_cache)
    assert r.returncode == 0, r.stderr
    listed = [line.split()[0] for line in r.stdout.splitlines()[1:9] if line.startswith("  ")]
    assert listed[0] == "numpy"
    for name in ("npu2-emulated", "npu2", "tcp", "tcp-compiler", "galaxy-emulated", "galaxy-ttnn"):
        assert name in listed
    assert re.search(r"npu2-emulated +emulated +ready", r.stdout), r.stdout

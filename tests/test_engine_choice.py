"""`auto` picks the best real hardware ready here: a device (cuda, npu2) where llamanb.readiness
finds its stack and its node, else the compiled cpu backend, else numpy -- checked with stand-ins
for the readiness table and for Engine (no GPU or NPU on a CI machine)."""
from __future__ import annotations

import pytest

from llamanb import engine_choice
from llamanb.engine_choice import choose_engine, ready_devices
from llamanb.errors import LlamanbError
from llamanb.platform.hardware import Readiness


def rows(*ready_devs):
    """The readiness table's device rows (the host rows as this file's tests need them)."""
    return [Readiness("numpy", "host CPU"), Readiness("cpu", "host CPU"),
            Readiness("npu2-emulated", "emulated")] + [
        Readiness(d, "device", () if d in ready_devs else ("the device",)) for d in ("npu2", "cuda")]


class Made:
    """Engine(model, backend, **kw)'s stand-in: records the call; `fail` names backends whose
    start raises (as a device stack whose runtime refuses would)."""

    def __init__(self, fail=()):
        self.calls, self.fail = [], fail

    def __call__(self, model, backend, **kw):
        self.calls.append((backend, kw))
        if backend in self.fail:
            raise RuntimeError(f"{backend} refused")
        return backend


@pytest.fixture
def host_ready(monkeypatch):
    """A compiler found and the kernels already built: the cpu path is open and says nothing."""
    from llamanb.cpu import kernels, readiness

    monkeypatch.setattr(readiness, "cpu_compiler_missing", lambda: ())
    monkeypatch.setattr(kernels, "built", lambda: True)


@pytest.mark.parametrize("devs, want", [((), "cpu"), (("cuda",), "cuda"), (("npu2",), "npu2"),
                                        (("npu2", "cuda"), "cuda")])
def test_auto_takes_a_ready_device_before_the_host(host_ready, capsys, devs, want):
    make = Made()
    assert choose_engine("model", "auto", rows=rows(*devs), make=make) == want
    assert make.calls == [(want, {"dtype": "float32"} if want == "cpu" else {})]
    err = capsys.readouterr().err.splitlines()
    assert err == ([] if want == "cpu" else [f"llamanb: engine {want}: {engine_choice.DEVICE_NAMES[want]} "
                                            "(--backend cpu or numpy for the host)"])


def test_a_device_that_fails_to_start_gives_one_line_and_the_next_choice(host_ready, capsys):
    make = Made(fail=("cuda",))
    assert choose_engine("model", "auto", rows=rows("cuda", "npu2"), make=make) == "npu2"
    assert [c[0] for c in make.calls] == ["cuda", "npu2"]
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("llamanb: engine cuda: the NVIDIA GPU is ready but did not start "
                      "(RuntimeError: cuda refused); the host answers")
    make = Made(fail=("npu2",))
    assert choose_engine("model", "auto", rows=rows("npu2"), make=make) == "cpu"


def test_a_quantised_or_bf16_dtype_stays_on_the_host(host_ready):
    for dtype in ("bf16", "q4_1"):
        make = Made()
        assert choose_engine("model", "auto", dtype, rows=rows("cuda", "npu2"), make=make) == "cpu"
        assert make.calls == [("cpu", {"dtype": dtype})]


def test_a_named_backend_is_taken_as_named(host_ready):
    make = Made()
    assert choose_engine("model", "npu2-emulated", rows=rows("cuda"), make=make) == "npu2-emulated"
    assert make.calls == [("npu2-emulated", {})]
    with pytest.raises(LlamanbError, match="--backend cpu"):
        choose_engine("model", "cuda", "q4_1", make=make)


def test_ready_devices_reads_the_one_readiness_table(monkeypatch):
    """Through llamanb.readiness itself (its track probes stood in for): the row names `auto` looks
    for are the table's."""
    import llamanb.readiness as r

    monkeypatch.setattr(r, "cuda_missing", lambda module: ())
    monkeypatch.setattr(r, "npu2_missing", lambda module, devices: ("pyxrt",))
    assert ready_devices() == ["cuda"]
    monkeypatch.setattr(r, "npu2_missing", lambda module, devices: ())
    assert ready_devices() == ["cuda", "npu2"]
    monkeypatch.setattr(r, "cuda_missing", lambda module: ("numba-cuda",))
    assert ready_devices() == ["npu2"]

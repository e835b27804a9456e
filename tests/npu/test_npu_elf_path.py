"""The real-hardware path, composed: compile (mlir-air's XRTBackend, ELF) -> KernelCache (the ELF
and its kernel name) -> XrtDevice (xrt.elf -> hw_context -> ext.kernel -> ext.bo -> run) -> tokens,
through contract fakes written from upstream's source (tests/npu/npu_fakes.py cites file:line for every
call). The fakes bind only the ELF API, so a call that departs from it fails; the tokens are
checked against the numpy engine in its bf16 mode (an independent implementation)."""
from __future__ import annotations

import numpy as np
import pytest

import llamanb
from llamanb.engine.engine import Engine
from llamanb.errors import LlamanbError

import npu_fakes

PROMPT = [1, 5, 9, 33, 40, 2, 7]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from conftest import make_tiny_checkpoint
    d = tmp_path_factory.mktemp("tiny_elf")
    make_tiny_checkpoint(d, n_heads=6, n_kv_heads=2, tie=True)
    return llamanb.load_model(d)


def greedy(engine, n):
    cache = engine.new_cache(256)
    toks = [int(np.argmax(engine.prefill(PROMPT, cache)))]
    for _ in range(n - 1):
        toks.append(int(np.argmax(engine.decode(toks[-1], cache))))
    return toks


def _backend(tiny, tmp_path, monkeypatch, log, **kw):
    from llamanb.npu.backend import NPU2Backend
    from llamanb.npu.runtime.devices import XrtDevice

    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "cache"))
    npu_fakes.install(monkeypatch, tmp_path, log, **kw)
    return NPU2Backend(tiny.weights, device=XrtDevice(), cache_root=tmp_path / "kc")


def test_compile_cache_device_tokens_through_the_elf_api(tiny, tmp_path, monkeypatch):
    log: list = []
    b = _backend(tiny, tmp_path, monkeypatch, log)
    assert not b.emulated and b.name == "npu2"
    # every group compiled by XRTBackend for npu2 as an ELF, named main:<group>, options forwarded
    ctor = [x[1] for x in log if x[0] == "XRTBackend"]
    assert sorted(k["instance_name"] for k in ctor) == sorted(b.groups)
    assert all(k["output_format"] == "elf" and k["target_device"] == "npu2" for k in ctor)
    aircc = {x[1][x[1].index("--xclbin-instance-name") + 1]: x[1] for x in log if x[0] == "aircc"}
    assert "--omit-ping-pong-transform=all" in aircc["flash_attn"]
    assert "--air-runtime-loop-tiling-sizes=1" in aircc["flash_attn"]
    for g in b.groups.values():
        m = b.kc._manifest(g.name)
        assert m["kernel"] == f"main:{g.name}" and (b.kc.root / g.name / m["elf"]).is_file()
    loads = [x for x in log if x[0] in ("elf", "hw_context", "ext.kernel")]
    assert [x[0] for x in loads] == ["elf", "hw_context", "ext.kernel"] * len(b.groups)
    # tokens: the numpy engine in bf16, an independent implementation
    ref = greedy(Engine(tiny, "numpy", dtype="bf16"), 3)
    n0 = len([x for x in log if x[0] == "run"])
    assert greedy(Engine(tiny, b), 3) == ref
    L = tiny.config.n_layers
    runs = [x for x in log[n0:] if x[0] == "run"]
    assert len(runs) == (3 * L + 1) + 2 * (2 * L + 1)       # one xrt.run per group call
    # each run: every slot bound in order, then start, then a wait with the device's timeout
    first = log.index(runs[0])
    k = runs[0][1]
    n_args = len(b.groups[k.split(":")[1]].spec.args)
    assert [x[0] for x in log[first + 1:first + n_args + 3]] == ["set_arg"] * n_args + \
        ["start", "wait"]
    assert {x[2] for x in log if x[0] == "wait"} == {60000}
    assert [x[1] for x in log[first + 1:first + n_args + 1]] == list(range(n_args))


def test_a_run_that_times_out_is_one_line_naming_group_and_state(tiny, tmp_path, monkeypatch):
    b = _backend(tiny, tmp_path, monkeypatch, [], timeout=("flash_attn",))
    with pytest.raises(LlamanbError) as e:
        Engine(tiny, b).prefill(PROMPT, Engine(tiny, b).new_cache(256))
    msg = str(e.value)
    assert "\n" not in msg and "flash_attn" in msg and "ERT_CMD_STATE_TIMEOUT" in msg


def test_the_fakes_refuse_the_xclbin_convention_and_bad_arguments(tmp_path):
    xrt = npu_fakes.make_pyxrt()
    dev = xrt.device(0)
    elf_path = tmp_path / "k.elf"
    elf_path.write_bytes(npu_fakes.ELF_MAGIC + b'{"kernels": ["main:k"], "module": ""}')
    elf = xrt.elf(str(elf_path))
    for bad in (lambda: xrt.hw_context(dev, "uuid"),              # xclbin uuid overload
                lambda: xrt.hw_context(dev),
                lambda: xrt.bo(dev, 64, 0, 0),                    # xclbin-style BO
                lambda: xrt.kernel(xrt.hw_context(dev, elf), "MLIR_AIE"),
                lambda: xrt.ext.bo(dev, 64.0),
                lambda: xrt.ext.kernel(xrt.hw_context(dev, elf)),
                lambda: xrt.run(xrt.ext.kernel(xrt.hw_context(dev, elf), "main:k")).set_arg(
                    0, np.zeros(4)),
                lambda: xrt.ext.bo(dev, 8).sync("to_device")):
        with pytest.raises(TypeError, match="incompatible"):
            bad()
    assert not hasattr(dev, "register_xclbin")
    with pytest.raises(RuntimeError, match="No such kernel"):
        xrt.ext.kernel(xrt.hw_context(dev, elf), "MLIR_AIE")
    bo = xrt.ext.bo(dev, 8)
    bo.map()[:] = b"abcdefgh"
    assert bytes(bo._dev) == bytes(8)                             # not on the device until synced
    bo.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
    assert bytes(bo._dev) == b"abcdefgh"


def test_the_device_refuses_an_emulated_artifact_and_a_wrong_kernel_name(tmp_path):
    from llamanb.npu.runtime.devices import ElfArtifact, XrtDevice

    dev = XrtDevice(xrt=npu_fakes.make_pyxrt())
    with pytest.raises(LlamanbError, match="ELF"):
        dev.kernel(ElfArtifact("g", str(tmp_path / "g.xclbin"), "MLIR_AIE"))
    p = tmp_path / "g.elf"
    p.write_bytes(npu_fakes.ELF_MAGIC + b'{"kernels": ["main:g"], "module": ""}')
    with pytest.raises(LlamanbError, match="could not load kernel 'main:other'") as e:
        dev.kernel(ElfArtifact("g", str(p), "main:other"))
    assert "\n" not in str(e.value)


def test_compile_keeps_the_artifact_and_npu1_is_refused(tmp_path, monkeypatch):
    from llamanb.model.config import PRESETS
    from llamanb.npu.compiler import compile as C
    from llamanb.npu.compiler.groups import decode_groups

    log: list = []
    npu_fakes.install(monkeypatch, tmp_path, log)
    g = decode_groups(PRESETS["smollm2-135m"])["rms_gemv_rope"].spec
    art = C.compile(g, mode="xrt", root=tmp_path / "art")
    assert art.kernel == "main:rms_gemv_rope" and art.elf.name == "rms_gemv_rope.elf"
    assert art.elf.read_bytes().startswith(npu_fakes.ELF_MAGIC)
    assert art.manifest["backend_kwargs"]["runtime_loop_tiling_sizes"] == [16, 16]
    # without target_device XRTBackend falls back to npu1, for which ELF output is refused
    monkeypatch.setattr(C, "backend_kwargs", lambda spec: {"output_format": "elf",
                                                           "instance_name": spec.name})
    with pytest.raises(LlamanbError, match="npu1") as e:
        C.compile(g, mode="xrt", root=tmp_path / "art2")
    assert "\n" not in str(e.value)


def test_npu_smoke_not_ready_is_one_line_exit_2(capsys):
    from llamanb.npu.cli import cmd_smoke

    assert cmd_smoke(None, missing=("pyxrt", "Peano")) == 2
    out = capsys.readouterr().out
    assert out.startswith("not ready: missing pyxrt; Peano") and out.count("\n") == 1


def test_npu_smoke_on_the_contract_fakes(tmp_path, monkeypatch, capsys):
    from llamanb.npu.cli import cmd_smoke

    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "cache"))
    xrt = npu_fakes.install(monkeypatch, tmp_path)
    assert cmd_smoke(None, xrt=xrt, missing=()) == 0
    out = capsys.readouterr().out
    assert "ERT_CMD_STATE_COMPLETED" in out and "2048/2048 outputs within" in out


MUTANTS = {       # one departure from the ELF API each, applied to XrtDevice's own source
    "set_arg off by 3 (the xclbin opcode/instr/n slots)": ("run.set_arg(i, b.bo)",
                                                           "run.set_arg(i + 3, b.bo)"),
    "xclbin-style BO": ("self.xrt.ext.bo(self.device, nbytes)",
                        "self.xrt.bo(self.device, nbytes, 0, 0)"),
    "hw_context from a uuid": ("ctx = xrt.hw_context(self.device, elf)",
                               "ctx = xrt.hw_context(self.device, 'uuid')"),
    "plain xrt.kernel": ("kern = xrt.ext.kernel(ctx, kname)", "kern = xrt.kernel(ctx, kname)"),
    "kernel named MLIR_AIE": ("kern = xrt.ext.kernel(ctx, kname)",
                              "kern = xrt.ext.kernel(ctx, 'MLIR_AIE')"),
    "no sync to the device": ("self.bo.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)",
                              "pass"),
    "state ignored": ("if failure is not None or waited != done or state != done:", "if False:"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_a_departure_from_the_elf_api_fails(name, tmp_path, monkeypatch):
    """Each mutant of llamanb/npu/runtime/devices.py either raises or returns wrong numbers on the
    contract fakes; the original returns the right ones (checked first)."""
    import inspect
    import json
    import sys
    import types

    from llamanb.npu.runtime import devices as runtime
    from llamanb.npu.compiler.builders import gemv
    from llamanb.model.numerics import to_bf16

    spec = gemv(16, 64)
    rng = np.random.default_rng(0)
    A = to_bf16(rng.standard_normal((16, 64)).astype(np.float32))
    x = to_bf16(rng.standard_normal(64).astype(np.float32))
    elf = tmp_path / "gemv.elf"
    elf.write_bytes(npu_fakes.ELF_MAGIC + json.dumps({"kernels": ["main:gemv"],
                                                      "module": spec.text}).encode())
    timeout = ("gemv",) if name == "state ignored" else ()

    def right(mod) -> bool:
        dev = mod.XrtDevice(xrt=npu_fakes.make_pyxrt(timeout=timeout))
        k = dev.kernel(mod.ElfArtifact("gemv", str(elf), "main:gemv", spec))
        bos = [dev.alloc(a.shape, a.name) for a in spec.args]
        for bo, arr in zip(bos, (A, x)):
            mod.write(bo, arr, dev.counters)
            bo.sync(mod.TO_DEVICE)
        dev.run(k, bos)
        bos[2].sync(mod.FROM_DEVICE)
        want = A.astype(np.float64) @ x
        return bool(np.abs(bos[2].map() - want).max() <= 2.0 ** -7 * np.abs(want).max())

    if not timeout:
        assert right(runtime)
    src = inspect.getsource(runtime)
    old, new = MUTANTS[name]
    assert old in src
    mutant = types.ModuleType("llamanb.npu.runtime._mutant_devices")
    mutant.__package__ = "llamanb.npu.runtime"
    monkeypatch.setitem(sys.modules, mutant.__name__, mutant)
    exec(compile(src.replace(old, new), "mutant_runtime.py", "exec"), mutant.__dict__)
    try:
        ok = right(mutant)
    except (LlamanbError, TypeError, RuntimeError):
        ok = False
    assert not ok, f"{name}: the fakes did not notice"

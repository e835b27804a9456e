"""Chapter 07 exercises: the bytes a call, a decode token and a prefill move between host and NPU.

    call_bytes(sizes, roles, first_call) -> (to_device, from_device)
        one KernelCache.call: sizes = values per argument, roles = "weight" | "input" |
        "intermediate" | "output"; measured on the emulated device's counters
    decode_bytes(c) -> (to_device, from_device)            against llamanb.npu.traffic.decode_bytes
    prefill_bytes(c, S, aliasing) -> (to_device, from_device)   against traffic.prefill_bytes
"""
from __future__ import annotations

import tempfile

import numpy as np

from llamanb.model.config import LLAMA32_1B, LLAMA31_8B, SMOLLM2_135M
from llamanb.npu import traffic
from llamanb.npu.compiler.builders import add, gemv, rmsnorm
from llamanb.npu.runtime.kernel_cache import KernelCache
from llamanb.npu.runtime.devices import EmulatedDevice
from llamanb.npu.compiler.stitch import Member, stitch
from llamanb.course.exercises.ch01 import small_configs
from llamanb.course.exercises.check import Case, Exercise


def _kernels() -> dict:
    H = 64
    norm = rmsnorm(1, H, 1e-5, herd_xy=(1, 1), flat_out=True)
    return {
        "gemv 48 x 64": gemv(48, 64),
        "add of two [1, 64] rows": add(1, 64, herd_xy=(1, 1), flat=(True, True, True)),
        "stitched RMSNorm + K projection": stitch("norm_k", [
            Member(norm, {"x": "x", "w": "norm_w", "y": "xn"}, "norm"),
            Member(gemv(32, H), {"a": "wk", "x": "xn", "y": "k"}, "k")]),
    }


def _call_cases() -> list[Case]:
    cases = []
    with tempfile.TemporaryDirectory(prefix="llamanb-exercise-") as root:
        kc = KernelCache(EmulatedDevice(), root=root)
        rng = np.random.default_rng(12)
        for label, spec in _kernels().items():
            name = spec.name.replace(" ", "_")
            kc.compile_and_cache(name, spec)
            arrays = [rng.standard_normal(a.shape).astype(np.float32) for a in spec.args]
            sizes = [int(np.prod(a.shape)) for a in spec.args]
            roles = [a.role for a in spec.args]
            for first in (True, False):
                c0 = kc.device.counters.copy()
                kc.call(name, *arrays, bo_key="layer0")
                d = kc.device.counters - c0
                what = "first call" if first else "second call, same bo_key"
                cases.append(Case(f"{label}, {what}", (sizes, roles, first),
                                  (int(d.bytes_to_device), int(d.bytes_from_device))))
    return cases


call_bytes = Exercise(
    "07.1", "call_bytes", _call_cases,
    hint="bf16 = 2 bytes per value; inputs go to the device on every call, weights and "
         "intermediates only on the first call of a bo_key; only outputs come back")

CONFIGS = (SMOLLM2_135M, LLAMA32_1B, LLAMA31_8B, *small_configs(13, 3))


def _pair(d: dict) -> tuple[int, int]:
    return int(d["to_device"]), int(d["from_device"])


def _decode_cases() -> list[Case]:
    return [Case(c.name, (c,), _pair(traffic.decode_bytes(c))) for c in CONFIGS]


decode_bytes = Exercise(
    "07.2", "decode_bytes", _decode_cases,
    hint="per layer: to the device x and the RoPE rows for q and k (rms_gemv_rope), then the "
         "attention output and x (o_gemv_ffn); back q, k, v and the block output; once: the normed "
         "row [H] to the LM head and its logits [V] back; 2 bytes per value")


def _prefill_cases() -> list[Case]:
    return [Case(f"{c.name}, S={S}, {'aliasing' if al else 'host broker'}", (c, S, al),
                 _pair(traffic.prefill_bytes(c, S, aliasing=al)))
            for c in CONFIGS[:3] for S in (16, 128) for al in (False, True)]


prefill_bytes = Exercise(
    "07.3", "prefill_bytes", _prefill_cases,
    hint="the broker sends q, k, v back in for flash_attn and its output back in for o_ffn; with "
         "aliasing those stay on the device and only x (twice), the RoPE rows, k and v (for the "
         "host cache) and the block output cross; the LM head sees one row either way")

EXERCISES = (call_bytes, decode_bytes, prefill_bytes)

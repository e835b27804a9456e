"""The engines the benchmark times, behind one interface: load, prefill(ids) -> seconds,
decode(ids, steps) -> (seconds, greedy tokens). Each lives in its own child process (bench.child)."""
from __future__ import annotations

import os
import statistics
import time

import numpy as np

from llamanb.check.greedy import engine_steps, greedy
from llamanb.errors import LlamanbError
from llamanb.bench.machine import openblas_info

PREFILL_LENS = (128, 512)
DECODE_CONTEXT = 128                     # prompt length before the decode steps
DECODE_STEPS = 64                        # timed decode steps (bench --decode-tokens' default)
WEIGHTS_READS = 9                        # passes over a cpu engine's weights alone, each round


def decode_kv_positions(steps: int) -> float:
    """Cached positions a timed decode step reads, on average: after a DECODE_CONTEXT-token
    prefill, decode call j (j = 0 .. steps-1) writes position DECODE_CONTEXT + j and attends over
    DECODE_CONTEXT + j + 1 positions; the mean over the calls is DECODE_CONTEXT + (steps + 1) / 2."""
    return DECODE_CONTEXT + (steps + 1) / 2


LABELS = {"llamanb": "llamanb (numpy fp32)", "transformers_fp32": "transformers fp32",
          "transformers_bf16": "transformers bf16", "llamacpp_f32": "llama.cpp F32",
          "llamacpp_bf16": "llama.cpp BF16", "llamacpp_q4_1": "llama.cpp Q4_1",
          "llamacpp_file": "llama.cpp (the file's blocks)"}


def split_march(spec: str) -> tuple[str, str]:
    """"cpu:bf16/x86-64-v3" -> ("cpu:bf16", "x86-64-v3"): a llamanb engine's backend and dtype,
    and after the slash the cpu kernels' build flavour (llamanb.cpu.kernels; "" for
    the default build)."""
    spec, _, march = spec.partition("/")
    return spec, march


def refuse_emulated(name: str, where: str) -> None:
    """A one-line LlamanbError for the emulated flavours (AVX-512, the 256-bit vpdpbusd):
    timing them would measure SIMDe's emulation, not a CPU."""
    from llamanb.cpu import kernels as cpu_kernels

    if name in cpu_kernels.EMULATED:
        what = "AVX-512 kernels" if name == cpu_kernels.EMULATED_AVX512 else "vpdpbusd products"
        raise LlamanbError(f"bench: {where}={name} runs the {what} emulated through SIMDe "
                           "on AVX2, for their results only; timing it would measure the "
                           "emulation, not this CPU (use native or a real -march)")


def llamanb_backend(spec: str) -> tuple[str, dict]:
    """A llamanb engine's backend, as the bench names it -> (backend name, Engine options):
    "numpy", "cpu", "cpu:bf16" (a dtype), "cpu/x86-64-v3" or "cpu:bf16/x86-64-v3" (split_march)."""
    spec, march = split_march(spec)
    name, _, dtype = spec.partition(":")
    return name, {**({"dtype": dtype} if dtype else {}), **({"march": march} if march else {})}


def label(engine: str) -> str:
    """Table label of an engine name: "llamanb", "llamanb@<backend>[:<dtype>]",
    "transformers_<dtype>", "llamacpp_<precision>"."""
    return LABELS.get(engine) or f"llamanb ({engine.split('@', 1)[1]})"

# A fixed English text; its token ids, repeated and truncated, are every engine's prompt.
PROMPT_TEXT = (
    "The old lighthouse stood at the end of a narrow spit of rock, where the harbour met the open "
    "sea. For more than a century its keepers climbed the spiral stairs each evening to trim the "
    "wick, polish the great lens and wind the clockwork that turned it. Fishermen coming home in "
    "the dark counted the flashes, three short and one long, and knew exactly where they were. "
    "When the light was finally automated, the last keeper moved into the village and spent his "
    "afternoons teaching children how to read the tides, tie a bowline and tell a cormorant from "
    "a shag. People say that on stormy nights he still walked to the end of the pier, just to "
    "make sure the beam was turning. "
)


# --- process memory --------------------------------------------------------------------------

class LlamanbRunner:
    def __init__(self, model_spec, backend: str = "numpy"):
        from llamanb.engine.engine import Engine
        from llamanb.io.store import load_model

        self.model = load_model(model_spec)
        name, options = llamanb_backend(backend)          # "cpu:bf16": the cpu backend in bf16
        self.engine = Engine(self.model, name, **options)
        b = self.engine.backend
        threads = (f"kernel pool {b.k.threads}" if name == "cpu" else
                   f"numpy/OpenBLAS {openblas_info()['threads']}")
        self.info = {"backend": b.description, "dtype": getattr(b, "dtype", "float32"),
                     "threads": threads,
                     "weight_bytes": getattr(b, "weight_bytes", self.model.weights.nbytes()),
                     # its KV cache's bytes for one position (keys and values, every layer)
                     "kv_bytes_per_position": self.engine.config.kv_bytes_per_token(
                         {4: "fp32", 2: "fp16"}[np.dtype(b.kv_dtype).itemsize])}

    def prefill(self, ids) -> float:
        cache = self.engine.new_cache(len(ids))
        t0 = time.perf_counter()
        self.engine.prefill(ids, cache)
        return time.perf_counter() - t0

    def decode(self, ids, steps: int) -> tuple[float, list[int]]:
        first, advance = engine_steps(self.engine, ids, steps + 1)
        t0 = time.perf_counter()
        run = greedy(first, advance, steps + 1, k=1)          # steps decode calls after the first
        return time.perf_counter() - t0, run.ids

    def weights_read(self) -> float | None:
        """How many times a second the backend reads its packed weights alone, as a decode
        token's products share them among the threads but without multiplying
        (CpuBackend.read_weights): the median of WEIGHTS_READS passes. None for a backend
        without packed weights."""
        read = getattr(self.engine.backend, "read_weights", None)
        if read is None:
            return None
        times = []
        for _ in range(WEIGHTS_READS):
            t0 = time.perf_counter()
            read()
            times.append(time.perf_counter() - t0)
        return 1.0 / statistics.median(times)


class TransformersRunner:
    def __init__(self, cache_dir, dtype: str):
        import torch
        import transformers
        from transformers import LlamaForCausalLM

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        torch.set_num_threads(os.cpu_count() or 1)
        self.torch = torch
        self.model = LlamaForCausalLM.from_pretrained(
            str(cache_dir), dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]).eval()
        self.info = {"backend": f"transformers {transformers.__version__} LlamaForCausalLM, "
                                f"attention {self.model.config._attn_implementation}",
                     "dtype": dtype,
                     "threads": f"torch intra-op {torch.get_num_threads()}, "
                                f"inter-op {torch.get_num_interop_threads()}"}

    def prefill(self, ids) -> float:
        x = self.torch.tensor([ids], dtype=self.torch.long)
        with self.torch.inference_mode():
            t0 = time.perf_counter()
            self.model(input_ids=x, use_cache=True, logits_to_keep=1)
            return time.perf_counter() - t0

    def decode(self, ids, steps: int) -> tuple[float, list[int]]:
        from llamanb.check.hf_reference import hf_steps

        first, advance = hf_steps(self.model, ids)
        t0 = time.perf_counter()
        run = greedy(first, advance, steps + 1, k=1)          # steps decode calls after the first
        return time.perf_counter() - t0, run.ids


def make_runner(engine: str, model_spec, cache_dir):
    if engine == "llamanb" or engine.startswith("llamanb@"):
        return LlamanbRunner(model_spec, engine.partition("@")[2] or "numpy")
    return TransformersRunner(cache_dir, engine.rsplit("_", 1)[1])


def run_round(runner, ids: list[int], steps: int) -> tuple[dict, list[int]]:
    """One round of one engine: tok/s of prefill 128, prefill 512 and decode, and decode's greedy
    tokens; for a cpu engine also `weights_read`, its weights read alone a second (right after
    the decode, so that both meet the same state of the machine)."""
    row = {f"prefill_{n}": n / runner.prefill(ids[:n]) for n in PREFILL_LENS}
    dt, tokens = runner.decode(ids[:DECODE_CONTEXT], steps)
    row["decode"] = steps / dt
    read = getattr(runner, "weights_read", None)         # right after the decode: the same seconds
    rate = read() if read else None
    if rate is not None:
        row["weights_read"] = rate
    return row, tokens


# --- one child process per engine ------------------------------------------------------------


def prompt_ids(tokenizer, n: int, vocab: int) -> list[int]:
    unit = tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)
    if not unit:
        raise LlamanbError("the tokenizer turned the benchmark text into no tokens")
    ids = (unit * (n // len(unit) + 1))[:n]
    if max(ids) >= vocab:
        raise LlamanbError(f"tokenizer ids exceed the model's vocabulary ({vocab})")
    return ids

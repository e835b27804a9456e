"""llamanb: Llama inference from first principles, in numpy, with a seam for accelerator backends.

    from llamanb import load_model, Engine, generate
    model = load_model()                 # the embedded SmolLM2-135M-Instruct (or a path)
    engine = Engine(model)               # numpy reference backend
    result = generate(engine, model.tokenizer.encode_prompt("Hi!"), max_new_tokens=32)

The package, room by room (docs/architecture.md draws it):
    model/     what a Llama is: config, weights, tokenizer, RoPE, the float64 reference forward
    engine/    how it runs: a Step of rows, the KV stores, the Backend seam, the numpy backend,
               Engine, sampling, generate, chat
    serve/     many requests at once: the scheduler and continuous batching
    io/        where weights come from: GGUF, safetensors, the converted-model cache
    platform/  this machine: BLAS, the C++ compiler, device detection, paths, progress lines
    check/     against independent references: transformers, greedy agreement, calibration
    bench/     speed beside transformers and llama.cpp
    course/    the notebooks' machinery, widgets and exercises
    cpu/ cuda/ npu/ tcp/ mesh/   the tracks: each a backend, its kernels or compiler glue, its
               readiness check and, where it has one, its cost model
"""
from llamanb import _moved
from llamanb.engine.engine import Engine, pad_to
from llamanb.engine.generate import GenerationResult, generate, stream
from llamanb.engine.kv import KVCache
from llamanb.engine.sampling import SamplingParams
from llamanb.engine.step import Step
from llamanb.errors import LlamanbError
from llamanb.io.store import load_model
from llamanb.model.config import LLAMA3_70B, LLAMA32_1B, PRESETS, SMOLLM2_135M, LlamaConfig

_moved.install()

__version__ = "0.1.0"
__all__ = ["LlamaConfig", "SMOLLM2_135M", "LLAMA32_1B", "LLAMA3_70B", "PRESETS", "Engine", "pad_to",
           "LlamanbError", "SamplingParams", "GenerationResult", "generate", "stream", "KVCache", "Step",
           "load_model"]

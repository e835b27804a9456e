"""llamanb: Llama inference from first principles, in numpy, with a seam for accelerator backends.

    from llamanb import load_model, Engine, generate
    model = load_model()                 # the embedded SmolLM2-135M-Instruct (or a path)
    engine = Engine(model)               # numpy reference backend
    result = generate(engine, model.tokenizer.encode_prompt("Hi!"), max_new_tokens=32)
"""
from .config import LLAMA3_70B, LLAMA32_1B, PRESETS, SMOLLM2_135M, LlamaConfig
from .engine import Engine, pad_to
from .errors import LlamanbError
from .generate import GenerationResult, generate, stream
from .kv import KVCache
from .sampling import SamplingParams
from .step import Step
from .io.store import load_model

__version__ = "0.1.0"
__all__ = ["LlamaConfig", "SMOLLM2_135M", "LLAMA32_1B", "LLAMA3_70B", "PRESETS", "Engine", "pad_to",
           "LlamanbError", "SamplingParams", "GenerationResult", "generate", "stream", "KVCache", "Step",
           "load_model"]

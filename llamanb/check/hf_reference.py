"""HF transformers as an independent reference (needs the `ref` extra: torch + transformers).

For a GGUF source, transformers reads the GGUF itself (its own dequantisation and Q/K
un-permutation), so agreement tests llamanb's loader too, not just its arithmetic.
"""
from __future__ import annotations

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.io.store import Model
from llamanb.check.greedy import greedy


def _import_torch():
    import os

    os.environ.setdefault("TQDM_DISABLE", "1")          # transformers' GGUF loader draws progress bars
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        raise LlamanbError("transformers/torch are not installed: run `make test` once (it installs "
                           "the reference extras) or `pip install -e '.[ref]'`") from None
    return torch


def _quiet_gguf_loader() -> None:
    """transformers' GGUF reader draws its own tqdm.auto bar (a widget inside a notebook), which
    neither TQDM_DISABLE (read when tqdm is first imported) nor transformers' switch reaches."""
    import functools

    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from tqdm.auto import tqdm

    gguf_utils.tqdm = functools.partial(tqdm, disable=True)


def load_hf(model: Model, dtype: str = "float32", via: str = "source"):
    """transformers' LlamaForCausalLM for the same model.

    via="source": transformers reads the original file itself (for a GGUF: its own dequantiser and
    Q/K un-permutation; ~20 s for SmolLM2 on 2 cores) -- independent of llamanb's loader too.
    via="converted": transformers loads llamanb's converted cache directory (an HF checkpoint) in
    under a second; its arithmetic is still all its own. tests/io/test_gguf.py proves both loads give
    the same tensors bit for bit."""
    if via not in ("source", "converted"):
        raise LlamanbError(f"via must be 'source' or 'converted', got {via!r}")
    torch = _import_torch()
    import logging

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    _quiet_gguf_loader()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    td = {"float32": torch.float32, "bf16": torch.bfloat16}[dtype]
    src = model.source if via == "source" else model.cache_dir
    from llamanb.platform.progress import stages

    with stages() as say:
        if src.is_file():
            say(f"transformers loads {src.name} with its own GGUF dequantiser (~20 s on 2 cores)")
            hf = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=td)
        else:
            hf = AutoModelForCausalLM.from_pretrained(str(src), dtype=td)
    return hf.eval()


def hf_steps(hf, prompt_ids: list[int]):
    """(first logits, advance) for a transformers model with its KV cache, for check.greedy."""
    torch = _import_torch()
    state = {}

    def run(ids, past=None):
        with torch.inference_mode():
            out = hf(torch.tensor([ids]), past_key_values=past, use_cache=True)
        state["past"] = out.past_key_values
        return out.logits[0, -1].float().numpy()

    return run(list(prompt_ids)), (lambda tok: run([tok], state["past"]))


def greedy_with_top5(hf, prompt_ids: list[int], steps: int, stop_ids=()) -> tuple[list[int], list[dict]]:
    """HF greedy decoding with a KV cache: ids and each step's top-5 (ids, logits), in the
    shared reference file's schema."""
    run = greedy(*hf_steps(hf, prompt_ids), steps, stop_ids, k=5)
    return run.ids, run.tops()


def hidden_states(hf, ids: list[int]) -> list[np.ndarray]:
    """[embeddings, block 1, ..., block L-1, final norm(block L)] as [S, H] float32 arrays
    (transformers 5 applies the final norm to the last entry)."""
    torch = _import_torch()
    with torch.inference_mode():
        out = hf(torch.tensor([ids]), output_hidden_states=True)
    return [h[0].float().numpy() for h in out.hidden_states]

"""Token ids in, checked once: the one validator every entry point uses (generate, Chat, the engine's
prefill/decode/step, the serving queue, the TCP interpreter).

    token_ids([3, 4], vocab)         -> array([3, 4]) int64
    token_ids("hi", vocab)           LlamanbError: token ids: token ids expected, got text; ...

Each mistake is one LlamanbError line saying what was expected: text instead of ids, one int
instead of a list, floats or bools, nested lists, an empty list, an id outside the vocabulary.
"""
from __future__ import annotations

import numpy as np

from llamanb.errors import LlamanbError


def is_int(v) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def token_ids(ids, vocab: int, what: str = "token ids", allow_empty: bool = False) -> np.ndarray:
    """ids as a flat int64 array, each in [0, vocab)."""
    if isinstance(ids, (str, bytes)):
        raise LlamanbError(f"{what}: token ids expected, got text; encode it first, e.g. "
                           f"model.tokenizer.encode_prompt(text)")
    if is_int(ids):
        raise LlamanbError(f"{what}: a list of token ids expected, got one int {ids!r} "
                           f"(write [{int(ids)}])")
    try:
        arr = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids))
    except (TypeError, ValueError):
        raise LlamanbError(f"{what}: a list of integer token ids expected, got "
                           f"{type(ids).__name__} {ids!r:.40}") from None
    if arr.size == 0:
        if allow_empty:
            return np.zeros(0, dtype=np.int64)
        raise LlamanbError(f"{what}: empty prompt, nothing to run")
    if arr.ndim != 1:
        raise LlamanbError(f"{what}: a flat list of token ids expected, got shape {arr.shape} "
                           f"(one sequence at a time)")
    if arr.dtype.kind not in "iu":
        bad = next((v for v in arr.tolist() if not is_int(v)), arr.flat[0])
        raise LlamanbError(f"{what}: token ids must be integers, got {type(bad).__name__} {bad!r:.20}")
    out = arr.astype(np.int64)                        # a uint64 past int64 wraps negative: caught
    if out.min() < 0 or out.max() >= vocab:
        bad = next(int(t) for t in arr.tolist() if not 0 <= int(t) < vocab)
        raise LlamanbError(f"{what}: token id {bad} is out of range, outside the vocabulary "
                           f"[0, {vocab})")
    return out


def token_batch(prompts, vocab: int, what: str = "prompts") -> np.ndarray:
    """B sequences of one length (a batch sharing one s_in) as an int64 array [B, s_in]; one
    flat list is a batch of one."""
    if isinstance(prompts, (str, bytes)) or is_int(prompts):
        return token_ids(prompts, vocab, what)[None]          # says what is wrong
    rows = list(prompts) if not isinstance(prompts, np.ndarray) or prompts.ndim == 2 else [prompts]
    if rows and not any(isinstance(r, (list, tuple, np.ndarray)) for r in rows):
        rows = [rows]
    lengths = sorted({len(r) if hasattr(r, "__len__") else -1 for r in rows})
    if len(lengths) > 1:
        raise LlamanbError(f"{what}: the sequences of a batch must have one length (the chapter's "
                           f"B axis shares s_in), got lengths {lengths}")
    if not rows:
        raise LlamanbError(f"{what}: empty prompt, nothing to run")
    return np.stack([token_ids(r, vocab, f"{what}[{i}]") for i, r in enumerate(rows)])

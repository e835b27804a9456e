"""Requests from a file (`python -m llamanb batch FILE`), and the benchmark's mixed workload.

A request file is a JSON list, or JSON lines (one request per line). Each request is a string
(a user message, sent through the chat template) or an object:

    {"prompt": "text"}                     a user message (chat template), or with "raw": true
                                           the text itself, continued
    {"messages": [{"role": "user", "content": "..."}, ...]}   a whole conversation
    optional: "name", "system", "max_new_tokens", "temperature", "top_k", "top_p", "seed"

Anything else -- an unknown field, a wrong type, an out-of-range value -- is a one-line error that
names the request (its position, and its line in a JSONL file).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llamanb.errors import LlamanbError
from llamanb.engine.generate import SamplingParams

FIELDS = {"name", "prompt", "messages", "raw", "system", "max_new_tokens", "temperature", "top_k",
          "top_p", "seed"}


@dataclass
class RequestSpec:
    name: str
    prompt_ids: list[int]
    max_new_tokens: int
    params: SamplingParams


def _entries(path: Path) -> list[tuple[str, object]]:
    """(where, entry) for each request in the file: JSON list or JSON lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LlamanbError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LlamanbError(f"{path}: cannot read it ({type(e).__name__})") from None
    stripped = text.strip()
    if not stripped:
        raise LlamanbError(f"{path}: empty file, no requests")
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise LlamanbError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
        return [(f"request {i + 1}", d) for i, d in enumerate(data)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"request {len(out) + 1} (line {n})", json.loads(line)))
        except json.JSONDecodeError as e:
            raise LlamanbError(f"{path}: line {n} is not valid JSON ({e.msg})") from None
    return out


def _typed(where, d, key, kinds, default):
    v = d.get(key, default)
    if v is default:
        return v
    if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise LlamanbError(f"{where}: {key!r} must be {names}, got {v!r}")
    return v


def parse_request(where: str, entry, tokenizer, max_new_tokens: int) -> RequestSpec:
    if isinstance(entry, str):
        entry = {"prompt": entry}
    if not isinstance(entry, dict):
        raise LlamanbError(f"{where}: expected a string or an object, got {type(entry).__name__}")
    unknown = sorted(set(entry) - FIELDS)
    if unknown:
        raise LlamanbError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(FIELDS))})")
    if ("prompt" in entry) == ("messages" in entry):
        raise LlamanbError(f"{where}: give exactly one of 'prompt' and 'messages'")
    name = str(_typed(where, entry, "name", (str, int), where))
    raw = _typed(where, entry, "raw", (bool,), False)
    system = _typed(where, entry, "system", (str,), None)
    if "prompt" in entry:
        text = _typed(where, entry, "prompt", (str,), None)
        if not text.strip():
            raise LlamanbError(f"{where}: empty prompt")
        ids = tokenizer.encode_prompt(text, chat=not raw, system=system)
    else:
        msgs = entry["messages"]
        if raw or system is not None:
            raise LlamanbError(f"{where}: 'raw' and 'system' go with 'prompt', not 'messages'")
        if not (isinstance(msgs, list) and msgs and all(
                isinstance(m, dict) and set(m) == {"role", "content"} and
                all(isinstance(x, str) for x in m.values()) for m in msgs)):
            raise LlamanbError(f"{where}: 'messages' must be a non-empty list of "
                               "{\"role\": ..., \"content\": ...} strings")
        ids = tokenizer.apply_chat_template(msgs)
    k = _typed(where, entry, "max_new_tokens", (int,), max_new_tokens)
    if k < 1:
        raise LlamanbError(f"{where}: 'max_new_tokens' must be >= 1, got {k}")
    try:
        params = SamplingParams(float(_typed(where, entry, "temperature", (int, float), 0.0)),
                                _typed(where, entry, "top_k", (int,), None),
                                float(_typed(where, entry, "top_p", (int, float), 1.0)),
                                _typed(where, entry, "seed", (int,), 0))
    except LlamanbError as e:
        raise LlamanbError(f"{where}: {e}") from None
    return RequestSpec(name, ids, k, params)


def read_requests(path, tokenizer, max_new_tokens: int = 64) -> list[RequestSpec]:
    path = Path(path)
    entries = _entries(path)
    if not entries:
        raise LlamanbError(f"{path}: no requests")
    return [parse_request(where, e, tokenizer, max_new_tokens) for where, e in entries]


# --- the benchmark's workload ---------------------------------------------------------------------

def mixed_workload(unit_ids: list[int], n: int = 16, seed: int = 0,
                   prompt_range=(16, 160), new_range=(8, 64)) -> list[tuple[list[int], int]]:
    """n requests (prompt ids, max_new_tokens) with prompt and output lengths drawn uniformly
    from the ranges: slices of a fixed text's ids, so every run sees the same work."""
    import numpy as np

    rng = np.random.default_rng(seed)
    text = unit_ids * (prompt_range[1] // max(1, len(unit_ids)) + 2)
    out = []
    for _ in range(n):
        p = int(rng.integers(*prompt_range))
        s = int(rng.integers(0, len(text) - p))
        out.append((text[s:s + p], int(rng.integers(*new_range))))
    return out

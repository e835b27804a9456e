"""Reading a local HF Llama checkpoint directory (config.json, safetensors, tokenizer.json)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from llamanb.model.config import LlamaConfig, check_fits_memory
from llamanb.errors import LlamanbError
from llamanb.io.safetensors import SafetensorsFile

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                    "special_tokens_map.json")


class HFSource:
    kind = "hf"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        cfg_path = self.path / "config.json"
        if not cfg_path.is_file():
            raise LlamanbError(f"{self.path}: not an HF checkpoint directory (no config.json)")
        raw = _read_json(cfg_path)
        if not isinstance(raw, dict):
            raise LlamanbError(f"{cfg_path}: expected a JSON object, got a JSON {type(raw).__name__}")
        if raw.get("model_type", "llama") != "llama":
            raise LlamanbError(f"{cfg_path}: model_type {raw.get('model_type')!r} is not llama")
        stop = self._generation_eos()
        try:
            cfg = LlamaConfig.from_hf(raw, name=self.path.name)
        except LlamanbError as e:                       # say which file
            msg = str(e).removeprefix("config.json: ").removeprefix("config.json ")
            raise LlamanbError(f"{cfg_path}: {msg}") from None
        if stop:
            cfg = cfg.replace(eos_ids=tuple(dict.fromkeys(cfg.eos_ids + stop)))
        check_fits_memory(cfg, str(cfg_path))          # before any tensor table is read
        self.config = cfg
        self.files = self._open_shards()
        self.where = {}
        for f in self.files:
            for name in f.names():
                self.where[name] = f
        if self.config.tie_embeddings and "lm_head.weight" in self.where and not np.array_equal(
                self.get("lm_head.weight"), self.get("model.embed_tokens.weight")):
            # transformers (5.x) keeps a stored head that differs from the embedding: do the same.
            self.config = self.config.replace(tie_embeddings=False)
        from llamanb.model.weights import check_shapes

        check_shapes(self.config, self.shapes(), str(self.path))
        if not (self.path / "tokenizer.json").is_file():
            raise LlamanbError(f"{self.path}: tokenizer.json is missing")

    def _generation_eos(self) -> tuple[int, ...]:
        gen = read_generation_config(self.path)
        eos = gen.get("eos_token_id")
        ids = eos if isinstance(eos, list) else ([] if eos is None else [eos])
        for e in ids:
            if isinstance(e, bool) or not isinstance(e, int) or e < 0:
                raise LlamanbError(f"{self.path / 'generation_config.json'}: eos_token_id must be "
                                   f"a token id (or a list of them), got {e!r:.40}")
        return tuple(ids)

    def _open_shards(self) -> list[SafetensorsFile]:
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            raw = _read_json(index)
            weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
            if not isinstance(weight_map, dict) or not all(
                    isinstance(v, str) for v in weight_map.values()):
                raise LlamanbError(f"{index}: not a safetensors index (no weight_map of file names)")
            names = sorted(set(weight_map.values()))
        elif (self.path / "model.safetensors").is_file():
            names = ["model.safetensors"]
        else:
            raise LlamanbError(f"{self.path}: no model.safetensors or model.safetensors.index.json")
        for n in names:
            if not (self.path / n).is_file():
                raise LlamanbError(f"{self.path}: shard {n} is missing")
        return [SafetensorsFile(self.path / n) for n in names]

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(f.table[n]["shape"]) for n, f in self.where.items()}

    def get(self, hf_name: str) -> np.ndarray:
        return self.where[hf_name].get(hf_name)

    def tokenizer_files(self) -> dict[str, str]:
        out = {}
        for n in _TOKENIZER_FILES:
            f = self.path / n
            if not f.is_file():
                continue
            if n.endswith(".json"):
                _read_json(f)                           # reject it now, not at every later load
            try:
                out[n] = f.read_text(encoding="utf-8")
            except UnicodeDecodeError as e:
                raise LlamanbError(f"{f}: not UTF-8 text (byte offset {e.start})") from None
        return out


def read_generation_config(directory: Path) -> dict:
    """A checkpoint's generation_config.json as a dict ({} where there is none). It is optional,
    but one that is there and broken is a one-line LlamanbError: ignoring it would run the model
    without the stop ids and sampling it recommends, and say it recommends none."""
    p = Path(directory) / "generation_config.json"
    if not p.is_file():
        return {}
    raw = _read_json(p)
    if not isinstance(raw, dict):
        raise LlamanbError(f"{p}: expected a JSON object, got a JSON {type(raw).__name__}")
    return raw


def _read_json(path: Path):
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise LlamanbError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise LlamanbError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except OSError as e:
        raise LlamanbError(f"{path}: cannot read ({e.strerror})") from None

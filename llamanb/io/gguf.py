"""Reading a llama-architecture GGUF file: config, tokenizer metadata, float32 weights in HF layout.

llama.cpp's converter stores the rows of W_q and W_k permuted: within each head it interleaves the
two halves of the head dimension, so that RoPE can rotate adjacent pairs (x0, x1), (x2, x3), ...
HF rotates the half-split pairs (x_i, x_{i+d/2}). `unpermute_qk` puts the rows back in HF order.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from llamanb.model.config import LlamaConfig, check_fits_memory
from llamanb.errors import LlamanbError
from llamanb.io.quants import dequantize
from llamanb.model.rope_tables import half_split_to_interleaved, interleaved_to_half_split

# GGUF name -> HF name (per layer names carry '{i}')
_LAYER_MAP = {
    "attn_norm": "model.layers.{i}.input_layernorm.weight",
    "attn_q": "model.layers.{i}.self_attn.q_proj.weight",
    "attn_k": "model.layers.{i}.self_attn.k_proj.weight",
    "attn_v": "model.layers.{i}.self_attn.v_proj.weight",
    "attn_output": "model.layers.{i}.self_attn.o_proj.weight",
    "ffn_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "ffn_gate": "model.layers.{i}.mlp.gate_proj.weight",
    "ffn_up": "model.layers.{i}.mlp.up_proj.weight",
    "ffn_down": "model.layers.{i}.mlp.down_proj.weight",
}
_TOP_MAP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
            "output.weight": "lm_head.weight"}


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """[n_heads * d_h, in] rows in llama.cpp's interleaved order -> HF's half-split order.

    llama.cpp rotates interleaved pairs, so its converter stores each head's rows in the order
    `rope_tables.half_split_to_interleaved(d_h)`; undoing it picks rows by the inverse permutation.
    """
    out, cols = w.shape
    d = out // n_heads
    return w.reshape(n_heads, d, cols)[:, interleaved_to_half_split(d)].reshape(out, cols)


def permute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF's half-split order -> llama.cpp's interleaved order (the inverse of `unpermute_qk`)."""
    out, cols = w.shape
    d = out // n_heads
    return w.reshape(n_heads, d, cols)[:, half_split_to_interleaved(d)].reshape(out, cols)


def hf_name(gguf_name: str) -> str | None:
    """The HF name of a GGUF tensor name (None for a tensor llamanb does not use)."""
    if gguf_name in _TOP_MAP:
        return _TOP_MAP[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in _LAYER_MAP:
        return _LAYER_MAP[parts[2]].format(i=int(parts[1]))
    return None


def tensor_index(path: str | Path) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """name -> (GGML type name, GGUF dims fastest-first, absolute byte offset, byte count) for
    every tensor of a GGUF file, read from its header alone (_parse_header: numeric metadata
    arrays are skipped, not decoded). A file too short for what its header promises is a one-line
    LlamanbError."""
    import struct

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    try:
        _, infos, start = _parse_header(path)
        size, out = path.stat().st_size, {}
        for name, dims, ttype, off in infos:
            qt = GGMLQuantizationType(ttype)
            per, nbytes = GGML_QUANT_SIZES[qt]
            n = int(np.prod(dims, dtype=np.int64))
            out[name] = (qt.name, dims, start + off, n // per * nbytes)
            if start + off + n // per * nbytes > size:
                raise ValueError(f"tensor {name} ends past the end of the file")
    except EOFError:
        raise LlamanbError(f"{path.name}: truncated or malformed GGUF header (the file ends inside "
                           "it)") from None
    except (struct.error, ValueError, KeyError, UnicodeDecodeError, OverflowError) as e:
        raise LlamanbError(f"{path.name}: truncated or malformed GGUF header ({e})") from None
    return out


def raw_rows(path: str | Path, index: dict, gguf_name: str, n_heads: int, n_kv_heads: int
             ) -> tuple[str, np.ndarray]:
    """(GGML type name, the tensor's stored bytes, memory-mapped, as uint8 [rows, bytes per row])
    in HF row order: q and k rows un-permuted as GGUFSource.get does (a row is whole blocks, so
    moving rows moves blocks intact)."""
    qtype, dims, off, nbytes = index[gguf_name]
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=off, shape=(nbytes,))
    rows = np.asarray(data).reshape(int(np.prod(dims[1:], dtype=np.int64)), -1)
    name = hf_name(gguf_name) or ""
    if name.endswith("q_proj.weight"):
        rows = unpermute_qk(rows, n_heads)
    elif name.endswith("k_proj.weight"):
        rows = unpermute_qk(rows, n_kv_heads)
    return qtype, rows


HEADER_CUT = -1                       # needed_size(): the file ends inside its header


def _truncated(path: Path, size: int, need: int) -> str:
    if need == HEADER_CUT:
        return (f"{path.name}: truncated GGUF file: {size:,} bytes end inside its header "
                f"(download or copy it again)")
    return (f"{path.name}: truncated GGUF file: {size:,} bytes, its tensors need {need:,} "
            f"({need - size:,} missing; download or copy it again)")


def needed_size(path: Path) -> int | None:
    """The size a GGUF file must have, from its header and tensor table alone; HEADER_CUT where
    the file ends inside them; None where they are not a GGUF header (see read_header)."""
    return read_header(path)[1]


def read_header(path: Path, keys: tuple[str, ...] = ()) -> tuple[dict, int | None]:
    """({key: value} for the scalar and string metadata `keys` asked for, the size the file must
    have), from the header and tensor table alone (_parse_header). The size is HEADER_CUT where
    the file ends inside them, None where they are not a GGUF header. Used to tell a file cut
    short from a corrupt one when the gguf package's reader gives up, and to read a few keys
    cheaply."""
    import struct

    import gguf

    found: dict = {}
    try:
        _, infos, start = _parse_header(path, keys, found)
        ends = []
        for _, dims, qtype, off in infos:
            block, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
            ends.append(off + int(np.prod(dims, dtype=np.int64)) // block * nbytes)
        return found, start + max(ends, default=0)
    except EOFError:                                  # the header itself is cut short
        return found, HEADER_CUT
    except (OSError, ValueError, KeyError, struct.error, OverflowError, MemoryError):
        return found, None


def _parse_header(path: Path, keys: tuple[str, ...] = (), found: dict | None = None
                  ) -> tuple[dict, list[tuple[str, tuple[int, ...], int, int]], int]:
    """The one reader of a GGUF header (v2/v3: magic, version, tensor and key counts, the
    key/value pairs, the tensor infos, then the data aligned to general.alignment), without the
    gguf package: ({key: value} for the scalar and string `keys` asked for, filled into `found`
    as they are read; [(name, dims fastest-first, GGML type id, offset in the data)]; the data's
    start). Numeric metadata arrays are skipped without being read. EOFError where the file ends
    inside the header, ValueError where it is not a GGUF header."""
    import struct

    import gguf

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}
    found = {} if found is None else found
    with open(path, "rb") as f:
        def read(fmt):
            n = struct.calcsize("<" + fmt)
            b = f.read(n)
            if len(b) != n:
                raise EOFError
            return struct.unpack("<" + fmt, b)[0]

        def string():
            n = read("Q")
            if n > 1 << 24:
                raise ValueError("implausible string length")
            b = f.read(n)
            if len(b) != n:
                raise EOFError
            return b.decode("utf-8", "replace")

        def value(t):
            if t == 8:
                return string()
            if t == 9:
                et, n = read("I"), read("Q")
                if et in scalar:                  # skip a numeric array without reading it
                    f.seek(n * struct.calcsize("<" + scalar[et]), 1)
                    return None
                for _ in range(n):
                    value(et)
                return None
            if t not in scalar:
                raise ValueError(f"unknown metadata type {t}")
            return read(scalar[t])

        if f.read(4) != b"GGUF" or read("I") not in (2, 3):
            raise ValueError("not a GGUF file")
        n_tensors, n_kv = read("Q"), read("Q")
        alignment = gguf.GGUF_DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            key = string()
            v = value(read("I"))
            if key == "general.alignment" and isinstance(v, int) and v > 0:
                alignment = v
            if key in keys:
                found[key] = v
        infos = []
        for _ in range(n_tensors):
            name = string()
            dims = tuple(read("Q") for _ in range(read("I")))
            infos.append((name, dims, read("I"), read("Q")))
        return found, infos, -(-f.tell() // alignment) * alignment



class GGUFSource:
    """A GGUF file opened for conversion."""

    kind = "gguf"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise LlamanbError(f"model file not found: {self.path}")
        try:
            from gguf import GGUFReader

            self.reader = GGUFReader(str(self.path))
        except Exception as e:  # the reader raises ValueError/IndexError/... on bad bytes
            size, need = self.path.stat().st_size, needed_size(self.path)
            if need is not None and (need > size or need == HEADER_CUT):
                raise LlamanbError(_truncated(self.path, size, need)) from None
            raise LlamanbError(f"{self.path.name}: not a readable GGUF file ({e.__class__.__name__}: "
                               f"{str(e)[:60]})") from None
        self.meta = {}
        for key, f in self.reader.fields.items():
            try:
                self.meta[key] = f.contents()
            except Exception:
                raise LlamanbError(f"{self.path.name}: corrupt GGUF metadata field {key}") from None
        self.tensors = {t.name: t for t in self.reader.tensors}
        self._check_size()
        self.config = self._config()
        check_fits_memory(self.config, self.path.name)   # before the tensors are matched
        self._refuse_unimplemented()
        self._check_tensors()

    # GGUF keys of the llama architecture that change what is computed (llama.cpp's
    # src/llama-model.cpp reads them for LLM_ARCH_LLAMA): a value other than the one llamanb
    # implements is refused, naming the key, rather than left out.
    def _refuse_unimplemented(self) -> None:
        m, c, name = self.meta, self.config, self.path.name
        experts = m.get("llama.expert_count")
        if experts:
            raise LlamanbError(f"{name}: llama.expert_count is {experts}: a mixture of experts, "
                               "which llamanb does not implement")
        kind = m.get("llama.rope.scaling.type")
        if kind not in (None, "", "none"):
            raise LlamanbError(f"{name}: llama.rope.scaling.type is {kind!r}; llamanb implements "
                               "unscaled RoPE from a GGUF (load the HF checkpoint for llama3 "
                               "scaling)")
        dims = m.get("llama.rope.dimension_count")
        if dims is not None and int(dims) != c.head_dim:
            raise LlamanbError(f"{name}: llama.rope.dimension_count is {dims} but heads have "
                               f"{c.head_dim} dimensions; llamanb rotates the whole head")
        vlen = m.get("llama.attention.value_length")
        if vlen is not None and int(vlen) != c.head_dim:
            raise LlamanbError(f"{name}: llama.attention.value_length is {vlen} but "
                               f"key_length is {c.head_dim}; llamanb implements equal lengths")
        for t in self.tensors:
            if t.startswith("blk.") and self.hf_name(t) is None:
                raise LlamanbError(f"{name}: tensor {t} is not part of the Llama llamanb "
                                   "implements (refused rather than computed without it)")

    def _check_size(self) -> None:
        """A file cut short (an interrupted download or copy) is named as such, with the sizes,
        before any tensor is read (the reader maps past the end without complaint)."""
        size = self.path.stat().st_size
        need = max((int(t.data_offset) + int(t.n_bytes) for t in self.reader.tensors), default=0)
        if need > size:
            raise LlamanbError(_truncated(self.path, size, need))

    def _config(self) -> LlamaConfig:
        m = self.meta
        arch = m.get("general.architecture")
        if arch != "llama":
            raise LlamanbError(f"{self.path.name}: architecture {arch!r} is not llama")
        if "rope_freqs.weight" in self.tensors:
            raise LlamanbError(f"{self.path.name}: GGUF with rope_freqs (llama3 RoPE scaling) is not "
                               "supported; load the HF checkpoint directory instead")
        try:
            hidden = int(m["llama.embedding_length"])
            n_heads = int(m["llama.attention.head_count"])
            if n_heads < 1:
                raise LlamanbError(f"{self.path.name}: GGUF llama.attention.head_count must be "
                                   f"positive, got {n_heads}")
            head_dim = int(m.get("llama.attention.key_length") or m.get("llama.rope.dimension_count")
                           or hidden // n_heads)
            eos = [m[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                  "tokenizer.ggml.eom_token_id") if k in m]
            return LlamaConfig(
                name=str(m.get("general.name") or self.path.stem),
                n_layers=int(m["llama.block_count"]), hidden=hidden, n_heads=n_heads,
                n_kv_heads=int(m.get("llama.attention.head_count_kv") or n_heads), head_dim=head_dim,
                ffn=int(m["llama.feed_forward_length"]),
                vocab=int(m.get("llama.vocab_size") or len(m["tokenizer.ggml.tokens"])),
                rope_theta=float(m.get("llama.rope.freq_base", 10000.0)),
                max_seq=int(m.get("llama.context_length", 2048)),
                rms_eps=float(m.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
                tie_embeddings="output.weight" not in self.tensors,
                bos_id=m.get("tokenizer.ggml.bos_token_id"),
                eos_ids=tuple(dict.fromkeys(int(e) for e in eos)))
        except KeyError as e:
            raise LlamanbError(f"{self.path.name}: GGUF metadata lacks {e.args[0]}") from None
        except (TypeError, ValueError, ZeroDivisionError) as e:    # a string or 0 where a size belongs
            raise LlamanbError(f"{self.path.name}: malformed GGUF metadata ({e})") from None

    def hf_name(self, gguf_name: str) -> str | None:
        return hf_name(gguf_name)

    def _check_tensors(self) -> None:
        from llamanb.model.weights import check_shapes

        self.by_hf = {}
        for name, t in self.tensors.items():
            hf = self.hf_name(name)
            if hf is not None:
                self.by_hf[hf] = t
        check_shapes(self.config, self.shapes(), self.path.name)

    @staticmethod
    def _hf_shape(t) -> tuple[int, ...]:
        """GGUF lists dims fastest-first; HF's [out, in] is the reverse."""
        return tuple(int(d) for d in reversed(t.shape))

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {hf: self._hf_shape(t) for hf, t in self.by_hf.items()}

    def get(self, hf_name: str) -> np.ndarray:
        t = self.by_hf[hf_name]
        shape = self._hf_shape(t)
        w = dequantize(t.data, t.tensor_type.name, int(t.n_elements)).reshape(shape)
        if hf_name.endswith("q_proj.weight"):
            w = unpermute_qk(w, self.config.n_heads)
        elif hf_name.endswith("k_proj.weight"):
            w = unpermute_qk(w, self.config.n_kv_heads)
        return w

    def tokenizer_files(self) -> dict[str, str]:
        """file name -> text, written next to the converted weights."""
        import json

        from llamanb.model.tokenizer import tokenizer_config_from_gguf, tokenizer_json_from_gguf

        return {"tokenizer.json": tokenizer_json_from_gguf(self.meta),
                "tokenizer_config.json": json.dumps(tokenizer_config_from_gguf(self.meta), indent=1)}

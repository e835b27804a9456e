"""GGUF reading: dequantisation vs the `gguf` package, Q/K un-permutation vs transformers' GGUF
loader and closed-form index arithmetic, end-to-end tiny GGUF files vs HF, and bad files."""
from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import (TINY_VOCAB, hf_logits, llamacpp_permute_rows, make_tiny_checkpoint,
                      write_tiny_gguf)

import gguf
from gguf import GGMLQuantizationType as Q

from llamanb.engine.engine import Engine
from llamanb.errors import LlamanbError
from llamanb.io.gguf import permute_qk, unpermute_qk
from llamanb.io.quants import dequantize
from llamanb.io.store import load_model

OWN_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32)


def _test_matrix(seed: int) -> np.ndarray:
    """Rows of 256 values with very different scales, plus hand-made edge rows."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((48, 256)) * np.exp(rng.uniform(-12, 8, (48, 1)))
    x[0] = 0.0                                         # all-zero blocks (scale 0)
    x[1] = 3.25                                        # constant blocks
    x[2] = -np.abs(x[2])                               # one-signed blocks
    x[3, ::2] = 1e-7                                   # f16-subnormal scales
    x[4] = np.linspace(-1000, 1000, 256)               # large range
    x[5, :32] = 0.0
    x[5, 32:] = rng.uniform(0, 1, 224)                 # non-negative (Q4_1/Q5_1 min = 0)
    return x.astype(np.float32)


# ---- (a) dequantisation is bit-identical to gguf.quants.dequantize --------------------------------
@pytest.mark.parametrize("qtype", OWN_TYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_dequantize_random_bit_identical(qtype, seed):
    x = _test_matrix(seed)
    raw = gguf.quants.quantize(x, Q[qtype])
    ref = np.asarray(gguf.quants.dequantize(raw, Q[qtype]), dtype=np.float32)
    ours = dequantize(raw, qtype, x.size)
    assert ours.dtype == np.float32 and ours.size == x.size
    assert np.array_equal(_bits(ours), _bits(ref)), f"{qtype}: max |diff| {np.abs(ours - ref.reshape(-1)).max()}"
    # and the quantiser did its job (sanity of the test data, not of llamanb)
    if qtype in ("F32",):
        assert np.array_equal(ours, x.reshape(-1))


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16", "BF16"])
def test_dequantize_raw_random_bytes_bit_identical(qtype):
    """Arbitrary block bytes (any scale, any nibble pattern) decode as the gguf package does."""
    block, nbytes = gguf.GGML_QUANT_SIZES[Q[qtype]]
    rng = np.random.default_rng(7)
    n_blocks = 64
    raw = rng.integers(0, 256, (n_blocks * nbytes,), dtype=np.uint8)
    if block > 1:   # keep the f16 scales finite so NaN payloads do not muddy the comparison
        raw = raw.reshape(n_blocks, nbytes)
        scales = rng.uniform(-2, 2, (n_blocks, 2)).astype(np.float16).view(np.uint8)
        raw[:, :2] = scales[:, :2]
        if qtype in ("Q4_1", "Q5_1"):
            raw[:, 2:4] = scales[:, 2:4]
        raw = raw.reshape(1, -1)
    else:
        raw = raw.reshape(1, -1)
        v = rng.uniform(-100, 100, raw.size // 2)
        raw = (v.astype(np.float16).view(np.uint8) if qtype == "F16" else
               (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)).reshape(1, -1)
    ref = np.asarray(gguf.quants.dequantize(raw, Q[qtype]), dtype=np.float32)
    ours = dequantize(raw, qtype, n_blocks * block)
    assert np.array_equal(_bits(ours), _bits(ref))


def test_dequantize_rejects_wrong_size_and_unknown_type():
    raw = np.zeros(20 * 3, dtype=np.uint8)
    with pytest.raises(LlamanbError):
        dequantize(raw, "Q4_1", 32 * 4)            # 3 blocks of bytes, 4 blocks of values
    with pytest.raises(LlamanbError, match="IQ4_NL"):
        dequantize(np.zeros(18, dtype=np.uint8), "IQ4_NL", 32)


def test_dequantize_real_tensors_bit_identical(smollm_reader):
    """Every tensor type of the embedded GGUF (Q8_0 embedding, Q4_1 blocks, F32 norms)."""
    layers = {"blk.0.", "blk.14.", "blk.29."}
    chosen = [t for t in smollm_reader.tensors
              if t.name in ("token_embd.weight", "output_norm.weight")
              or any(t.name.startswith(p) for p in layers)]
    kinds = {t.tensor_type.name for t in chosen}
    assert {"Q8_0", "Q4_1", "F32"} <= kinds
    for t in chosen:
        ref = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        ours = dequantize(t.data, t.tensor_type.name, int(t.n_elements))
        assert np.array_equal(_bits(ours), _bits(ref)), t.name


# ---- (b) Q/K un-permutation equals transformers' GGUF loader ----------------------------------------
def test_qk_unpermute_matches_transformers_tensor_processor(smollm, smollm_reader):
    """transformers' own GGUF tensor processor (the code its loader runs) on every Q/K tensor."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    cfg = smollm.config
    proc = LlamaTensorProcessor(config={"num_attention_heads": cfg.n_heads,
                                        "num_key_value_heads": cfg.n_kv_heads})
    state = smollm.weights.hf_state()
    n = 0
    for t in smollm_reader.tensors:
        parts = t.name.split(".")
        if len(parts) != 4 or parts[2] not in ("attn_q", "attn_k"):
            continue
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        ref = proc.process(weights=w, name=t.name).weights
        hf_name = f"model.layers.{parts[1]}.self_attn.{'q' if parts[2] == 'attn_q' else 'k'}_proj.weight"
        assert np.array_equal(state[hf_name], ref), hf_name
        n += 1
    assert n == 2 * cfg.n_layers


@pytest.mark.slow
def test_every_tensor_matches_transformers_gguf_loader(smollm, smollm_gguf_path, smollm_engine):
    """transformers.from_pretrained(gguf_file=...) dequantises and un-permutes on its own; every
    tensor of its state_dict must equal ours exactly, and its logits must match ours."""
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(smollm_gguf_path.parent), gguf_file=smollm_gguf_path.name,
                                              dtype=torch.float32).eval()
    ours = smollm.weights.hf_state()
    sd = hf.state_dict()
    assert set(ours) | {"lm_head.weight"} == set(sd)
    mismatched = []
    for name, t in sd.items():
        mine = ours.get(name, ours["model.embed_tokens.weight"] if name == "lm_head.weight" else None)
        if mine.shape != tuple(t.shape) or not np.array_equal(mine, t.numpy()):
            mismatched.append(name)
    assert not mismatched, mismatched[:5]
    ids = smollm.tokenizer.encode_prompt("Name a prime number.", chat=True)
    np.testing.assert_allclose(smollm_engine.logits_all(ids)[-3:], hf_logits(hf, ids)[-3:], rtol=0, atol=3e-4)


# ---- (c) permutation closed forms ---------------------------------------------------------------------
@pytest.mark.parametrize("n_heads,d_h", [(1, 2), (3, 64), (9, 64), (2, 16), (8, 128)])
def test_unpermute_closed_form(n_heads, d_h):
    rows = n_heads * d_h
    hf = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    interleaved = np.empty_like(hf)
    for h in range(n_heads):
        for j in range(d_h // 2):
            interleaved[h * d_h + 2 * j] = hf[h * d_h + j]                  # x_j
            interleaved[h * d_h + 2 * j + 1] = hf[h * d_h + d_h // 2 + j]   # its RoPE partner
    assert np.array_equal(unpermute_qk(interleaved, n_heads), hf)
    assert np.array_equal(permute_qk(hf, n_heads), interleaved)
    assert np.array_equal(llamacpp_permute_rows(hf, n_heads), interleaved)


def test_permute_unpermute_identity_random():
    rng = np.random.default_rng(0)
    for n_heads, d_h, cols in [(9, 64, 5), (3, 64, 7), (4, 16, 1)]:
        w = rng.standard_normal((n_heads * d_h, cols)).astype(np.float32)
        assert np.array_equal(permute_qk(unpermute_qk(w, n_heads), n_heads), w)
        assert np.array_equal(unpermute_qk(permute_qk(w, n_heads), n_heads), w)
        assert not np.array_equal(permute_qk(w, n_heads), w)


def test_closed_form_matches_transformers_reverse_permute():
    """Our test helper's llama.cpp order is the one transformers undoes (grounds the helper)."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    rng = np.random.default_rng(1)
    w = rng.standard_normal((3 * 64, 10)).astype(np.float32)
    back = LlamaTensorProcessor()._reverse_permute_weights(llamacpp_permute_rows(w, 3), 9, 3)
    assert np.array_equal(back, w)


# ---- tiny GGUF files end to end -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-gguf-src")
    return make_tiny_checkpoint(d, n_heads=8, n_kv_heads=2, tie=False, seed=21)


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_tiny_gguf_matches_hf(tmp_path, tiny_hf, qtype):
    """A GGUF written with the gguf package (Q/K permuted the llama.cpp way) loads to the weights
    the file holds, in HF layout, and runs like HF on those weights."""
    import copy

    import torch

    path = tmp_path / f"tiny-{qtype}.gguf"
    stored = write_tiny_gguf(path, tiny_hf, qtype=qtype)
    model = load_model(path)
    state = model.weights.hf_state()
    assert set(state) == set(stored)
    for name, a in stored.items():
        assert np.array_equal(state[name], a), name
    ref_model = copy.deepcopy(tiny_hf)
    ref_model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in stored.items()})
    ids = [int(t) for t in np.random.default_rng(3).integers(3, TINY_VOCAB, 20)]
    np.testing.assert_allclose(Engine(model).logits_all(ids), hf_logits(ref_model, ids), rtol=0, atol=1e-4)


def test_tiny_gguf_config_and_tokenizer(tmp_path, tiny_hf):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tiny_hf)
    m = load_model(path)
    c = m.config
    assert (c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn, c.vocab) == (2, 96, 8, 2, 16, 128, TINY_VOCAB)
    assert c.tie_embeddings is False and c.bos_id == 1 and 2 in c.eos_ids
    ids = m.tokenizer.encode("ab zz", add_special_tokens=False)
    assert m.tokenizer.decode(ids) == "ab zz"


# ---- (d) bad files: LlamanbError, and nothing left in the cache ---------------------------------------------
def _cache_residue(cache) -> list[str]:
    if not os.path.exists(cache):
        return []
    return sorted(os.listdir(cache))


@pytest.fixture(scope="module")
def gguf_bytes(smollm_gguf_path):
    return smollm_gguf_path.read_bytes()


@pytest.fixture(scope="module")
def tiny_gguf_bytes(tmp_path_factory, tiny_hf):
    path = tmp_path_factory.mktemp("tiny-gguf-ok") / "ok.gguf"
    write_tiny_gguf(path, tiny_hf, qtype="Q8_0")
    return path.read_bytes(), gguf.GGUFReader(str(path)).data_offset


@pytest.mark.parametrize("cut", ["header", "metadata", "tensor-info", "tensor-data", "last-byte"])
def test_truncated_tiny_gguf(tmp_path, fresh_cache, tiny_gguf_bytes, cut):
    data, data_offset = tiny_gguf_bytes
    n = {"header": 10, "metadata": 300, "tensor-info": data_offset - 40,
         "tensor-data": (data_offset + len(data)) // 2, "last-byte": len(data) - 1}[cut]
    p = tmp_path / "trunc.gguf"
    p.write_bytes(data[:n])
    with pytest.raises(LlamanbError):
        load_model(p)
    assert _cache_residue(fresh_cache) == []


def test_truncated_copy_of_embedded_gguf(tmp_path, fresh_cache, gguf_bytes):
    p = tmp_path / "trunc.gguf"
    p.write_bytes(gguf_bytes[:len(gguf_bytes) // 2])
    with pytest.raises(LlamanbError):
        load_model(p)
    assert _cache_residue(fresh_cache) == []


@pytest.mark.parametrize("kind", ["random", "magic-then-random", "wrong-magic", "empty", "bad-version"])
def test_garbage_gguf(tmp_path, fresh_cache, gguf_bytes, kind):
    rng = np.random.default_rng(0)
    data = {
        "random": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "magic-then-random": b"GGUF" + rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "wrong-magic": b"GGUX" + gguf_bytes[4:200_000],
        "empty": b"",
        "bad-version": b"GGUF" + (99).to_bytes(4, "little") + gguf_bytes[8:200_000],
    }[kind]
    p = tmp_path / "x.gguf"
    p.write_bytes(data)
    with pytest.raises(LlamanbError):
        load_model(p)
    assert _cache_residue(fresh_cache) == []


def test_unsupported_quant_type_names_it(tmp_path, fresh_cache, tiny_hf):
    """IQ4_NL (32-value blocks of 18 bytes) is valid GGUF that llamanb does not decode: a one-line
    error that names the type, raised mid-conversion, and the half-built cache entry is removed."""
    rows, cols = tiny_hf.config.intermediate_size, tiny_hf.config.hidden_size
    raw = np.random.default_rng(0).integers(0, 256, (rows, cols // 32 * 18), dtype=np.uint8)
    path = tmp_path / "iq4nl.gguf"
    write_tiny_gguf(path, tiny_hf, raw_override={"blk.1.ffn_up.weight": (Q.IQ4_NL, raw)})
    with pytest.raises(LlamanbError, match="IQ4_NL") as e:
        load_model(path)
    assert "\n" not in str(e.value)
    assert _cache_residue(fresh_cache) == []


def test_non_llama_architecture(tmp_path, fresh_cache, tiny_hf):
    path = tmp_path / "qwen.gguf"
    write_tiny_gguf(path, tiny_hf, architecture="qwen2")
    with pytest.raises(LlamanbError, match="llama"):
        load_model(path)
    assert _cache_residue(fresh_cache) == []


def test_gguf_without_merges_is_a_user_error(tmp_path, fresh_cache, tiny_hf):
    """A byte-level BPE GGUF that lacks tokenizer.ggml.merges (the gguf writer drops empty
    arrays) must end as a LlamanbError (or load), never as a KeyError traceback."""
    path = tmp_path / "nomerges.gguf"
    write_tiny_gguf(path, tiny_hf, with_merges=False)
    try:
        load_model(path)
    except LlamanbError:
        assert _cache_residue(fresh_cache) == []


def test_tensor_index_matches_the_gguf_reader(smollm_gguf_path, smollm_reader, tmp_path):
    """llamanb.io.gguf.tensor_index (the header only, metadata skipped) finds every tensor where
    the `gguf` package's reader does: type, dims, data offset and size; raw_rows maps those bytes
    (q and k rows un-permuted as the float32 conversion does); a truncated file is one line."""
    from llamanb.errors import LlamanbError
    from llamanb.io.gguf import GGUFSource, hf_name, raw_rows, tensor_index
    from llamanb.io.quants import dequantize

    ix = tensor_index(smollm_gguf_path)
    r = smollm_reader                             # the gguf package's GGUFReader of that file
    assert len(ix) == len(r.tensors)
    for t in r.tensors:
        assert ix[t.name] == (t.tensor_type.name, tuple(int(d) for d in t.shape),
                              int(t.data_offset), int(t.n_bytes))
    src = GGUFSource(smollm_gguf_path)
    c = src.config
    for name in ("blk.3.attn_q.weight", "blk.3.attn_k.weight", "blk.3.ffn_down.weight"):
        qtype, rows = raw_rows(smollm_gguf_path, ix, name, c.n_heads, c.n_kv_heads)
        w = dequantize(rows.reshape(-1), qtype, rows.shape[0] * int(ix[name][1][0]))
        assert np.array_equal(w.reshape(rows.shape[0], -1), src.get(hf_name(name)))
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm_gguf_path.read_bytes()[: 3 << 20])
    with pytest.raises(LlamanbError, match="truncated") as e:
        tensor_index(cut)
    assert "\n" not in str(e.value)

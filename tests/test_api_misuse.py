"""The Python API used wrongly, as a new user does: every mistake is a LlamanbError whose one-line
message says what was expected -- never a raw TypeError / ValueError / AttributeError from deep
inside numpy or tokenizers."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY_VOCAB, make_tiny_checkpoint

from llamanb import Engine, LlamanbError, SamplingParams, load_model
from llamanb.engine.generate import generate


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("misuse") / "tiny"
    make_tiny_checkpoint(d, n_heads=4, n_kv_heads=2, tie=True, seed=0, max_position_embeddings=32)
    return d


@pytest.fixture(scope="module")
def model(tiny):
    return load_model(tiny)


@pytest.fixture(scope="module")
def engine(model):
    return Engine(model)


def raises(fn, *fragments) -> str:
    """fn() raises LlamanbError; its message is one line and contains every fragment."""
    with pytest.raises(LlamanbError) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg, msg
    for f in fragments:
        assert f.lower() in msg.lower(), f"{f!r} not in {msg!r}"
    return msg


# ---- generate(): what goes in ------------------------------------------------------------------------
def test_generate_with_text_instead_of_ids(engine):
    raises(lambda: generate(engine, "Hello"), "got text", "encode_prompt")
    raises(lambda: generate(engine, b"Hello"), "got text")


def test_generate_with_the_model_instead_of_an_engine(model):
    raises(lambda: generate(model, [3, 4]), "needs an Engine", "Engine(model)")
    raises(lambda: generate("engine", [3, 4]), "needs an Engine", "str")


@pytest.mark.parametrize("n", [2.5, "3", True, 0, -4, None])
def test_max_new_tokens_must_be_a_positive_int(engine, n):
    raises(lambda: generate(engine, [3, 4], max_new_tokens=n), "max_new_tokens", "integer >= 1", repr(n))


def test_params_as_a_dict(engine):
    raises(lambda: generate(engine, [3, 4], params=dict(temperature=0.5)),
           "SamplingParams", "got dict", "SamplingParams(**params)")
    raises(lambda: generate(engine, [3, 4], params=0.5), "SamplingParams", "got float")


@pytest.mark.parametrize("ids, fragments", [
    ([], ["empty prompt"]),
    (np.zeros(0, dtype=np.int64), ["empty prompt"]),
    (None, ["list of integer token ids", "NoneType"]),
    (7, ["one int", "[7]"]),
    ([3.5, 4], ["integers", "float 3.5"]),
    (np.array([3.0, 4.0]), ["integers", "float"]),
    ([3, None], ["integers", "None"]),
    ([[3, 4], [5, 6]], ["flat list", "(2, 2)"]),
    ([3, [4, 5]], ["token ids"]),
    ([3, TINY_VOCAB], ["token id 272", "vocabulary [0, 272)"]),
    ([3, 10**12], ["outside the vocabulary"]),
    ([-1, 3], ["token id -1", "vocabulary"]),
    ([True, False], ["integers", "bool"]),
])
def test_bad_prompt_ids(engine, ids, fragments):
    raises(lambda: generate(engine, ids, max_new_tokens=1), *fragments)


@pytest.mark.parametrize("stop, fragments", [
    (2, ["list of token ids", "[2]", "got int"]),
    ("</s>", ["list of token ids", "got str"]),
    ([2.5], ["stop_ids", "integers"]),
    ([TINY_VOCAB + 5], ["stop_ids", "outside the vocabulary"]),
])
def test_bad_stop_ids(engine, stop, fragments):
    raises(lambda: generate(engine, [3, 4], max_new_tokens=2, stop_ids=stop), *fragments)


def test_on_token_must_be_callable(engine):
    raises(lambda: generate(engine, [3, 4], max_new_tokens=2, on_token="print"), "on_token", "function")


def test_accepted_spellings_still_work(engine):
    """numpy ids, numpy scalars in the params, a tuple of stop ids, no stop ids at all."""
    a = generate(engine, np.array([3, 4], dtype=np.int32), max_new_tokens=3,
                 params=SamplingParams(temperature=np.float32(0.7), top_k=np.int64(5), seed=np.int64(3)))
    b = generate(engine, (3, 4), max_new_tokens=3, params=SamplingParams(temperature=0.7, top_k=5, seed=3))
    assert a.ids == b.ids
    c = generate(engine, [3, 4], max_new_tokens=4, stop_ids=())
    assert c.stop_reason == "length" and len(c.ids) == 4


# ---- SamplingParams -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, fragments", [
    ({"temperature": "hot"}, ["temperature", "number >= 0", "'hot'"]),
    ({"temperature": None}, ["temperature", "None"]),
    ({"temperature": float("inf")}, ["temperature", "finite"]),
    ({"temperature": -0.5}, ["temperature", ">= 0"]),
    ({"temperature": True}, ["temperature", "True"]),
    ({"top_k": 2.5}, ["top_k", "integer >= 1", "2.5"]),
    ({"top_k": "5"}, ["top_k", "integer"]),
    ({"top_k": 0}, ["top_k", ">= 1"]),
    ({"top_p": -0.1}, ["top_p", "(0, 1]"]),
    ({"top_p": "0.9"}, ["top_p", "number"]),
    ({"top_p": 0}, ["top_p", "(0, 1]"]),
    ({"seed": "x"}, ["seed", "integer >= 0"]),
    ({"seed": 1.5}, ["seed", "integer"]),
    ({"seed": -1}, ["seed", ">= 0"]),
])
def test_bad_sampling_params(kwargs, fragments):
    raises(lambda: SamplingParams(**kwargs), *fragments)


# ---- Engine and its caches ----------------------------------------------------------------------------
def test_engine_needs_a_model(tiny):
    raises(lambda: Engine("SmolLM2"), "load_model", "str")
    raises(lambda: Engine(str(tiny)), "load_model")


def test_engine_backend_options(model):
    raises(lambda: Engine(model, backend="tpu"), "unknown backend", "numpy")
    raises(lambda: Engine(model, backend=3), "backend must be a name")
    raises(lambda: Engine(model, dtype="int8"), "numpy", "int8")
    raises(lambda: Engine(model, precision="fp8"), "numpy", "precision", "dtype")
    raises(lambda: Engine(model, batch_invariant="no"), "batch_invariant", "True or False")


@pytest.mark.parametrize("kwargs, fragments", [
    ({"max_seq": -5}, ["max_seq", "integer >= 1", "-5"]),
    ({"max_seq": 0}, ["max_seq"]),
    ({"max_seq": 2.5}, ["max_seq", "2.5"]),
    ({"max_seq": "16"}, ["max_seq", "'16'"]),
    ({"max_seq": 8, "slots": 0}, ["slots"]),
    ({"max_seq": 8, "block": 4, "n_blocks": -1}, ["n_blocks"]),
])
def test_new_cache_arguments(engine, kwargs, fragments):
    raises(lambda: engine.new_cache(**kwargs), *fragments)


def test_prefill_and_decode_arguments(engine):
    raises(lambda: engine.prefill("w3 w4", engine.new_cache(8)), "got text")
    raises(lambda: engine.decode(3.7, engine.new_cache(8)), "one token id", "3.7")
    raises(lambda: engine.decode("a", engine.new_cache(8)), "got str", "encode text")
    raises(lambda: engine.decode(10**6, engine.new_cache(8)), "1000000", "out of range")


def test_load_model_with_a_wrong_type():
    raises(lambda: load_model(5), "path", "int")
    raises(lambda: load_model(["a.gguf"]), "path", "list")


# (text in -- str, UTF-8 bytes and what is neither -- is tested in tests/test_tokenizer.py)

"""A GGUF of Q4_0 blocks on the cpu backend (`--dtype q4_0`, or `auto`): the blocks run as stored,
18 bytes per 32 weights, decoded in registers (kernels/cpu/quant.h's Quant<q4_0_t>).

The block-level checks (every decoded weight bit for bit as the gguf package dequantises it, the
product equal to float32 panels', the 8-bit-activation product within its derived bound) are
parametrised over Q4_1, Q4_0 and Q8_0 in test_cpu_backend.py and test_cpu_int8.py. Here: a whole
model, a tiny random checkpoint written as Q4_0 by the gguf package (conftest.write_tiny_gguf)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_tiny_checkpoint, write_tiny_gguf

from llamanb.errors import LlamanbError

MATS = ("wqkv", "wo", "gate_up", "down")


@pytest.fixture(scope="module")
def q4_0_model(tmp_path_factory, kernels):
    from llamanb.io.store import load_model

    d = tmp_path_factory.mktemp("tiny-q4_0")
    hf = make_tiny_checkpoint(d / "hf", n_heads=8, n_kv_heads=2, tie=False, seed=5)
    write_tiny_gguf(d / "tiny-q4_0.gguf", hf, qtype="Q4_0")
    return load_model(d / "tiny-q4_0.gguf")


def _run(engine, ids, steps=3):
    cache = engine.new_cache(len(ids) + steps + 1)
    rows = [engine.prefill(ids, cache)]
    for _ in range(steps):
        rows.append(engine.decode(int(np.argmax(rows[-1])), cache))
    return rows


def test_q4_0_engine_is_the_float32_engine_from_its_own_blocks(q4_0_model):
    """Every matrix (the untied output head too) on Q4_0 panels of the file's own size; with
    float32 activations, prefill logits and three greedy decode steps bit-identical to the float32
    engine on the dequantised cache: the same weights in the same order, so the bound is 0."""
    import gguf

    from llamanb.engine import Engine

    eq = Engine(q4_0_model, "cpu", dtype="q4_0", activations="float32")
    ef = Engine(q4_0_model, "cpu")
    b = eq.backend
    assert {lw[n].fmt for lw in b.layer_w for n in MATS} == {"q4_0"} and b.lm_head.fmt == "q4_0"
    assert "Q4_0 matrices as stored in the GGUF" in b.description
    # bytes: the gguf package's size of a Q4_0 block per 32 weights, rows padded to whole panels
    size, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q4_0]
    NP = b.k.panel_width
    mats = [lw[n] for lw in b.layer_w for n in MATS] + [b.lm_head]
    assert sum(m.data.nbytes for m in mats) == sum(-(-m.n // NP) * NP * m.k // size * nbytes
                                                   for m in mats)
    ids = [int(t) for t in np.random.default_rng(4).integers(3, q4_0_model.config.vocab, 11)]
    for a, c in zip(_run(eq, ids), _run(ef, ids)):
        assert np.array_equal(a, c)


def test_q4_0_int8_one_call_equals_block_by_block(q4_0_model):
    """The default (8-bit activations) through kernels/cpu/forward.cc's one call and block by
    block from Python: the same kernels in the same order, so the same bits; and a different
    computation from the float path (the activations' rounding shows)."""
    from llamanb.engine import Engine
    from llamanb.step import Step

    e8 = Engine(q4_0_model, "cpu", dtype="auto")               # auto: each matrix as stored
    assert e8.backend.act8 and "8-bit activations" in e8.backend.description
    assert {lw[n].fmt for lw in e8.backend.layer_w for n in MATS} == {"q4_0"}
    out = []
    for collect in (None, []):
        c = e8.new_cache(16, slots=2)
        e8.prefill([1, 40, 41], c, slot=0)
        step = Step.build([(0, 3, np.array([7])), (1, 0, np.array([1, 9, 10, 11]))])
        out.append(e8.step(step, c, collect=collect))
    assert np.array_equal(out[0], out[1])
    ef = Engine(q4_0_model, "cpu", dtype="q4_0", activations="float32")
    ids = [1, 40, 41, 7]
    assert not np.array_equal(_run(e8, ids, 0)[0], _run(ef, ids, 0)[0])


def test_q4_0_dtype_on_another_format_is_one_line(smollm, kernels):
    """`--dtype q4_0` on the shipped Q4_1 file names what the file holds instead."""
    from llamanb.engine import Engine

    with pytest.raises(LlamanbError, match="are not Q4_0") as e:
        Engine(smollm, "cpu", dtype="q4_0")
    assert "\n" not in str(e.value) and "Q4_1" in str(e.value)


def test_cli_dtypes_are_the_backends():
    """The CLI lists its --dtype choices without importing the backend: the same list."""
    from llamanb import cli
    from llamanb.backends.cpu import CpuBackend

    assert cli.DTYPES == list(CpuBackend.DTYPES)

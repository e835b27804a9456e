"""The embedded model (and a tiny random Llama) on emulated meshes through the engine seam.

References: transformers (tiny model on the full 8x4 Galaxy mesh), a plain float64 forward
written here, the single-device numpy engine (greedy tokens), and the shared reference file
(top-5 gate with a bfloat8_b KV cache)."""
import sys

import numpy as np
import pytest

from conftest import hf_logits
from llamanb.check.verify import compare, greedy_with_top5
from llamanb.engine.engine import Engine
from llamanb.errors import LlamanbError
from llamanb.mesh.backend import MeshBackend
from llamanb.mesh.config import GALAXY, GALAXY_4U, MeshConfig

PROMPT = "The capital of France is a city called"
MESHES = [(1, 1), (1, 3), (3, 4)]          # (3, 4): heads over 3 devices, hidden over 4


def f64_logits(model, ids):
    """The last row's logits from the package's float64 forward (tested against transformers in
    float64 in tests/check/test_float64.py)."""
    from llamanb.model.reference import forward

    return forward(model.weights, ids, rows=[len(ids) - 1])[0]


@pytest.fixture(scope="module")
def exact(smollm):
    ids = smollm.tokenizer.encode(PROMPT)
    return ids, f64_logits(smollm, ids)


@pytest.mark.parametrize("topology", ["line", "ring"])
@pytest.mark.parametrize("shape", MESHES)
def test_mesh_logits_within_float32_reordering(smollm, smollm_engine, exact, shape, topology):
    """A float32 run is off the float64 logits by E (the one-device engine's error); a mesh
    only reorders float32 sums, so its own error must be of that size too (<= 2 E), and it then
    differs from the one-device engine by at most 3 E (triangle inequality)."""
    ids, ref = exact
    one = smollm_engine.prefill(ids, smollm_engine.new_cache(64))
    E = np.abs(one - ref).max()
    eng = Engine(smollm, backend="galaxy-emulated", mesh=MeshConfig(shape, topology=topology))
    got = eng.prefill(ids, eng.new_cache(64))
    assert np.abs(got - ref).max() <= 2 * E
    assert np.abs(got - one).max() <= 3 * E


@pytest.fixture(scope="module")
def one_device_tokens(smollm, smollm_engine, reference_data):
    return [greedy_with_top5(smollm_engine, c["prompt_ids"], len(c["greedy_ids"]),
                             smollm.config.eos_ids).ids for c in reference_data["cases"][:2]]


@pytest.mark.parametrize("shape", MESHES)
def test_greedy_tokens_equal_single_device(smollm, reference_data, one_device_tokens, shape):
    eng = Engine(smollm, backend="galaxy-emulated", mesh=MeshConfig(shape))
    for case, want in zip(reference_data["cases"][:2], one_device_tokens):
        mesh = greedy_with_top5(eng, case["prompt_ids"], len(case["greedy_ids"]), smollm.config.eos_ids)
        assert mesh.ids == want


def test_tiny_llama_on_the_full_galaxy_mesh(tmp_path, make_tiny):
    """8 K/V heads split over 8 devices, hidden 96 over 4: every weight is split on both axes.
    Reference: transformers' own logits for the same random checkpoint, through the float64
    forward: E = the one-device engine's distance to float64 on this machine; the mesh must be
    within 2 E of float64 (an empirical margin for "only the sum order differs", as in chapter
    09), hence within 2 E + E_hf of transformers (E_hf: transformers' own distance)."""
    import llamanb
    from llamanb.model.reference import forward

    hf = make_tiny(tmp_path / "tiny", n_heads=8, n_kv_heads=8, tie=False)
    model = llamanb.load_model(tmp_path / "tiny")
    ids = [5, 17, 99, 3, 250, 41, 7, 8, 9, 10, 11]
    f64, want = forward(model.weights, ids), hf_logits(hf, ids)
    E = np.abs(Engine(model).logits_all(ids) - f64).max()
    E_hf = np.abs(want - f64).max()
    for cfg in (GALAXY, GALAXY_4U):                    # ring (6U) and line (4U)
        eng = Engine(model, backend="galaxy-emulated", mesh=cfg)
        got = eng.logits_all(ids)
        assert np.abs(got - f64).max() <= 2 * E and np.abs(got - want).max() <= 2 * E + E_hf
        ops = {(t.op, t.label) for t in eng.backend.mesh.ledger}
        assert {("all_reduce", "QKV"), ("all_reduce", "WO"), ("reduce_scatter", "FF1"),
                ("reduce_scatter", "FF3"), ("all_gather", "FF2 in"), ("all_reduce", "FF2")} <= ops


def test_chunked_prefill_and_paged_cache(smollm, smollm_engine, exact):
    ids, ref = exact
    E = np.abs(smollm_engine.prefill(ids, smollm_engine.new_cache(64)) - ref).max()
    eng = Engine(smollm, backend="galaxy-emulated", mesh=MeshConfig((3, 4)))
    whole = eng.prefill(ids, eng.new_cache(64))
    chunked = eng.prefill(ids, eng.new_cache(64), chunk=3)          # chunks read earlier chunks
    assert np.abs(chunked - whole).max() <= 3 * E and np.argmax(chunked) == np.argmax(whole)
    flat, paged = eng.new_cache(64), eng.new_cache(64, block=64, n_blocks=2)
    a, b = eng.prefill(ids, flat, chunk=4), eng.prefill(ids, paged, chunk=4)
    assert np.array_equal(a, b)                                     # same sums, other storage
    tok = int(np.argmax(a))
    assert np.array_equal(eng.decode(tok, flat), eng.decode(tok, paged))
    assert paged.tables[0] == [0]


def test_bfloat8_kv_cache_passes_the_reference_gate(smollm, reference_data):
    eng = Engine(smollm, backend="galaxy-emulated", mesh=MeshConfig((1, 1)), kv_format="bfloat8_b")
    assert "bfloat8_b" in eng.backend.description
    dec = lambda t: smollm.tokenizer.decode([t])                                       # noqa: E731
    for case in reference_data["cases"]:
        run = greedy_with_top5(eng, case["prompt_ids"], len(case["greedy_ids"]), smollm.config.eos_ids)
        r = compare(case["name"], run, case["greedy_ids"], case["top5"], dec)
        assert r.passed, r.detail


def test_kv_cache_holds_block_floats(smollm, exact):
    from llamanb.model.numerics import bfloat8_b

    ids, _ = exact
    eng = Engine(smollm, backend="galaxy-emulated", mesh=MeshConfig((1, 3)), kv_format="bfloat8_b")
    cache = eng.new_cache(64)
    eng.prefill(ids, cache)
    k = cache.keys(4, 0, 32)                                         # [N_kv, 32, d]
    assert np.array_equal(bfloat8_b(k), k)                           # already representable
    assert len(np.unique(np.abs(k[0, :len(ids), :16]), axis=None)) <= 128 * len(ids)


def test_block_float_weights_equal_one_device_with_the_same_weights(smollm, exact):
    """bfloat4_b W1/W3: the mesh with rounded weights == the numpy engine on the same rounded
    weights (to float32 reordering), so any drift is the format's, not the mesh's."""
    import dataclasses

    from llamanb.mesh.backend import formatted_weights
    from llamanb.engine.numpy_backend import NumpyBackend

    ids, _ = exact
    fmts = {"w1": "bfloat4_b", "w3": "bfloat4_b"}
    eng = Engine(smollm, backend="galaxy-emulated", mesh=MeshConfig((3, 1)), weight_formats=fmts)
    w4 = formatted_weights(smollm.weights, fmts)
    g = w4.layers[0].w_gate_up[:smollm.config.ffn]
    assert len(np.unique(np.abs(g[:16, 0]))) <= 8                    # one block: 3 magnitude bits
    one = Engine(smollm, backend=NumpyBackend(dataclasses.replace(w4, deriver=None)))
    a = eng.prefill(ids, eng.new_cache(64))
    b = one.prefill(ids, one.new_cache(64))
    assert np.abs(a - b).max() < 2e-4


def test_meshes_the_model_cannot_use_are_refused(smollm):
    with pytest.raises(LlamanbError, match="does not split over the 8x4 mesh"):
        MeshBackend(smollm.weights, GALAXY)                         # 3 K/V heads over 8 devices
    with pytest.raises(LlamanbError, match="unknown format"):
        MeshBackend(smollm.weights, MeshConfig((1, 1)), kv_format="bfloat2")
    with pytest.raises(LlamanbError, match="unknown weight"):
        MeshBackend(smollm.weights, MeshConfig((1, 1)), weight_formats={"wq": "bfloat8_b"})


def test_registered_lazily():
    """The package (and its backend table) imports without the mesh; asking for it loads it."""
    import subprocess

    code = ("import sys, llamanb; from llamanb.engine.registry import make_backend, LAZY; "
            "assert 'llamanb.mesh' not in sys.modules and 'galaxy-emulated' in LAZY; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_emulated_backend_says_so(smollm):
    b = MeshBackend(smollm.weights, (1, 3))
    assert b.emulated and "emulated" in b.description and "emulated" in repr(b.mesh)


def test_a_step_of_several_sequences(smollm, smollm_engine, exact):
    """Two prompts and then two decode rows in one step each, on a 3x4 mesh and on one device;
    padding rows of a caller-padded prompt attend to nothing."""
    from llamanb.engine.engine import pad_to
    from llamanb.engine.step import Step

    ids, _ = exact
    other = [5, 600, 7000, 81, 9]
    eng = Engine(smollm, backend="galaxy-emulated", mesh=MeshConfig((3, 4)))
    outs = []
    for e in (smollm_engine, eng):
        cache = e.new_cache(64, slots=2)
        first = e.step(Step.build([(0, 0, ids), (1, 0, other)]), cache)                # [2, V]
        toks = [int(np.argmax(r)) for r in first]
        nxt = e.step(Step.build([(0, len(ids), [toks[0]]), (1, len(other), [toks[1]])]), cache)
        padded, n = pad_to(other, 12, 2)
        alone = e.prefill(padded, e.new_cache(64), real_len=n)
        outs.append((first, nxt, alone))
    E = np.abs(outs[0][0] - outs[1][0]).max()
    for a, b in zip(outs[0], outs[1]):
        assert np.abs(a - b).max() < 2e-4 and np.array_equal(np.argmax(a, -1), np.argmax(b, -1))
    assert np.abs(outs[1][2] - outs[1][0][1]).max() < 2e-4 and E < 2e-4

"""GGUF files of Q4_0, Q5_0, Q4_K and Q6_K blocks on the cpu backend (`--dtype auto`): each matrix
runs on panels made from the file's own blocks, decoded in registers (kernels/cpu/quant.h's
Quant<q4_0_t>, Quant<q5_0_t>, Quant<q4_k_t>, Quant<q6_k_t>); where a fused matrix's parts are
Q5_0 and Q8_0 (q|k|v with a Q8_0 attn_v), it runs as Q8_0, its Q5_0 parts re-encoded losslessly.

The block-level checks (every decoded weight bit for bit as the gguf package dequantises it, the
product equal to float32 panels', the 8-bit-activation product within its derived bound) are
parametrised over every format in test_cpu_backend.py and test_cpu_int8.py. Here: whole models,
tiny random checkpoints written as GGUF by the gguf package (conftest.write_tiny_gguf). The
package quantises to Q4_0 itself; it cannot write K-quants, so those files hold random blocks
(their weights are whatever the blocks say; the loader dequantises them with the package)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_tiny_checkpoint, write_tiny_gguf

from llamanb.errors import LlamanbError

MATS = ("wqkv", "wo", "gate_up", "down")
# a layer's 2-D weights: gguf tensor name -> HF module (conftest.write_tiny_gguf's naming)
LAYER_TENSORS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                 "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def _random_k_blocks(qtype: str, rows: int, k: int, rng) -> np.ndarray:
    """Random K-quant rows [rows, k / 256 * bytes]: float16 scales of a trained layer's size (Q4_K:
    d and dmin, its weights d sc q - dmin m then within about +-0.2; Q6_K: d, its weights
    d sc (q - 32) within about +-0.5), everything else uniform bytes."""
    import gguf

    size, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    b = rng.integers(0, 256, (rows, k // size, nbytes), dtype=np.uint8)
    if qtype == "Q4_K":                                      # d, dmin first
        dd = rng.uniform(1, 2, (rows, k // size, 2)) * 2.0 ** -12
        b[..., :4] = dd.astype(np.float16).view(np.uint8).reshape(rows, -1, 4)
    else:                                                    # Q6_K: d last
        dd = rng.uniform(1, 2, (rows, k // size, 1)) * 2.0 ** -14
        b[..., -2:] = dd.astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    return b.reshape(rows, -1)


# the file's type -> the panels it runs on ("Q5_0+Q8_0": Q5_0 with attn_v in Q8_0, whose q|k|v
# runs as Q8_0: MIXED_QKV)
PANELS = {"Q4_0": "q4_0", "Q4_K": "q4_k", "Q6_K": "q6_k", "Q5_0": "q5_0", "Q5_0+Q8_0": "q5_0"}
MIXED_QKV = {"Q5_0+Q8_0": "q8_0"}


def _formats(backend) -> dict[str, set]:
    """Each layer matrix's name -> the panel formats it has across the layers."""
    return {n: {lw[n].fmt for lw in backend.layer_w} for n in MATS}


def _want(qtype: str) -> dict[str, set]:
    return {n: {MIXED_QKV.get(qtype, PANELS[qtype]) if n == "wqkv" else PANELS[qtype]}
            for n in MATS}


@pytest.fixture(scope="module", params=list(PANELS))
def quant_model(request, tmp_path_factory, kernels):
    """(GGUF type, the model loaded from a GGUF whose every 2-D weight is of that type; the
    "Q5_0+Q8_0" file has its attn_v tensors in Q8_0, as llama.cpp's Q4_K_M of SmolLM2 has in 14
    layers, so that q|k|v is a fused matrix of two formats)."""
    import gguf

    from llamanb.io.store import load_model

    qtype = request.param
    ftype = qtype.split("+")[0]
    d = tmp_path_factory.mktemp(f"tiny-{ftype}")
    # K-quants hold rows of whole 256-weight super-blocks: for them a model 256 wide, and 16
    # heads of 16 (wo's rows are 256 long too)
    kquant = qtype.endswith("_K")
    heads = dict(n_heads=16, n_kv_heads=4, hidden=256, ffn=256) if kquant else \
        dict(n_heads=8, n_kv_heads=2)
    hf = make_tiny_checkpoint(d / "hf", tie=False, seed=5, **heads)
    override = {}
    if kquant:
        rng = np.random.default_rng(9)
        state = {k: v.shape for k, v in hf.state_dict().items()}
        names = {f"blk.{i}.{g}.weight": state[f"model.layers.{i}.{h}.weight"]
                 for i in range(hf.config.num_hidden_layers) for g, h in LAYER_TENSORS.items()}
        names["output.weight"] = state["lm_head.weight"]
        names["token_embd.weight"] = state["model.embed_tokens.weight"]
        override = {n: (gguf.GGMLQuantizationType[qtype], _random_k_blocks(qtype, *shape, rng))
                    for n, shape in names.items()}
    if qtype == "Q5_0+Q8_0":
        Q8 = gguf.GGMLQuantizationType.Q8_0
        state = hf.state_dict()
        override = {f"blk.{i}.attn_v.weight": (Q8, gguf.quants.quantize(
            state[f"model.layers.{i}.self_attn.v_proj.weight"].numpy(), Q8))
            for i in range(hf.config.num_hidden_layers)}
    write_tiny_gguf(d / f"tiny-{ftype}.gguf", hf, qtype="F32" if kquant else ftype,
                    raw_override=override)
    return qtype, load_model(d / f"tiny-{ftype}.gguf")


def _run(engine, ids, steps=3):
    cache = engine.new_cache(len(ids) + steps + 1)
    rows = [engine.prefill(ids, cache)]
    for _ in range(steps):
        rows.append(engine.decode(int(np.argmax(rows[-1])), cache))
    return rows


def test_engine_is_the_float32_engine_from_its_own_blocks(quant_model):
    """Every matrix (the untied output head too) on panels of the file's format and size (Q4_K:
    4/3 of it, Q6_K 1.5x: float32 sub-block scales); with float32 activations, prefill logits
    and three greedy decode steps bit-identical to the float32 engine on the dequantised cache:
    the same weights in the same order, so the bound is 0."""
    import gguf

    from llamanb.engine.engine import Engine

    qtype, model = quant_model
    eq = Engine(model, "cpu", dtype="auto", activations="float32")
    ef = Engine(model, "cpu")
    b = eq.backend
    assert _formats(b) == _want(qtype) and b.lm_head.fmt == PANELS[qtype]
    if qtype in MIXED_QKV:
        L = model.config.n_layers              # q|k|v mixed; wo, gate|up, down and the head not
        assert f"{3 * L + 1} Q5_0 + {L} Q5_0/Q8_0 as Q8_0 matrices" in b.description
    else:
        assert f"{qtype} matrices as stored in the GGUF" in b.description
    # bytes: the gguf package's size of the panels' block per weight (Q4_K: float32 D and M for the
    # float16 d, dmin and 6-bit sc, m: 24 bytes per 32 weights; Q6_K: float32 D per 16 and int8
    # quants, 40), rows padded to whole panels
    def per32(fmt):
        size, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt.upper()]]
        return {"q4_k": 4 + 4 + 16, "q6_k": 4 + 4 + 32}.get(fmt, nbytes * 32 // size)

    NP = b.k.panel_width
    mats = [lw[n] for lw in b.layer_w for n in MATS] + [b.lm_head]
    assert sum(m.data.nbytes for m in mats) == sum(-(-m.n // NP) * NP * m.k // 32 * per32(m.fmt)
                                                   for m in mats)
    ids = [int(t) for t in np.random.default_rng(4).integers(3, model.config.vocab, 11)]
    for a, c in zip(_run(eq, ids), _run(ef, ids)):
        assert np.isfinite(a).all()
        assert np.array_equal(a, c)


def test_int8_one_call_equals_block_by_block(quant_model):
    """The default (8-bit activations) through kernels/cpu/forward.cc's one call and block by
    block from Python: the same kernels in the same order, so the same bits; and a different
    computation from the float path (the activations' rounding shows)."""
    from llamanb.engine.engine import Engine
    from llamanb.engine.step import Step

    qtype, model = quant_model
    e8 = Engine(model, "cpu", dtype="auto")                    # auto: each matrix as stored
    assert e8.backend.act8 and "8-bit activations" in e8.backend.description
    assert _formats(e8.backend) == _want(qtype)
    out = []
    for collect in (None, []):
        c = e8.new_cache(16, slots=2)
        e8.prefill([1, 40, 41], c, slot=0)
        step = Step.build([(0, 3, np.array([7])), (1, 0, np.array([1, 9, 10, 11]))])
        out.append(e8.step(step, c, collect=collect))
    assert np.array_equal(out[0], out[1])
    ef = Engine(model, "cpu", dtype="auto", activations="float32")
    ids = [1, 40, 41, 7]
    assert not np.array_equal(_run(e8, ids, 0)[0], _run(ef, ids, 0)[0])


@pytest.mark.parametrize("dtype", ["q4_0", "q5_0", "q4_k", "q6_k"])
def test_dtype_on_another_format_is_one_line(smollm, kernels, dtype):
    """`--dtype q4_0` / `q5_0` / `q4_k` / `q6_k` on the shipped Q4_1 file names what it holds."""
    from llamanb.engine.engine import Engine

    with pytest.raises(LlamanbError, match=f"are not {dtype.upper()}") as e:
        Engine(smollm, "cpu", dtype=dtype)
    assert "\n" not in str(e.value) and "Q4_1" in str(e.value)


def test_cli_dtypes_are_the_backends():
    """The CLI lists its --dtype choices from the cpu track's one table (llamanb.cpu.dtypes), which
    imports no numpy: the same object, not a copy."""
    from llamanb import cli
    from llamanb.cpu.backend import CpuBackend

    assert cli.DTYPES is CpuBackend.DTYPES

"""The NPU2 backend on the engine seam (emulated): tokens equal to the numpy engine in its bf16
mode; NPU calls per prefill and per decode token counted by the device and compared with 3L+1 and
2L+1 from the config; bytes counted equal to the closed-form traffic model, host broker and
aliasing alike."""
from __future__ import annotations

import numpy as np
import pytest

import llamanb
from llamanb.engine.engine import Engine
from llamanb.errors import LlamanbError
from llamanb.npu import traffic

PROMPT = [1, 5, 9, 33, 40, 2, 7]          # contains EOS (2): the real length is carried


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from conftest import make_tiny_checkpoint
    d = tmp_path_factory.mktemp("tiny_npu")
    make_tiny_checkpoint(d, n_heads=6, n_kv_heads=2, tie=True)
    return llamanb.load_model(d)


def greedy(engine, prompt, n):
    cache = engine.new_cache(256)
    logits = engine.prefill(prompt, cache)
    toks = [int(np.argmax(logits))]
    for _ in range(n - 1):
        toks.append(int(np.argmax(engine.decode(toks[-1], cache))))
    return toks


def test_tokens_equal_numpy_bf16(tiny):
    ref = greedy(Engine(tiny, "numpy", dtype="bf16"), PROMPT, 8)
    assert greedy(Engine(tiny, "npu2-emulated"), PROMPT, 8) == ref
    # the MLIR text itself, interpreted op by op, gives the same tokens
    assert greedy(Engine(tiny, "npu2-emulated", execute="text"), PROMPT, 3) == ref[:3]


def test_calls_and_bytes_counted(tiny):
    cfg = tiny.config
    L = cfg.n_layers
    for aliasing in (False, True):
        eng = Engine(tiny, "npu2-emulated", aliasing=aliasing)
        b = eng.backend
        assert b.emulated and "emulated" in b.description
        for rep in range(2):                          # rep 1: the steady state
            cache = eng.new_cache(256)
            c0 = b.counters.copy()
            eng.prefill(PROMPT, cache)
            pre = b.counters - c0
            c0 = b.counters.copy()
            eng.decode(3, cache)
            eng.decode(4, cache) if rep else None
            dec = b.counters - c0
        assert pre.dispatches == 3 * L + 1
        want = traffic.prefill_bytes(cfg, b.seq, aliasing=aliasing)
        assert (pre.bytes_to_device, pre.bytes_from_device) == (want["to_device"],
                                                                want["from_device"])
        assert dec.dispatches == 2 * (2 * L + 1)
        want = traffic.decode_bytes(cfg)
        assert (dec.bytes_to_device, dec.bytes_from_device) == (2 * want["to_device"],
                                                                2 * want["from_device"])
        assert pre.estimated_s > 0 and "estimated" in str(pre)
    broker = traffic.prefill_bytes(cfg, 128)
    alias = traffic.prefill_bytes(cfg, 128, aliasing=True)
    assert sum(alias.values()) < sum(broker.values())


def test_aliasing_gives_the_same_logits(tiny):
    out = []
    for aliasing in (False, True):
        eng = Engine(tiny, "npu2-emulated", aliasing=aliasing)
        out.append(eng.prefill(PROMPT, eng.new_cache(256)))
    assert np.array_equal(out[0], out[1])


def test_chunked_prompt_runs_host_attention_for_the_later_chunk(tiny):
    prompt = list(np.random.default_rng(0).integers(3, tiny.config.vocab, 131))
    eng = Engine(tiny, "npu2-emulated")
    ref = Engine(tiny, "numpy", dtype="bf16")
    got = eng.prefill(prompt, eng.new_cache(256))
    want = ref.prefill(prompt, ref.new_cache(256))
    assert eng.backend.host_attention == tiny.config.n_layers     # the second chunk's layers
    assert int(np.argmax(got)) == int(np.argmax(want))
    np.testing.assert_allclose(got, want, atol=0.1 * np.abs(want).max())


def test_bad_options_and_missing_hardware(tiny):
    with pytest.raises(LlamanbError, match="does not divide"):
        Engine(tiny, "npu2-emulated", seq=100)
    with pytest.raises(LlamanbError, match="npu2-emulated"):
        Engine(tiny, "npu2")


def test_cli_generate_on_the_emulated_npu(tiny, llamanb_cache):
    from conftest import run_cli
    r = run_cli(["generate", "--model", tiny.source,
                 "--backend", "npu2-emulated", "--raw", "--prompt", "ab", "--max-new-tokens", "3"],
                cache=llamanb_cache)
    assert r.returncode == 0, r.stderr
    assert "emulated NPU2" in r.stderr and "NPU calls/token" in r.stderr
    assert "not measured" in r.stderr
    bad = run_cli(["generate", "--backend", "npu9", "--prompt", "x"], cache=llamanb_cache)
    assert bad.returncode == 2 and "unknown backend 'npu9'" in bad.stderr

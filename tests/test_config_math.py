"""A checkpoint runs only if llamanb implements its math: a config field (HF config.json, GGUF
metadata) or tensor that changes the computation is either implemented -- and then matches
transformers -- or refused in one line that names it; a config too large for this machine's memory
is refused before anything is allocated."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import hf_logits, make_tiny_checkpoint, run_cli, run_cli_here, write_tiny_gguf


def _one_line(p, *words):
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llamanb: error:"), p.stderr[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("math") / "tiny"
    model = make_tiny_checkpoint(d, n_heads=4, n_kv_heads=2, tie=False, seed=3)
    return d, model


def _generate(model_dir, cache):
    return run_cli_here(["generate", "--model", model_dir, "--raw", "--prompt", "w3 w4",
                         "--max-new-tokens", "1"], cache=cache)


@pytest.mark.parametrize("attention_bias, mlp_bias, field", [(True, False, "attention_bias"),
                                                             (False, True, "mlp_bias")])
def test_a_llama_with_biases_saved_by_transformers_is_refused(tmp_path, attention_bias, mlp_bias,
                                                              field):
    """transformers' own Llama with attention_bias / mlp_bias (its modeling_llama.py adds them to
    q/k/v/o and gate/up/down): llamanb ran it with the biases dropped (cosine -0.07 at the last
    layer); now one line naming the field, and nothing is converted."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from conftest import TINY_VOCAB, tiny_tokenizer_json

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=96,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      attention_bias=attention_bias, mlp_bias=mlp_bias, bos_token_id=1,
                      eos_token_id=2)
    d = tmp_path / "biased"
    LlamaForCausalLM(cfg).save_pretrained(d, safe_serialization=True)
    (d / "tokenizer.json").write_text(tiny_tokenizer_json(TINY_VOCAB))
    assert any(k.endswith(".bias") for k in LlamaForCausalLM(cfg).state_dict())
    _one_line(_generate(d, tmp_path / "cache"), f"{field} is True")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").glob("biased-*"))


@pytest.mark.parametrize("change, words", [
    ({"hidden_act": "gelu"}, "hidden_act is 'gelu'"),
    ({"hidden_act": "relu"}, "hidden_act is 'relu'"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor is 0.5"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_type 'linear'"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "rope_type 'yarn'"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                          "partial_rotary_factor": 0.25}}, "partial_rotary_factor is 0.25"),
])
def test_fields_that_change_the_math_are_refused_by_name(tmp_path, tiny, change, words):
    d = tmp_path / "edited"
    shutil.copytree(tiny[0], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(change)
    (d / "config.json").write_text(json.dumps(cfg))
    _one_line(_generate(d, tmp_path / "cache"), words)


def test_implemented_fields_match_transformers(tmp_path, tiny):
    """What llamanb does implement, read from config.json and matched against transformers on the
    same files: rms_norm_eps (large, so that it matters), hidden_act 'swish' (SiLU in transformers'
    ACT2FN), head_dim 16 != hidden 96 / 4 heads, untied head, and fields that do not change
    inference (dropout, pretraining_tp, sliding_window, which transformers' Llama does not read)."""
    import torch
    from transformers import LlamaForCausalLM

    from llamanb.engine.engine import Engine
    from llamanb.io.store import load_model

    d = tmp_path / "implemented"
    shutil.copytree(tiny[0], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update({"rms_norm_eps": 0.5, "hidden_act": "swish", "attention_dropout": 0.3,
                "pretraining_tp": 2, "sliding_window": 4})
    (d / "config.json").write_text(json.dumps(cfg))
    hf = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    assert hf.config.rms_norm_eps == 0.5
    ids = [3, 17, 200, 45, 9, 120, 77, 31]
    ref = hf_logits(hf, ids)
    base = hf_logits(tiny[1], ids)
    assert np.max(np.abs(ref - base)) > 1e-2                  # eps 0.5 changes the logits
    model = load_model(d)
    assert model.config.rms_eps == 0.5
    ours = Engine(model).logits_all(ids)
    np.testing.assert_allclose(ours, ref, atol=2e-4, rtol=1e-4)


# ---- GGUF ---------------------------------------------------------------------------------------------
@pytest.fixture
def gguf_with(monkeypatch):
    """write_tiny_gguf, with extra metadata keys and tensors added to what it writes."""
    import gguf

    def write(path, hf_model, kv=None, tensors=None, block_count=None):
        real = gguf.GGUFWriter

        class Writer(real):
            def add_block_count(self, n):
                super().add_block_count(block_count if block_count is not None else n)

            def write_header_to_file(self, *a, **k):
                for key, (kind, v) in (kv or {}).items():
                    getattr(self, f"add_{kind}")(key, v)
                for name, arr in (tensors or {}).items():
                    self.add_tensor(name, arr)
                return super().write_header_to_file(*a, **k)

        monkeypatch.setattr(gguf, "GGUFWriter", Writer)
        try:
            write_tiny_gguf(path, hf_model)
        finally:
            monkeypatch.setattr(gguf, "GGUFWriter", real)
        return path
    return write


@pytest.mark.parametrize("kv, tensors, words", [
    ({"llama.rope.scaling.type": ("string", "linear")}, None, "llama.rope.scaling.type is 'linear'"),
    ({"llama.expert_count": ("uint32", 8)}, None, "llama.expert_count is 8"),
    (None, {"blk.0.attn_q.bias": np.ones(64, np.float32)}, "tensor blk.0.attn_q.bias"),
    (None, {"blk.1.ffn_down.bias": np.ones(96, np.float32)}, "tensor blk.1.ffn_down.bias"),
])
def test_gguf_keys_and_tensors_that_change_the_math_are_refused(tmp_path, tiny, gguf_with, kv,
                                                                tensors, words):
    f = gguf_with(tmp_path / "x.gguf", tiny[1], kv=kv, tensors=tensors)
    _one_line(run_cli_here(["generate", "--model", f, "--raw", "--prompt", "ab",
                            "--max-new-tokens", "1"], cache=tmp_path / "cache"), words)


def test_gguf_partial_rope_and_value_length_are_refused(tmp_path, tiny, gguf_with):
    import gguf

    real = gguf.GGUFWriter.add_rope_dimension_count
    for key, words in (("add_rope_dimension_count", "llama.rope.dimension_count is 8"),
                       ("add_value_length", "llama.attention.value_length is 8")):
        orig = getattr(gguf.GGUFWriter, key)
        setattr(gguf.GGUFWriter, key, lambda self, n, orig=orig: orig(self, 8))
        try:
            f = gguf_with(tmp_path / f"{key}.gguf", tiny[1])
        finally:
            setattr(gguf.GGUFWriter, key, orig)
        _one_line(run_cli_here(["generate", "--model", f, "--raw", "--prompt", "ab",
                                "--max-new-tokens", "1"], cache=tmp_path / "cache"), words)
    assert gguf.GGUFWriter.add_rope_dimension_count is real


@pytest.mark.parametrize("command", ["info", "generate"])
def test_a_gguf_too_large_for_memory_is_refused_at_once(tmp_path, tiny, gguf_with, command):
    """block_count = 10**9: `info` and `generate` printed nothing while memory grew, until
    killed; now one line from the config's numbers, before anything is allocated."""
    import subprocess
    import time

    f = gguf_with(tmp_path / "huge.gguf", tiny[1], block_count=10 ** 9)
    args = ["--model", f] + (["--raw", "--prompt", "ab"] if command == "generate" else [])
    t0 = time.perf_counter()
    try:
        p = run_cli([command, *args], cache=tmp_path / "cache", timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command} still running after 120 s")
    _one_line(p, "1,000,000,000 layers", "memory and swap")
    assert time.perf_counter() - t0 < 60


def test_an_hf_config_too_large_for_memory_is_refused(tmp_path, tiny):
    d = tmp_path / "huge"
    shutil.copytree(tiny[0], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 10 ** 9
    (d / "config.json").write_text(json.dumps(cfg))
    _one_line(_generate(d, tmp_path / "cache"), "1,000,000,000 layers", "memory and swap")

"""The profile's byte counts: `profile.derived_bytes` (arguments' roles + the model config, never
the runtime's index sets) equals what KernelCache counted per call, for every group of a prefill
and a decode token; and for two groups the derivation is written out in closed form from the
config, so the function itself is checked too."""
from __future__ import annotations

import pytest

import llamanb
from llamanb.engine.engine import Engine
from llamanb.npu import profile
from llamanb.npu.runtime.devices import Counters


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from conftest import make_tiny_checkpoint
    d = tmp_path_factory.mktemp("tiny_npu_profile")
    make_tiny_checkpoint(d, n_heads=6, n_kv_heads=2, tie=True)
    return llamanb.load_model(d)


def test_derived_bytes_equal_the_runtime_counts(tiny):
    cfg = tiny.config
    eng = Engine(tiny, "npu2-emulated")
    b = eng.backend
    warm = eng.new_cache(256)                  # the first calls also write intermediates once
    eng.prefill([1, 5, 9, 33], warm)
    eng.decode(3, warm)
    cache = eng.new_cache(256)
    c0 = b.counters.copy()
    eng.prefill([1, 5, 9, 33], cache)
    pre = b.counters - c0
    c0 = b.counters.copy()
    eng.decode(3, cache)
    dec = b.counters - c0
    rows = {"prefill": b.seq, "decode": 1}
    seen = set()
    for phase, c in (("prefill", pre), ("decode", dec)):
        for g in profile.rows(phase, c):
            want = profile.derived_bytes(b.groups[g.group].spec, cfg, rows[phase])
            assert (g.bytes_to, g.bytes_from) == want, (phase, g.group)
            seen.add(g.group)
    assert seen == {"rms_gemms_rope", "flash_attn", "o_ffn", "rms_gemv_rope", "o_gemv_ffn",
                    "lm_head_gemv"}
    # closed form from the config (bf16 = 2 bytes): decode QKV writes x [H] and the RoPE tables of
    # one position for N_h + N_kv heads, reads q, k, v; the LM head writes the normed row, reads
    # every logit
    H, d, Nh, Nkv = cfg.hidden, cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    assert profile.derived_bytes(b.groups["rms_gemv_rope"].spec, cfg, 1) == (
        2 * (H + (Nh + Nkv) * d), 2 * (Nh + 2 * Nkv) * d)
    assert profile.derived_bytes(b.groups["lm_head_gemv"].spec, cfg, 1) == (2 * H, 2 * cfg.vocab)
    # prefill QKV: the whole padded step's rows and their tables
    S = b.seq
    assert profile.derived_bytes(b.groups["rms_gemms_rope"].spec, cfg, S) == (
        2 * S * (H + (Nh + Nkv) * d), 2 * S * (Nh + 2 * Nkv) * d)
    assert isinstance(sum([pre, dec], Counters()), Counters)


def test_tables_fit_a_notebook_column_and_keep_their_caption():
    """Both tables, captions included, fit Lab's output column (tests/lab/test_output_width.py's
    120 characters; the captions ran to 222 and 214 in chapter 13), and the caption still names
    every kind of time and the source, whole words only."""
    from llamanb.model.config import PRESETS

    rows = profile.spec_rows(PRESETS["llama3.2-1b"], 2048, 1024)
    what = "host time emulating the NPU2 (numpy), not device time"
    for text, must in ((profile.table(rows, what), [what, "NPU2 cost model (calibrated)"]),
                       (profile.spec_table(rows), ["none (not run)", "the others predicted"])):
        lines = text.splitlines()
        assert max(map(len, lines)) <= min(120, len(lines[-1].rstrip()) + 10), text
        caption = " ".join(ln.strip() for ln in lines[:lines.index(next(ln for ln in lines
                                                                        if ln.startswith("phase")))])
        assert caption.startswith("per call, ms.")
        for words in must + ["measured:", "estimated:", "published:", profile.SOURCE]:
            assert words in caption, (words, caption)

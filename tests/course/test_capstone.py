"""Chapter 13's pieces: the profile's counted bytes and time split, the side-by-side check, and the
chat widget driven as its buttons would drive it."""
from __future__ import annotations

import numpy as np
import pytest

from llamanb import Engine
from llamanb.check.greedy import GreedyRun
from llamanb.check.sidebyside import BackendRun, agree, side_by_side, table
from llamanb.model.config import PRESETS
from llamanb.npu import profile
from llamanb.npu.runtime.devices import Counters


@pytest.fixture(scope="module")
def npu_run(smollm):
    """One prefill (EOS-padded to 128 rows) and two decode tokens on the emulated NPU2."""
    eng = Engine(smollm, "npu2-emulated")
    ids = smollm.tokenizer.encode_prompt("Hi")
    warm = eng.new_cache(256)                      # the first call per buffer set also writes
    eng.decode(int(np.argmax(eng.prefill(ids, warm))), warm)   # its intermediates, once
    cache = eng.new_cache(256)
    c0 = eng.backend.counters.copy()
    tok = int(np.argmax(eng.prefill(ids, cache)))
    c1 = eng.backend.counters.copy()
    for _ in range(2):
        tok = int(np.argmax(eng.decode(tok, cache)))
    c2 = eng.backend.counters.copy()
    return eng, c1 - c0, c2 - c1


def test_bytes_per_call_in_closed_form(npu_run):
    """o_ffn writes the attention output and the residual, reads the block output; o_gemv_ffn the
    same for one row (bf16: 2 bytes a value). Intermediates and weights never move per call."""
    eng, pre, dec = npu_run
    c, S = eng.config, eng.backend.seq
    rows = {(g.phase, g.group): g for g in profile.rows("prefill", pre) + profile.rows("decode", dec)}
    o = rows["prefill", "o_ffn"]
    assert (o.calls, o.bytes_to, o.bytes_from) == (c.n_layers, 2 * S * (c.q_dim + c.hidden), 2 * S * c.hidden)
    d = rows["decode", "o_gemv_ffn"]
    assert (d.calls, d.bytes_to, d.bytes_from) == (2 * c.n_layers, 2 * (c.q_dim + c.hidden), 2 * c.hidden)
    head = rows["decode", "lm_head_gemv"]
    assert (head.calls, head.bytes_to, head.bytes_from) == (2, 2 * c.hidden, 2 * c.vocab)
    # flash_attn reads back its output only: [S, N_h d]
    assert rows["prefill", "flash_attn"].bytes_from == 2 * S * c.q_dim
    # the totals agree with the device's own byte counters
    assert sum(g.calls * g.bytes_to for g in rows.values() if g.phase == "decode") == dec.bytes_to_device
    assert sum(g.calls * g.bytes_from for g in rows.values() if g.phase == "prefill") == pre.bytes_from_device


def test_time_split_is_measured_and_kept_apart(npu_run):
    eng, pre, dec = npu_run
    for g in profile.rows("prefill", pre):
        assert min(g.write_ms, g.run_ms, g.read_ms) >= 0 and g.run_ms > 0
        assert g.estimated_ms > 0                          # the cost model, per call
    # the run part of the split is the device's own dispatch clock (Counters.dispatch)
    run_s = sum(r[4] for r in pre.per_call.values())
    assert run_s == pytest.approx(pre.wall_s, rel=0.05, abs=2e-3)
    text = profile.table(profile.rows("prefill", pre), "host emulation")
    assert "measured: host emulation" in text and "published" in text and "estimated" in text


def test_counters_add_and_subtract(npu_run):
    _, pre, dec = npu_run
    both = pre + dec
    back = both - dec
    assert back.per_call == {k: v for k, v in pre.per_call.items()}
    assert both.dispatches == pre.dispatches + dec.dispatches
    assert sum([pre, dec], Counters()).bytes_to_device == both.bytes_to_device


def test_spec_only_rows_for_llama_1b():
    cfg = PRESETS["llama3.2-1b"]
    rows = profile.spec_rows(cfg, 2048, 1024)
    calls = {(r.phase, r.group): r.calls for r in rows}
    assert calls["prefill", "o_ffn"] == cfg.n_layers == calls["decode", "o_gemv_ffn"]
    assert calls["prefill", "lm_head_gemv"] == 1
    assert all(np.isnan(r.measured_ms) for r in rows)        # nothing ran: no measured time
    assert all(r.published_ms for r in rows)                 # upstream publishes every group


def _run(ids, tops):
    return GreedyRun(ids, tops, [[0.0] * len(t) for t in tops])


def test_agree_is_the_top5_rule():
    ref = _run([5, 6, 7], [[5, 1], [6, 9], [7, 1]])
    assert agree(_run([5, 6, 7], ref.top_ids), ref) == (True, "identical (3 tokens)")
    ok, why = agree(_run([5, 9, 3], [[5], [9, 6], [3]]), ref)       # 9 in ref's top, 6 in ours
    assert ok and "token 1" in why
    ok, why = agree(_run([5, 2, 3], [[5], [2, 4], [3]]), ref)       # 2 not in ref's top
    assert not ok and "NOT" in why


def test_table_stays_aligned_and_within_a_notebook_column():
    runs = [BackendRun(name, "", _run([5], [[5]]), 1.0, act, units, nbytes, agreement)
            for name, act, units, nbytes, agreement in (
                ("numpy", "", None, None, "the reference"),
                ("npu2-emulated", "NPU calls", 61.0, 1234567.0,
                 "first difference at token 12 (each in the other top-5)"),
                ("galaxy-emulated", "collectives", 242.0, 98765.0, "identical (16 tokens)"))]
    lines = table(runs).splitlines()
    assert max(len(line) for line in lines) <= 120
    # every row's columns start where the header's do: the agreement, then right-aligned numbers
    col = lines[0].index("vs reference")
    assert all(line[col:].startswith(r.agreement) for line, r in zip(lines[1:], runs))
    assert len({len(line) for line in lines}) == 1 and lines[2].endswith("1,234,567")


def test_side_by_side_counts_each_backends_activity(smollm):
    from llamanb.mesh.config import MeshConfig

    engines = {"numpy": Engine(smollm), "tcp": Engine(smollm, "tcp"),
               "galaxy-emulated": Engine(smollm, "galaxy-emulated", mesh=MeshConfig((1, 3)))}
    ids = smollm.tokenizer.encode("The capital of France is")
    runs = {r.name: r for r in side_by_side(engines, ids, steps=3)}
    assert all(r.passes for r in runs.values())
    assert runs["numpy"].units_per_token is None
    assert runs["tcp"].activity == "TCP program ops" and runs["tcp"].units_per_token > 0
    g = runs["galaxy-emulated"]
    assert g.activity == "collectives" and g.units_per_token > 0 and g.bytes_per_token > 0


def test_chat_widget_send_and_reset(smollm_engine):
    pytest.importorskip("ipywidgets")
    from llamanb.engine.chat import Chat
    from llamanb.course.widgets import chat_widget

    box = chat_widget(Chat(smollm_engine, context=256, max_new_tokens=6))
    box.text.value = "Hello!"
    box.send_button.click()                         # what a click in the browser does
    text = "".join(o.get("text", "") for o in box.out.outputs)
    assert text.startswith("you> Hello!\nassistant> ") and len(text) > len("you> Hello!\nassistant> ") + 2
    assert "turn 1" in box.status.value and box.text.value == ""
    box.reset_button.click()
    assert box.out.outputs == () and "reset" in box.status.value

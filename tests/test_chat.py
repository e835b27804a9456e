"""The multi-turn chat: the cache kept across turns, the same tokens as one prefill of the whole
conversation, the context limit, and the terminal program typed into as a person would."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from llamanb import SamplingParams, generate
from llamanb.chat import Chat, ContextFull, common_prefix
from llamanb.errors import LlamanbError

from conftest import REPO_ROOT


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([7], [8]) == 0


def test_second_turn_prefills_only_new_tokens_and_equals_one_prefill(smollm_engine):
    """Greedy, two turns: turn 2 reuses turn 1's cache, and its tokens are those of generating
    from one prefill of the whole conversation as the template renders it."""
    eng = smollm_engine
    chat = Chat(eng, context=512, max_new_tokens=20)
    t1 = chat.send("Name one colour of the rainbow.")
    assert t1.reused == 0 and t1.ids
    t2 = chat.send("And one more?")
    tok = eng.model.tokenizer
    whole = tok.apply_chat_template([{"role": "user", "content": "Name one colour of the rainbow."},
                                     {"role": "assistant", "content": t1.text},
                                     {"role": "user", "content": "And one more?"}])
    # turn 2 kept (almost) everything turn 1 cached and prefilled only the rest
    assert t2.reused + t2.prefilled == len(whole)
    assert t2.reused >= len(whole) - 16 and t2.prefilled < len(whole) // 2
    ref = generate(eng, whole, 20)
    print(f"turn 2: {t2.prefilled} new of {len(whole)} positions; tokens {t2.ids[:8]}...")
    assert t2.ids == ref.ids
    # the cache holds exactly the conversation: the rendered prompt, then the answer
    assert chat.ids == whole + t2.ids[:len(chat.ids) - len(whole)]
    assert int(chat.cache.lengths[0]) == len(chat.ids)


def test_context_full_changes_nothing_and_reset_empties(smollm_engine):
    chat = Chat(smollm_engine, context=48, max_new_tokens=4)
    chat.send("Hi")
    before = (list(chat.ids), list(chat.messages), int(chat.cache.lengths[0]))
    with pytest.raises(ContextFull, match="/reset"):
        chat.send("word " * 60)
    assert (chat.ids, chat.messages, int(chat.cache.lengths[0])) == before
    chat.reset()
    assert chat.ids == [] and int(chat.cache.lengths[0]) == 0 and chat.messages == []
    assert chat.send("Hi").reused == 0


def test_interrupted_answer_keeps_the_cache_consistent(smollm_engine):
    chat = Chat(smollm_engine, context=256, max_new_tokens=30)
    seen = []

    def stop_after_three(tok_id, piece):
        seen.append(tok_id)
        if len(seen) == 3:
            raise KeyboardInterrupt

    turn = chat.send("Tell me a story about a cat.", on_token=stop_after_three)
    assert turn.stop_reason == "interrupted" and turn.ids == seen
    assert int(chat.cache.lengths[0]) == len(chat.ids)
    nxt = chat.send("Shorter, please.")          # continues from the kept prefix
    assert nxt.reused > 0 and nxt.ids


def test_bad_messages(smollm_engine):
    chat = Chat(smollm_engine, context=64)
    with pytest.raises(LlamanbError, match="empty"):
        chat.send("   ")
    with pytest.raises(LlamanbError, match="Engine"):
        Chat("numpy")
    with pytest.raises(LlamanbError, match="max_new_tokens"):
        Chat(smollm_engine, max_new_tokens=0)


def test_device_backend_counts_calls_per_token(npu_engine):
    chat = Chat(npu_engine, context=256, max_new_tokens=3, params=SamplingParams())
    turn = chat.send("Hi")
    L = npu_engine.config.n_layers
    # prefill: 3 groups per layer + the LM head; decode: 2 groups per layer + the LM head
    assert turn.per_token[0].dispatches == 3 * L + 1
    assert all(c.dispatches == 2 * L + 1 for c in turn.per_token[1:])
    assert chat.stats()["calls"] == sum(c.dispatches for c in turn.per_token)


@pytest.fixture(scope="module")
def npu_engine(smollm):
    from llamanb import Engine

    return Engine(smollm, "npu2-emulated")


# ---- the terminal program, typed into -------------------------------------------------------------
pexpect = pytest.importorskip("pexpect")


def _spawn(*args, timeout=240):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1", "TERM": "dumb"}
    return pexpect.spawn(sys.executable, ["-m", "llamanb", "chat", *args], cwd=str(REPO_ROOT),
                         env=env, encoding="utf-8", timeout=timeout, dimensions=(40, 200))


@pytest.mark.slow
def test_chat_in_a_terminal_two_turns_stats_reset_and_ctrl_d(smollm):
    p = _spawn("--max-new-tokens", "24")
    p.expect("commands: /reset, /stats, /quit")
    p.expect("you> ")
    p.sendline("What is the capital of France?")
    p.expect("assistant> ")
    p.expect("you> ")
    first = p.before
    assert "Paris" in first
    p.sendline("And of Italy?")
    p.expect("you> ")
    assert "Rome" in p.before
    p.sendline("/stats")
    p.expect(r"turns 2 \| context (\d+)/4096 tokens \(prefilled (\d+), reused from the cache (\d+)")
    used, prefilled, reused = (int(g) for g in p.match.groups())
    assert reused > 0 and prefilled + reused > used > prefilled   # turn 2 reused turn 1's cache
    p.expect("you> ")
    p.sendline("/reset")
    p.expect("conversation forgotten")
    p.expect("you> ")
    p.sendline("/nope")
    p.expect("unknown command /nope")
    p.expect("you> ")
    p.sendeof()                                       # Ctrl-D
    p.expect("bye")
    p.expect(pexpect.EOF)
    p.close()
    assert p.exitstatus == 0, p.before


@pytest.mark.slow
def test_chat_ctrl_c_stops_an_answer_then_leaves_and_context_full(smollm):
    p = _spawn("--max-new-tokens", "400", "--context", "96")
    p.expect("you> ")
    p.sendline("Write a long poem about the sea.")
    p.expect("assistant> ")
    p.expect(r"\w+ \w+")                             # the answer is streaming
    p.sendintr()                                      # Ctrl-C: stops this answer only
    p.expect("answer interrupted")
    p.expect("you> ")
    p.sendline("word " * 120)                         # would outgrow the 96-token context
    p.expect("context full")
    p.expect("/reset")
    p.expect("you> ")
    p.sendintr()                                      # Ctrl-C at the prompt: leave, exit 0
    p.expect("bye")
    p.expect(pexpect.EOF)
    p.close()
    assert p.exitstatus == 0, p.before


def test_chat_bad_option_is_one_line(llamanb_cache):
    from conftest import run_cli

    r = run_cli(["chat", "--context", "0"], cache=llamanb_cache)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = run_cli(["chat", "--backend", "npu9"], cache=llamanb_cache)
    assert r.returncode == 2 and "unknown backend 'npu9'" in r.stderr
    assert "Traceback" not in r.stderr

"""Chapter 13 exercises: the token-level gate that decides whether hardware output passes, and
the chat's reuse of its KV cache between turns.

    gate(ref_tokens, got_tokens, ref_top5, got_top5) -> (passed, first_diff_index)
        ref_top5[i] / got_top5[i]: the 5 most likely ids at step i, most likely first
        first_diff_index: the first step where the tokens differ (or where the shorter sequence
        ends), None when the two are identical
    against llamanb.check.verify.compare, the rule `python -m llamanb verify` applies (vLLM's
    check_logprobs_close): at the first differing step each side's token must be in the other
    side's top-5; after that step the texts differ and nothing more is compared.

    plan_turn(cached, rendered) -> (keep, new_ids)
        cached: the ids the KV cache holds; rendered: the whole conversation with the new user
        message, as the chat template renders it; keep: cache positions to keep, new_ids: what to
        prefill. Against llamanb.engine.chat.plan_turn.
"""
from __future__ import annotations

import numpy as np

from llamanb.engine.chat import plan_turn as _plan_turn
from llamanb.check.greedy import GreedyRun
from llamanb.check.verify import compare
from llamanb.course.exercises.check import Case, Exercise

VOCAB = 40


def _reference(ref, got, ref_top5, got_top5) -> tuple[bool, int | None]:
    run = GreedyRun(list(got), [list(t) for t in got_top5], [[0.0] * 5 for _ in got_top5],
                    [np.zeros(VOCAB, np.float32) for _ in got])
    r = compare("exercise", run, list(ref), [{"ids": list(t), "logits": [0.0] * 5} for t in ref_top5],
                decode=str)
    return bool(r.passed), r.diverged_at


def _top5(rng, chosen: int, extra=()) -> list[int]:
    """A top-5 list with `chosen` first and `extra` ids somewhere after it."""
    others = [int(t) for t in rng.permutation(VOCAB) if t != chosen and t not in extra]
    rest = list(extra) + others[: 4 - len(extra)]
    rng.shuffle(rest)
    return [chosen] + rest


def _gate_cases() -> list[Case]:
    rng = np.random.default_rng(18)
    cases = []

    def add(label, ref, got, ref_top5, got_top5):
        cases.append(Case(label, (ref, got, ref_top5, got_top5),
                          _reference(ref, got, ref_top5, got_top5)))

    base = [int(t) for t in rng.integers(0, VOCAB, 8)]
    tops = [_top5(rng, t) for t in base]
    add("identical", base, list(base), tops, [list(t) for t in tops])
    # diverge at step 3: each side's token in the other's top-5
    got = base[:3] + [(base[3] + 1) % VOCAB] + base[4:]
    ref_t = [list(t) for t in tops]
    ref_t[3] = _top5(rng, base[3], extra=(got[3],))
    got_t = [list(t) for t in tops]
    got_t[3] = _top5(rng, got[3], extra=(base[3],))
    add("diverges at step 3, each token in the other's top-5", base, got, ref_t, got_t)
    # the same, but only one direction holds
    got_t_one = [list(t) for t in got_t]
    got_t_one[3] = _top5(rng, got[3])
    add("diverges at step 3, ours in the reference's top-5 but not the reverse", base, got, ref_t,
        got_t_one)
    ref_t_one = [list(t) for t in tops]
    ref_t_one[3] = _top5(rng, base[3])
    add("diverges at step 3, the reference's token in ours but ours not in the reference's", base,
        got, ref_t_one, got_t)
    # a second difference later never matters once the first is accepted
    got2 = list(got)
    got2[6] = (base[6] + 7) % VOCAB
    add("accepted divergence at step 3, unrelated tokens afterwards", base, got2, ref_t, got_t)
    # at step 0
    g0 = [(base[0] + 3) % VOCAB] + base[1:]
    r0 = [list(t) for t in tops]
    r0[0] = _top5(rng, base[0], extra=(g0[0],))
    g0t = [list(t) for t in tops]
    g0t[0] = _top5(rng, g0[0], extra=(base[0],))
    add("diverges at the first step (both in top-5)", base, g0, r0, g0t)
    g0t_no = [list(t) for t in g0t]
    g0t_no[0] = _top5(rng, g0[0])
    add("diverges at the first step (ours only in one direction)", base, g0, r0, g0t_no)
    # lengths: one side stopped early (an EOS) with identical tokens before it
    add("ours stops 2 tokens early", base, base[:6], tops, [list(t) for t in tops[:6]])
    add("ours runs 1 token longer", base[:7], base, tops[:7], [list(t) for t in tops])
    add("a single token, identical", base[:1], base[:1], tops[:1], [list(tops[0])])
    return cases


gate = Exercise(
    "13.1", "gate", _gate_cases,
    hint="walk both sequences together; at the FIRST step where they differ, pass only if our "
         "token is in the reference's top-5 AND the reference's token is in ours, and stop there; "
         "identical tokens but different lengths fail at the shorter length")

def _turn_cases() -> list[Case]:
    rng = np.random.default_rng(11)
    conv = [int(t) for t in rng.integers(3, 500, 40)]
    cases = []

    def add(label, cached, rendered):
        cases.append(Case(label, (list(cached), list(rendered)), _plan_turn(cached, rendered)))

    add("an empty cache (the first turn)", [], conv[:12])
    add("the cache holds the previous turn exactly", conv[:20], conv)
    answer = conv[20:28]
    resplit = conv[:24] + [999, 998] + conv[26:]            # the template re-tokenized an answer
    add("the answer re-tokenizes differently from position 24", conv[:28], resplit)
    add("everything is already cached (recompute the last position)", conv, conv)
    add("the cache holds more than the conversation (an interrupted answer)", conv + answer, conv)
    add("nothing in common (a new system message)", [7] + conv[1:20], conv)
    return cases


plan_turn = Exercise(
    "13.2", "plan_turn", _turn_cases,
    hint="keep the longest common prefix of cached and rendered; if that is ALL of rendered, keep "
         "one position fewer (the last row's logits choose the next token); prefill the rest")

EXERCISES = (gate, plan_turn)

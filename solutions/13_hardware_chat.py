"""Solutions to the exercises of notebook 11 (a token-level gate; the chat's cache reuse)."""


def gate(ref_tokens, got_tokens, ref_top5, got_top5):
    """(passed, first differing step or None): vLLM's check_logprobs_close rule.
    Why: greedy decoding on two numerically different machines may swap two near-tied tokens;
    that is acceptable when each side ranks the other's choice among its own five best. After the
    first difference the two continue from different text, so later steps say nothing."""
    n = min(len(ref_tokens), len(got_tokens))
    for i in range(n):
        if ref_tokens[i] != got_tokens[i]:
            ok = got_tokens[i] in ref_top5[i] and ref_tokens[i] in got_top5[i]
            return ok, i
    if len(ref_tokens) != len(got_tokens):
        return False, n
    return True, None


def plan_turn(cached, rendered):
    """(positions to keep, ids to prefill). Why: the cache is only valid as far as it agrees with
    the conversation as the template renders it now (an answer may re-tokenize differently, an
    interrupted answer may have cached more); everything after that point is prefilled again. If
    the cache already holds the whole conversation, the last position is still run once more,
    because the next token is chosen from that row's logits."""
    keep = 0
    while keep < min(len(cached), len(rendered)) and cached[keep] == rendered[keep]:
        keep += 1
    if keep == len(rendered):
        keep -= 1
    return keep, list(rendered[keep:])

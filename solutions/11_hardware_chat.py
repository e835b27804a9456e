"""Solution to the exercise of notebook 11 (a token-level gate)."""


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

"""Solutions to the exercises of notebook 07 (buffer objects and traffic)."""


def call_bytes(sizes, roles, first_call):
    """(to_device, from_device) bytes of one KernelCache.call, bf16.
    Why: weights and intermediates live in the bo_key's buffers after the first call (an
    intermediate is only ever written by the kernel itself); inputs change every call; outputs
    are the only thing read back."""
    once = ("weight", "intermediate")
    to = sum(n for n, r in zip(sizes, roles)
             if r == "input" or (first_call and r in once))
    back = sum(n for n, r in zip(sizes, roles) if r == "output")
    return 2 * to, 2 * back


def decode_bytes(c):
    """One steady-state decode token through the host broker.
    Why: each layer is two ELFs around host-side attention: rms_gemv_rope takes x and the RoPE
    rows for q and k and returns q, k, v; o_gemv_ffn takes the attention output and x and returns
    the block output. The LM head gets the normed last row and returns the logits."""
    H, qd, kvd, L = c.hidden, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.n_layers
    to = L * ((H + qd + kvd) + (qd + H)) + H
    back = L * ((qd + 2 * kvd) + H) + c.vocab
    return 2 * to, 2 * back


def prefill_bytes(c, S, aliasing):
    """One steady-state prefill of S rows, with or without aliasing.
    Why: the broker hands q, k, v to flash_attn and its output to o_ffn through the host, both
    ways; aliasing keeps them in shared device buffers and only k, v (for the host's cache) and the
    block output come back."""
    H, qd, kvd, L = c.hidden, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.n_layers
    luts = S * (qd + kvd)                                    # RoPE rows for q and k, every call
    if aliasing:
        to, back = S * H + luts + S * H, S * 2 * kvd + S * H
    else:
        to = (S * H + luts) + S * (qd + 2 * kvd) + (S * qd + S * H)
        back = S * (qd + 2 * kvd) + S * qd + S * H
    return 2 * (L * to + H), 2 * (L * back + c.vocab)

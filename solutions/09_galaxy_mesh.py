"""Solutions to the exercises of notebook 09 (the Galaxy mesh)."""
import numpy as np


def collective_traffic(op, topology, n, nbytes):
    """(steps, most bytes on one link in one direction) of one collective over n chips.
    Why: a reduce-scatter or all-gather is n-1 neighbour-to-neighbour rounds. On a line the end
    link carries n-1 of the n chunks in one direction; a ring uses both directions of every link,
    each for half of every chunk, so it halves that. An all-reduce is both in turn; on a line it
    puts exactly the whole tensor on every link direction."""
    steps = (n - 1) * (2 if op == "all_reduce" else 1)
    one = (n - 1) / n * nbytes                    # a line's reduce_scatter or all_gather
    if topology == "ring":
        one /= 2
    if op == "all_reduce":
        return steps, (nbytes if topology == "line" else 2 * one)
    return steps, one


def bfloat8_block(v):
    """16 values sharing one 8-bit exponent, each a sign and 7 magnitude bits.
    Why: the block's step is set by its largest member, so small neighbours of a large value
    lose their bits; a magnitude that rounds up to 128 no longer fits 7 bits and saturates."""
    a = np.abs(v.astype(np.float64))
    tiny = np.finfo(np.float32).tiny
    e = max(int(np.frexp(x)[1]) - 1 if x >= tiny else -127 for x in a)   # float32 exponent
    step = 2.0 ** (e - 6)
    m = np.minimum(np.round(a / step), 127)                                # ties to even
    return np.where(m == 0, 0.0, np.sign(v) * m * step).astype(np.float32)

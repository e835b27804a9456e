"""Solutions to the exercises of notebook 10 (continuous batching)."""


def preempt(cached, block, free_blocks):
    """Indices of the running requests preempted before the next step, newest first.
    Why: every decoding request writes one more position; it needs a new block exactly when that
    position is the first of a block. The newest request gives way (LIFO) because it has done the
    least work, and recomputing it later costs the least; its freed blocks go back to the pool."""
    running = list(range(len(cached)))
    free = free_blocks
    victims = []
    while True:
        growth = sum(1 for i in running if cached[i] % block == 0)
        if growth <= free:
            return victims
        victim = running.pop()                              # the newest
        free += -(-cached[victim] // block)                 # its blocks come back
        victims.append(victim)

def gather_keys(k_pool, table, n):
    """[N_kv, n, d]: a sequence's keys, its blocks laid end to end.
    Why: the block table lists the sequence's blocks in position order, wherever they lie in the
    pool; attention wants one head's keys contiguous, as the contiguous cache stores them."""
    blocks = k_pool[table]                                   # [n_blocks_used, N_kv, block, d]
    nb, nkv, b, d = blocks.shape
    keys = blocks.transpose(1, 0, 2, 3).reshape(nkv, nb * b, d)
    return keys[:, :n]

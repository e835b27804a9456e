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


def matmul_program(ttl, grid):
    """y = x @ w as a TT-Lang operation: each core of the grid takes every grid-th column tile
    of y; its reader streams the K tiles of x and w one at a time, its compute kernel keeps a
    running sum in a dataflow buffer, its writer stores the finished tile.
    Why: the three kernels run concurrently on a Tensix core and only meet in the dataflow
    buffers, so the K loop must be walked in the same order by the reader and the compute kernel."""

    @ttl.operation(grid=grid)
    def op(x, w, y):
        Mt, Kt, Nt = x.shape[0] // 32, x.shape[1] // 32, w.shape[1] // 32
        cores = ttl.grid_size(dims=1)
        x_in = ttl.make_dataflow_buffer_like(x, shape=(Mt, 1), block_count=2)
        w_in = ttl.make_dataflow_buffer_like(w, shape=(1, 1), block_count=2)
        acc_b = ttl.make_dataflow_buffer_like(y, shape=(Mt, 1), block_count=2)
        out = ttl.make_dataflow_buffer_like(y, shape=(Mt, 1), block_count=2)

        def columns():
            return range(ttl.node(dims=1), Nt, cores)

        @ttl.datamovement()
        def reader():
            for n in columns():
                for k in range(Kt):
                    with x_in.reserve() as xb, w_in.reserve() as wb:
                        tx = ttl.copy(x[0:Mt, k:k + 1], xb)
                        tw = ttl.copy(w[k:k + 1, n:n + 1], wb)
                        tx.wait()
                        tw.wait()

        @ttl.compute()
        def compute():
            for _ in columns():
                with acc_b.reserve() as acc:
                    acc.store(ttl.block.fill(0, shape=acc.shape))
                for _ in range(Kt):
                    with x_in.wait() as xb, w_in.wait() as wb, acc_b.wait() as prev:
                        with acc_b.reserve() as acc:
                            acc.store(prev + xb @ wb)
                with acc_b.wait() as acc, out.reserve() as o:
                    o.store(acc)

        @ttl.datamovement()
        def writer():
            for n in columns():
                with out.wait() as o:
                    ttl.copy(o, y[0:Mt, n:n + 1]).wait()

    return op

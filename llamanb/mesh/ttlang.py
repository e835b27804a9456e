"""The mesh's decode-layer matmuls as TT-Lang kernels, run by Tenstorrent's simulator tt-lang-sim.

TT-Lang (tenstorrent/tt-lang) writes a Tensix program as three kernels per core of a grid, which
talk through dataflow buffers (circular buffers in L1):

    read    (datamovement)  copies tiles of x and W from DRAM into the buffers x_dfb, w_dfb
    compute (compute)       waits for them, multiplies tile blocks, accumulates over K in acc_dfb,
                            pushes each finished output block into y_dfb
    write   (datamovement)  copies y_dfb's blocks back to DRAM

`sharded_matmul` below is that program for y = x @ W with the output's column blocks dealt out to
the cores of the grid. A mesh runs the same program on every chip with the chip's own shards
(`run_on_mesh`); what a contraction split over an axis leaves as partial sums is then added by
the collectives of Tenstorrent's simulated ttnn (`ttl/sim/ttnnsim.py`: `all_reduce`, `all_gather`
with `cluster_axis`), on its convention that a mesh tensor is one tensor whose slices along the
mapped dims are the chips' (`ShardTensor2dMesh(dims=(0, 1))`: chip (r, c) holds rows r, columns c).
ttnnsim has no reduce-scatter; `reduce_scatter` here is its all_reduce followed by each chip
keeping its own chunk (the same sum; not the same traffic).

`decode_layer` runs one decode layer of the placement in llamanb.mesh.layers this way: QKV (all-
reduce over the hidden axis), WO (all-reduce over the head axis), W1 and W3 (reduce-scatter over the
hidden axis), SiLU * up in numpy, all-gather, W2 (all-reduce over the head axis). Values are
float32 (tt-lang-sim promotes bfloat16 to float32 by default), rows padded to one 32-row tile.

`tile_traffic(events)` sums the simulator's trace as `tt-lang-sim-stats` does (DRAM tiles read and
written per tensor); `counted_tiles` is the same number derived from the program's loops, and
`course_bytes` what llamanb.mesh.cost counts for the step (each weight once, unpadded).

tt-lang-sim is imported only when used (`load_ttlang`); it is a functional simulator: it runs the
kernels' dataflow and arithmetic on the CPU and says nothing about time on a card.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.model.ops import silu_mul

TILE = 32


def load_ttlang():
    """(ttl, ttnn) of tt-lang-sim (pip install tt-lang-sim), or one clear error."""
    try:
        from ttl.sim import ttl, ttnn
        from ttl.sim import ttnnsim
    except Exception as e:                                  # noqa: BLE001 -- missing or broken
        raise LlamanbError(f"tt-lang-sim is not usable here ({type(e).__name__}: {str(e)[:80]}); "
                           "pip install tt-lang-sim (or the ttlang extra)") from None
    _restore_torch_dtypes(ttnnsim)
    return ttl, ttnn


def _restore_torch_dtypes(ttnnsim) -> None:
    """tt-lang-sim 1.1.6 rebinds torch.bfloat16 and torch.float16 to torch.float32 when
    ttl/sim/ttnnsim.py is imported ("so that all native PyTorch code ... transparently uses
    float32"), for the whole process: safetensors then writes float32 tensors as 2-byte ones and
    transformers' bf16 runs silently become float32. Put torch's own dtypes back; ttnnsim keeps
    promoting its narrow tensors to float32 through its own table (_PROMOTABLE_FLOAT_DTYPES, which
    holds the original dtypes), so the simulation is unchanged."""
    import torch

    for name, dtype in getattr(ttnnsim, "_PROMOTABLE_FLOAT_DTYPES", {}).items():
        setattr(torch, name, dtype)


def ttlang_available() -> bool:
    try:
        load_ttlang()
    except LlamanbError:
        return False
    return True


def _block(n: int) -> int:
    """The largest of 8, 6, 4, 3, 2, 1 tiles that divides n tiles (a block the buffers hold)."""
    return next(b for b in (8, 6, 4, 3, 2, 1) if n % b == 0)


def sharded_matmul(ttl, grid=(1, 4)):
    """The TT-Lang operation y = x @ w (x [Mt, Kt] tiles, w [Kt, Nt], y [Mt, Nt]) on a core grid:
    output column blocks of nb tiles go round-robin to the cores; each core reads the x and w
    blocks of its K loop (kb tiles deep), accumulates in acc_dfb and writes its block of y."""

    @ttl.operation(grid=grid)
    def matmul_op(x, w, y):
        Mt, Kt, Nt = x.shape[0] // TILE, x.shape[1] // TILE, w.shape[1] // TILE
        kb, nb = _block(Kt), _block(Nt)
        n_blocks, k_blocks = Nt // nb, Kt // kb
        cores = ttl.grid_size(dims=1)
        per_core = -(-n_blocks // cores)
        x_dfb = ttl.make_dataflow_buffer_like(x, shape=(Mt, kb), block_count=2)
        w_dfb = ttl.make_dataflow_buffer_like(w, shape=(kb, nb), block_count=2)
        acc_dfb = ttl.make_dataflow_buffer_like(y, shape=(Mt, nb), block_count=2)
        y_dfb = ttl.make_dataflow_buffer_like(y, shape=(Mt, nb), block_count=2)

        def my_blocks():
            core = ttl.node(dims=1)
            return [b for b in range(core * per_core, (core + 1) * per_core) if b < n_blocks]

        @ttl.datamovement()
        def read():
            for b in my_blocks():
                for k in range(k_blocks):
                    with x_dfb.reserve() as xb, w_dfb.reserve() as wb:
                        tx = ttl.copy(x[0:Mt, k * kb:(k + 1) * kb], xb)
                        tw = ttl.copy(w[k * kb:(k + 1) * kb, b * nb:(b + 1) * nb], wb)
                        tx.wait()
                        tw.wait()

        @ttl.compute()
        def compute():
            for _ in my_blocks():
                with acc_dfb.reserve() as acc:
                    acc.store(ttl.block.fill(0, shape=acc.shape))
                for _ in range(k_blocks):
                    with x_dfb.wait() as xb, w_dfb.wait() as wb, acc_dfb.wait() as prev:
                        with acc_dfb.reserve() as acc:
                            acc.store(prev + xb @ wb)
                with acc_dfb.wait() as acc, y_dfb.reserve() as yb:
                    yb.store(acc)

        @ttl.datamovement()
        def write():
            for b in my_blocks():
                with y_dfb.wait() as yb:
                    ttl.copy(yb, y[0:Mt, b * nb:(b + 1) * nb]).wait()

    return matmul_op


def counted_tiles(Mt: int, Kt: int, Nt: int) -> dict[str, int]:
    """DRAM tiles the program above moves, from its loops: every output block reads its x row
    block and its w column block once per K step."""
    return {"x": Mt * Kt * (Nt // _block(Nt)), "w": Kt * Nt, "y": Mt * Nt}


@dataclass
class MeshRun:
    """The simulator's copy events of every kernel launch, by the weight it multiplied."""
    events: dict = field(default_factory=dict)       # weight name -> copy_end events
    launches: dict = field(default_factory=dict)     # weight name -> kernel launches


class TTLangMesh:
    """One TT-Lang program per chip of an R x C mesh, collectives through ttnnsim."""

    def __init__(self, shape: tuple[int, int], grid=(1, 4), trace: bool = True, program=None):
        """program(ttl, grid) -> a TT-Lang operation (x, w, y) with y = x @ w (default:
        `sharded_matmul`; the exercise of chapter 09 passes the reader's)."""
        self.ttl, self.ttnn = load_ttlang()
        self.shape, self.grid = shape, grid
        self.op = (program or sharded_matmul)(self.ttl, grid)
        self.device = self.ttnn.open_mesh_device(self.ttnn.MeshShape(*shape))
        self.run = MeshRun()
        if trace:
            from ttl.sim.trace import ALL_CATEGORIES, set_tracing

            set_tracing(frozenset({"copy"}) & ALL_CATEGORIES)

    # --- one chip ----------------------------------------------------------------------------
    def _tensor(self, a: np.ndarray):
        import torch

        return self.ttnn.from_torch(torch.from_numpy(np.ascontiguousarray(a, np.float32)),
                                    dtype=self.ttnn.bfloat16, layout=self.ttnn.TILE_LAYOUT)

    def matmul(self, x: np.ndarray, w: np.ndarray, name: str = "w") -> np.ndarray:
        """x [rows <= 32, K] @ w [K, N] by the TT-Lang program on one chip's core grid."""
        from ttl.sim.context import get_context

        R, K = x.shape
        if R > TILE or K % TILE or w.shape[1] % TILE:
            raise LlamanbError(f"sharded_matmul needs <= {TILE} rows and K, N multiples of {TILE}; "
                               f"got x {x.shape}, w {w.shape}")
        xp = np.zeros((TILE, K), np.float32)
        xp[:R] = x
        y = self._tensor(np.zeros((TILE, w.shape[1]), np.float32))
        self.op(self._tensor(xp), self._tensor(w), y)
        self.run.events.setdefault(name, []).extend([{"tick": e.tick, "kernel": e.kernel, "event": e.event, **e.data}
                            for e in get_context().trace_events if e.event == "copy_end"])
        get_context().trace_events.clear()
        self.run.launches[name] = self.run.launches.get(name, 0) + 1
        return self.ttnn.to_torch(y).numpy()[:R].astype(np.float32)

    # --- the mesh -----------------------------------------------------------------------------
    def on_mesh(self, fn) -> list[list[np.ndarray]]:
        """fn(r, c) -> chip (r, c)'s array, for every chip."""
        R, C = self.shape
        return [[fn(r, c) for c in range(C)] for r in range(R)]

    def _stacked(self, per_chip):
        """Per-chip arrays [rows <= 32, n] -> one ttnnsim mesh tensor [R 32, C n] (each chip's
        rows padded to a tile), chip (r, c) its block: ShardTensor2dMesh dims (0, 1)."""
        import torch

        def pad(a):
            p = np.zeros((TILE, a.shape[1]), np.float32)
            p[:a.shape[0]] = a
            return p
        return self.ttnn.from_torch(torch.from_numpy(np.block([[pad(a) for a in row] for row in per_chip])),
                                    mesh_mapper=self.ttnn.ShardTensor2dMesh(
                                        self.device, mesh_shape=self.shape, dims=(0, 1)))

    def _unstack(self, t, rows: int) -> list[list[np.ndarray]]:
        a = self.ttnn.to_torch(t).numpy()
        R, C = self.shape
        n = a.shape[1] // C
        return [[a[r * TILE:r * TILE + rows, c * n:(c + 1) * n].astype(np.float32) for c in range(C)]
                for r in range(R)]

    def all_reduce(self, per_chip, cluster_axis: int):
        rows = per_chip[0][0].shape[0]
        return self._unstack(self.ttnn.all_reduce(self._stacked(per_chip), cluster_axis=cluster_axis), rows)

    def all_gather(self, per_chip, cluster_axis: int):
        rows = per_chip[0][0].shape[0]
        return self._unstack(self.ttnn.all_gather(self._stacked(per_chip), dim=1,
                                                  cluster_axis=cluster_axis), rows)

    def reduce_scatter(self, per_chip, cluster_axis: int):
        """ttnnsim has no reduce_scatter: its all_reduce, then chip i of the group keeps chunk i."""
        total = self.all_reduce(per_chip, cluster_axis)
        n = self.shape[cluster_axis]
        return self.on_mesh(lambda r, c: np.split(total[r][c], n, axis=1)[(r, c)[cluster_axis]])


def k_split_matmul(mesh: TTLangMesh, x: np.ndarray, w: np.ndarray, cluster_axis: int = 1):
    """x [rows, K] @ w [K, N] with K split over the chips of `cluster_axis` (each chip multiplies
    its K slice: a partial sum), then ttnnsim's all_reduce: every chip of the group holds x @ w."""
    n = mesh.shape[cluster_axis]
    xs, ws = np.split(x, n, axis=1), np.split(w, n, axis=0)
    part = mesh.on_mesh(lambda r, c: mesh.matmul(xs[(r, c)[cluster_axis]], ws[(r, c)[cluster_axis]], "k-split"))
    return mesh.all_reduce(part, cluster_axis)


def decode_layer(mesh: TTLangMesh, layers, layer: int, h: np.ndarray, x: np.ndarray,
                 attn_of=None) -> dict:
    """One decode layer's matmuls and collectives on the TT-Lang mesh, for llamanb.mesh.layers'
    placement (`layers`: a MeshLayers on a mesh of the same shape, head axis 0, hidden axis 1).
    h: the normalised input row [1, H]; x: the residual [1, H]; attn_of(qkv_group_p) -> that
    group's attention output [1, nq d] (default: position 0, where attention returns V).
    Returns every stage's per-chip arrays, the stage inputs, and the layer's output rows."""
    c, pl = layers.config, layers.place
    if layers.mesh.config.shape != mesh.shape or layers.ha != 0:
        raise LlamanbError("decode_layer: the MeshLayers must be on the same mesh, head axis 0")
    d, Hq = c.head_dim, pl.hidden
    W = lambda name: layers._w(layer, name)                                       # noqa: E731
    hid = lambda a, q: a[:, q * Hq:(q + 1) * Hq]                                  # noqa: E731
    out = {"h": h}
    part = mesh.on_mesh(lambda r, q: mesh.matmul(hid(h, q), W("wqkv")(r, q).T, "wqkv"))
    out["qkv"] = qkv = mesh.all_reduce(part, 1)                                   # [1, group]

    def attn_v(a):                                    # one cached position: softmax = 1, out = V
        v = a[:, (pl.heads + pl.kv_heads) * d:].reshape(1, pl.kv_heads, d)
        return np.repeat(v, pl.heads // pl.kv_heads, axis=1).reshape(1, -1)
    attn_of = attn_of or attn_v
    out["attn"] = attn = [attn_of(qkv[p][0]) for p in range(pl.P)]
    part = mesh.on_mesh(lambda p, q: mesh.matmul(attn[p], W("wo")(p, q).T, "wo"))
    out["wo"] = wo = mesh.all_reduce(part, 0)                                     # [1, H/Q]
    x1 = x + np.concatenate(wo[0], axis=1)
    n = x1 / np.sqrt(np.mean(x1.astype(np.float64) ** 2, -1, keepdims=True) + c.rms_eps)
    h2 = (n * layers.weights.layers[layer].ffn_norm).astype(np.float32)
    out["h2"], out["x1"] = h2, x1.astype(np.float32)
    g = mesh.reduce_scatter(mesh.on_mesh(lambda p, q: mesh.matmul(hid(h2, q), W("w1")(p, q).T, "w1")), 1)
    u = mesh.reduce_scatter(mesh.on_mesh(lambda p, q: mesh.matmul(hid(h2, q), W("w3")(p, q).T, "w3")), 1)
    out["w1"], out["w3"] = g, u
    a = mesh.all_gather(mesh.on_mesh(lambda p, q: silu_mul(g[p][q], u[p][q])), 1)   # [1, F/P]
    out["a"] = a
    out["w2"] = y = mesh.all_reduce(mesh.on_mesh(lambda p, q: mesh.matmul(a[p][q], W("w2")(p, q).T, "w2")), 0)
    out["out"] = (out["x1"] + np.concatenate(y[0], axis=1)).astype(np.float32)
    return out


def tile_traffic(events: list) -> dict[str, int]:
    """DRAM tiles moved per tensor of the program (x, w read; y written), by tt-lang-sim-stats' own
    aggregation (its Tensor Access Statistics: `sim_stats.__main__._accumulate` on the trace
    written as JSON Lines, as `tt-lang-sim --trace` writes it); the simulator names tensors after
    the operation's parameters."""
    import json
    import os
    import tempfile

    from sim_stats.__main__ import _accumulate

    fd, path = tempfile.mkstemp(suffix=".jsonl")
    try:
        with os.fdopen(fd, "w") as f:
            f.writelines(json.dumps(e) + "\n" for e in events)
        tensors = _accumulate(__import__("pathlib").Path(path))[0]
    finally:
        os.unlink(path)
    return {name: st["dram_read"] + st["dram_write"] for name, st in tensors.items()}

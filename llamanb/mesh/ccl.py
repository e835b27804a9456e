"""Collectives on the emulated mesh, one axis at a time: every one in this module.

    all_gather(t, dim, cluster_axis)      each device's shard -> every device holds the concatenation
    reduce_scatter(t, dim, cluster_axis)  partial sums -> each device holds 1/n of the total
    all_reduce(t, cluster_axis)           partial sums -> every device holds the total
                                          (= reduce_scatter then all_gather, as the demo's prefill does)

`cluster_axis` picks the devices that talk: 1 -> the devices of one mesh row (each row separately,
all rows at once), 0 -> the devices of one column. Nothing else is ever summed or copied.

Each collective is carried out as the messages a real one sends between neighbouring devices,
step by step, so its result has the real summation order and its traffic is counted from the
messages, not from a formula:

    line  devices 0 - 1 - ... - n-1, links used in both directions. reduce_scatter: chunk k's
          partial sums flow from device 0 rightward and from device n-1 leftward until they meet
          at device k. all_gather: each shard flows out both ways. n-1 steps each.
    ring  a line plus the link n-1 - 0. Each chunk is halved; one half goes clockwise, the other
          counter-clockwise (the classic ring algorithm in each direction). n-1 steps each.

The record (`Traffic`, appended to mesh.ledger) holds the bytes sent over each directed link and
the number of steps; `busiest` is the most bytes any one link carries in one direction, which
with `steps` is what a bandwidth + latency model needs. Bytes count the values as the wire
would carry them: the arrays' own itemsize (float32 here), or `wire="bf16"` / `"bfp8"`.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from llamanb.model.config import BYTES_PER_PARAM
from llamanb.errors import LlamanbError
from llamanb.mesh.device import MeshTensor

Device = tuple[int, int]


@dataclass
class Traffic:
    op: str
    cluster_axis: int
    topology: str
    group_size: int            # devices that take part in each group
    steps: int                 # communication rounds (each a neighbour-to-neighbour hop)
    link_bytes: dict = field(default_factory=dict)   # (src, dst) -> bytes, all groups together
    label: str = ""

    @property
    def busiest(self) -> float:
        """Most bytes over one link in one direction."""
        return max(self.link_bytes.values(), default=0)

    @property
    def total(self) -> float:
        return sum(self.link_bytes.values())

    def __repr__(self) -> str:
        return (f"Traffic({self.op} axis {self.cluster_axis} {self.topology} n={self.group_size} "
                f"{self.label!r}: {self.steps} steps, busiest link {self.busiest:,.0f} B, "
                f"total {self.total:,.0f} B)")


# --- the algorithms, on one group of n devices (positions 0..n-1); send(i, j, array) records --------
def _ring_reduce_scatter(parts, send):
    """parts[i][k]: device i's partial of chunk k. Returns the total of chunk i on device i.
    Step s: device i passes its running sum of chunk (i - s - 1) to device i + 1."""
    n = len(parts)
    acc = [list(p) for p in parts]
    for s in range(n - 1):
        msgs = [(i, (i + 1) % n, (i - s - 1) % n) for i in range(n)]
        sent = [acc[i][c] for i, _, c in msgs]
        for (i, j, c), a in zip(msgs, sent):
            send(i, j, a)
            acc[j][c] = a + acc[j][c]
    return [acc[i][i] for i in range(n)]


def _ring_all_gather(shards, send):
    """Step s: device i passes shard (i - s) (its own, then the one it just received) onward."""
    n = len(shards)
    have = [{i: shards[i]} for i in range(n)]
    for s in range(n - 1):
        for i, j, c in [(i, (i + 1) % n, (i - s) % n) for i in range(n)]:
            send(i, j, have[i][c])
            have[j][c] = have[i][c]
    return [[have[i][c] for c in range(n)] for i in range(n)]


def _line_reduce_scatter(parts, send):
    """Chunk k: a running sum enters at device 0 and moves right one device per step, another
    enters at device n-1 and moves left; device k adds both to its own part."""
    n = len(parts)
    from_left = {k: parts[0][k] for k in range(1, n)}          # sum of devices 0..s, at device s
    from_right = {k: parts[n - 1][k] for k in range(n - 1)}    # sum of devices n-1-s..n-1
    for s in range(n - 1):
        for k in range(s + 1, n):                                 # rightward over link s -> s+1
            send(s, s + 1, from_left[k])
            if s + 1 < k:
                from_left[k] = from_left[k] + parts[s + 1][k]
        for k in range(0, n - 1 - s):                             # leftward over n-1-s -> n-2-s
            send(n - 1 - s, n - 2 - s, from_right[k])
            if n - 2 - s > k:
                from_right[k] = from_right[k] + parts[n - 2 - s][k]
    out = []
    for k in range(n):
        total = parts[k][k]
        if k > 0:
            total = from_left[k] + total
        if k < n - 1:
            total = total + from_right[k]
        out.append(total)
    return out


def _line_all_gather(shards, send):
    """Each shard moves outward both ways, one hop per step (device i forwards what it got)."""
    n = len(shards)
    for s in range(n - 1):
        for i in range(s, n - 1):
            send(i, i + 1, shards[i - s])
        for i in range(n - 1 - s, 0, -1):
            send(i, i - 1, shards[i + s])
    return [list(shards) for _ in range(n)]


def _split_halves(a, dim):
    h = a.shape[dim] // 2
    return np.split(a, [h], axis=dim)


def _group_reduce_scatter(arrays, dim, topology, send):
    n = len(arrays)
    parts = [np.split(a, n, axis=dim) for a in arrays]
    if topology == "line":
        return _line_reduce_scatter(parts, send)
    # ring: halve every chunk; clockwise on the first halves, counter-clockwise on the second
    first = [[_split_halves(c, dim)[0] for c in p] for p in parts]
    second = [[_split_halves(c, dim)[1] for c in p] for p in parts]
    cw = _ring_reduce_scatter(first, send)
    rev = lambda i: n - 1 - i                                                    # noqa: E731
    ccw = _ring_reduce_scatter([second[rev(v)][::-1] for v in range(n)],
                               lambda i, j, a: send(rev(i), rev(j), a))
    return [np.concatenate([cw[k], ccw[rev(k)]], axis=dim) for k in range(n)]


def _group_all_gather(arrays, dim, topology, send):
    n = len(arrays)
    if topology == "line":
        got = _line_all_gather(arrays, send)
        return [np.concatenate(g, axis=dim) for g in got]
    first = [_split_halves(a, dim)[0] for a in arrays]
    second = [_split_halves(a, dim)[1] for a in arrays]
    cw = _ring_all_gather(first, send)
    rev = lambda i: n - 1 - i                                                    # noqa: E731
    ccw = _ring_all_gather(second[::-1], lambda i, j, a: send(rev(i), rev(j), a))
    return [np.concatenate([np.concatenate([cw[d][k], ccw[rev(d)][rev(k)]], axis=dim)
                            for k in range(n)], axis=dim) for d in range(n)]


# --- the public collectives ----------------------------------------------------------------------
def _check_axis(cluster_axis) -> None:
    if cluster_axis not in (0, 1) or isinstance(cluster_axis, bool):
        raise LlamanbError(f"cluster_axis must be 0 or 1, got {cluster_axis!r}")


def _run(t: MeshTensor, op: str, cluster_axis: int, group_fn, wire: str | None, label: str,
         steps_per_group: int) -> list[list[np.ndarray]]:
    mesh = t.mesh
    if cluster_axis not in (0, 1):
        raise LlamanbError(f"cluster_axis must be 0 or 1, got {cluster_axis!r}")
    topo = mesh.config.topology
    n = mesh.config.shape[cluster_axis]
    bpv = t[0, 0].dtype.itemsize if wire is None else BYTES_PER_PARAM[wire]
    links: dict = defaultdict(float)
    out = [[None] * mesh.config.shape[1] for _ in range(mesh.config.shape[0])]
    for g in range(mesh.config.shape[1 - cluster_axis]):
        devs = mesh.group(cluster_axis, g)

        def send(i, j, a, devs=devs):
            links[(devs[i], devs[j])] += a.size * bpv

        results = group_fn([t[d] for d in devs], send)
        for d, res in zip(devs, results):
            out[d[0]][d[1]] = res
    mesh.ledger.append(Traffic(op, cluster_axis, topo, n, steps_per_group if n > 1 else 0,
                               dict(links), label))
    return out


def all_gather(t: MeshTensor, dim: int, cluster_axis: int, wire: str | None = None,
               label: str = "") -> MeshTensor:
    """Shards along `dim` on the devices of cluster_axis -> each holds them all, concatenated in
    device order. Traffic: each shard reaches n-1 devices."""
    _check_axis(cluster_axis)
    if t.dims.get(cluster_axis, dim) != dim:
        raise LlamanbError(f"all_gather along dim {dim}, but axis {cluster_axis} splits dim "
                           f"{t.dims[cluster_axis]}")
    n = t.mesh.config.shape[cluster_axis]
    topo = t.mesh.config.topology
    out = _run(t, "all_gather", cluster_axis,
               lambda arrs, send: _group_all_gather(arrs, dim, topo, send), wire, label, n - 1)
    dims = {a: d for a, d in t.dims.items() if a != cluster_axis}
    return MeshTensor(t.mesh, out, dims)


def reduce_scatter(t: MeshTensor, dim: int, cluster_axis: int, wire: str | None = None,
                   label: str = "") -> MeshTensor:
    """Partial sums on the devices of cluster_axis -> device i of the group holds chunk i (along
    `dim`) of their sum. Traffic: (n-1)/n of one device's array crosses the busiest link."""
    _check_axis(cluster_axis)
    if cluster_axis in t.dims:
        raise LlamanbError(f"reduce_scatter over axis {cluster_axis}, which already splits the tensor")
    n = t.mesh.config.shape[cluster_axis]
    if t.shape[dim] % n:
        raise LlamanbError(f"reduce_scatter: dim {dim} of size {t.shape[dim]} does not split over {n}")
    topo = t.mesh.config.topology
    out = _run(t, "reduce_scatter", cluster_axis,
               lambda arrs, send: _group_reduce_scatter(arrs, dim, topo, send), wire, label, n - 1)
    return MeshTensor(t.mesh, out, {**t.dims, cluster_axis: dim})


def all_reduce(t: MeshTensor, cluster_axis: int, wire: str | None = None,
               label: str = "") -> MeshTensor:
    """Partial sums on the devices of cluster_axis -> every one holds the total (bit-identical
    replicas): a reduce_scatter along the last dim, then an all_gather, counted as one record."""
    _check_axis(cluster_axis)
    if cluster_axis in t.dims:
        raise LlamanbError(f"all_reduce over axis {cluster_axis}, which splits the tensor")
    n = t.mesh.config.shape[cluster_axis]
    topo = t.mesh.config.topology
    dim = t[0, 0].ndim - 1
    if t.shape[dim] % n:
        raise LlamanbError(f"all_reduce: last dim of size {t.shape[dim]} does not split over {n}")

    def both(arrs, send):
        return _group_all_gather(_group_reduce_scatter(arrs, dim, topo, send), dim, topo, send)

    out = _run(t, "all_reduce", cluster_axis, both, wire, label, 2 * (n - 1))
    return MeshTensor(t.mesh, out, dict(t.dims))

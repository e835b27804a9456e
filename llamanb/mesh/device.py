"""An emulated mesh of devices: each device is a numpy array slot, nothing runs in parallel.

    mesh = EmulatedMesh(MeshConfig((3, 4)))
    t = mesh.shard(x, {1: -1})     # x's last dim split over the 4 devices of axis 1, replicated
                                   # over axis 0: device (r, c) holds x[..., c-th quarter]
    t[r, c]                        # that device's array
    t.gather({1: -1})              # back on the host: shards concatenated (replicas must agree)

A MeshTensor is a grid of per-device arrays; which tensor dim each mesh axis splits is recorded
in `dims` ({mesh axis: tensor dim}); a mesh axis not in `dims` holds replicas (or, after a local
matmul over a split dim, partial sums that a collective must add up -- the layer knows which).
Collectives live in llamanb.mesh.ccl and append their traffic to `mesh.ledger`.
"""
from __future__ import annotations

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.mesh.config import MeshConfig


class MeshTensor:
    def __init__(self, mesh: "EmulatedMesh", arrays: list[list[np.ndarray]], dims: dict[int, int]):
        self.mesh, self.arrays, self.dims = mesh, arrays, dict(dims)

    def __getitem__(self, rc: tuple[int, int]) -> np.ndarray:
        return self.arrays[rc[0]][rc[1]]

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one device's array (every device holds the same shape)."""
        return self.arrays[0][0].shape

    def map(self, fn, dims: dict[int, int] | None = None) -> "MeshTensor":
        """fn applied on every device (a local op: no traffic)."""
        return MeshTensor(self.mesh, [[fn(a) for a in row] for row in self.arrays],
                          self.dims if dims is None else dims)

    def map_rc(self, fn, dims: dict[int, int] | None = None) -> "MeshTensor":
        """fn(r, c, array) on every device (for ops that need the device's weight shard)."""
        return MeshTensor(self.mesh, [[fn(r, c, a) for c, a in enumerate(row)]
                                      for r, row in enumerate(self.arrays)],
                          self.dims if dims is None else dims)

    def gather(self, dims: dict[int, int] | None = None) -> np.ndarray:
        """The host view: concatenate shards along their dims; replicas must be bit-identical."""
        dims = self.dims if dims is None else dims
        R, C = self.mesh.config.shape
        rows = []
        for r in range(R):
            row = [self.arrays[r][c] for c in range(C)]
            rows.append(np.concatenate(row, axis=dims[1]) if 1 in dims else _same(row))
        return np.concatenate(rows, axis=dims[0]) if 0 in dims else _same(rows)


def _same(arrays: list[np.ndarray]) -> np.ndarray:
    for a in arrays[1:]:
        if not np.array_equal(a, arrays[0]):
            raise LlamanbError("replicas on the mesh disagree (a missing collective?)")
    return arrays[0]


class EmulatedMesh:
    """The devices of a MeshConfig, emulated with numpy on the host CPU."""

    emulated = True

    def __init__(self, config: MeshConfig | None = None):
        self.config = config or MeshConfig()
        self.ledger: list = []          # one ccl.Traffic per collective run, in order

    def __repr__(self) -> str:
        c = self.config
        return (f"EmulatedMesh({c.label()}, emulated on the host CPU: {c.n_devices} numpy devices, "
                f"{c.topology} collectives, {c.num_links} link(s))")

    def split(self, x: np.ndarray, axis: int, tensor_dim: int) -> list[np.ndarray]:
        """x split evenly into mesh.shape[axis] pieces along tensor_dim (refused if uneven)."""
        n = self.config.shape[axis]
        if x.shape[tensor_dim] % n:
            raise LlamanbError(f"cannot split dim {tensor_dim} of size {x.shape[tensor_dim]} over "
                               f"{n} devices of mesh axis {axis}")
        return np.split(x, n, axis=tensor_dim)

    def shard(self, x: np.ndarray, dims: dict[int, int]) -> MeshTensor:
        """Place x on the mesh: mesh axis a splits tensor dim dims[a]; other axes replicate."""
        R, C = self.config.shape
        rows = self.split(x, 0, dims[0]) if 0 in dims else [x] * R
        grid = [[np.ascontiguousarray(p) for p in
                 (self.split(row, 1, dims[1]) if 1 in dims else [row] * C)] for row in rows]
        return MeshTensor(self, grid, dims)

    def replicate(self, x: np.ndarray) -> MeshTensor:
        return self.shard(x, {})

    def group(self, cluster_axis: int, index: int) -> list[tuple[int, int]]:
        """The devices along cluster_axis that share coordinate `index` on the other axis, in
        line order: cluster_axis=1 -> one row's devices, cluster_axis=0 -> one column's."""
        R, C = self.config.shape
        if cluster_axis == 1:
            return [(index, c) for c in range(C)]
        if cluster_axis == 0:
            return [(r, index) for r in range(R)]
        raise LlamanbError(f"cluster_axis must be 0 or 1, got {cluster_axis!r}")

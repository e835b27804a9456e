"""A `ttnn` module for TtnnMeshBackend built on tt-lang-sim's simulated ttnn (`ttl/sim/ttnnsim.py`).

    from llamanb.mesh.ttnnsim_mesh import simulated_ttnn
    TtnnMeshBackend(weights, MeshConfig((3, 2)), ttnn=simulated_ttnn())      # simulated
    TtnnMeshBackend(weights, GALAXY)                                        # a card: the real ttnn

ttnnsim keeps a mesh tensor as one tensor plus the mapping (`MeshShardInfo`: which tensor dim each
mesh axis splits); its collectives sum or concatenate the slices of that one tensor. Here every
mesh tensor is laid out with the chips along two leading dims, [rows, cols, *one chip's shape],
mapped by ttnnsim's own `ShardTensor2dMesh(dims=(0, 1))`. Then ttnnsim's calls act chip by chip:

    ttnnsim's own   open_mesh_device, MeshShape, ShardTensor2dMesh, from_torch, to_torch,
                    matmul (batched over the two chip dims = every chip's product; used for
                    ttnn.linear), add, multiply, all_reduce and all_gather with cluster_axis
    not in ttnnsim  Topology, UnaryOpType, ReplicateTensorToMesh's copies, ConcatMesh2dToTensor,
                    reduce_scatter, the SiLU of ttnn.mul's input_tensor_a_activations

The second row is written here with upstream's names and signatures (tenstorrent/tt-metal,
ttnn/ttnn/distributed/distributed.py: `ConcatMesh2dToTensor(mesh_device, mesh_shape, dims)`,
`ReplicateTensorToMesh(mesh_device)`; `ttnn.reduce_scatter(input_tensor, dim, *, cluster_axis,
num_links, topology)` as models/demos/llama3_70b_galaxy/tt/llama_ccl.py calls it), so the backend
makes the same calls it makes on a card. reduce_scatter is ttnnsim's all_reduce followed by each
chip keeping its chunk (the same sum; a real one moves half the bytes). ttnnsim's matmul and add
return tensors without the mapping; it is put back (the values are ttnnsim's).

Arithmetic is float32 (ttnnsim promotes bfloat16 and does not round block floats), so this
checks the dataflow and placement of the ttnn path against Tenstorrent's simulator, not bf16
numerics. The attention, norm, RoPE and cache ops of the full forward are not in ttnnsim.
"""
from __future__ import annotations

import types

from llamanb.mesh.ttlang import load_ttlang


def simulated_ttnn():
    """A module with the ttnn calls TtnnMeshBackend's projections and MLP make, on ttnnsim."""
    import torch

    sim = load_ttlang()[1]
    t = types.ModuleType("ttnn_on_ttnnsim")
    t.sim, t.calls = sim, []
    t.MeshShape, t.TILE_LAYOUT = sim.MeshShape, sim.TILE_LAYOUT
    t.bfloat16, t.float32 = sim.bfloat16, sim.float32
    t.bfloat8_b = t.bfloat4_b = sim.bfloat16          # ttnnsim keeps no block floats: float32 values
    t.Topology = types.SimpleNamespace(Linear="Linear", Ring="Ring")
    t.UnaryOpType = types.SimpleNamespace(SILU="SILU")

    def open_mesh_device(shape):
        dev = sim.open_mesh_device(shape)
        dev.grid = (shape.rows, shape.cols)
        return dev

    def mapped(x):
        """Put back ttnnsim's chip mapping on a result that lost it."""
        x.mesh_shard_info = sim.MeshShardInfo(mesh_shape=t._grid, dims=(0, 1))
        return x

    def ShardTensor2dMesh(mesh_device, mesh_shape, dims):
        return ("shard", tuple(dims))

    def ReplicateTensorToMesh(mesh_device):
        return ("shard", (None, None))

    def ConcatMesh2dToTensor(mesh_device, mesh_shape, dims):
        return tuple(dims)

    def from_torch(x, dtype=None, layout=None, device=None, mesh_mapper=None):
        R, C = device.grid
        t._grid = (R, C)
        d0, d1 = mesh_mapper[1]
        rows = torch.chunk(x, R, dim=d0) if d0 is not None else [x] * R
        grid = [torch.chunk(r, C, dim=d1) if d1 is not None else [r] * C for r in rows]
        stacked = torch.stack([torch.stack(list(row)) for row in grid]).float().contiguous()
        t.calls.append(("from_torch", tuple(x.shape), tuple(stacked.shape)))
        return sim.from_torch(stacked, dtype=sim.float32, layout=sim.ROW_MAJOR_LAYOUT,
                              mesh_mapper=sim.ShardTensor2dMesh(device, mesh_shape=(R, C), dims=(0, 1)))

    def to_torch(x, mesh_composer):
        a = sim.to_torch(x)                                     # [R, C, *chip]
        d0, d1 = mesh_composer
        rows = [torch.cat(list(a[r]), dim=d1) if d1 is not None else a[r, 0] for r in range(a.shape[0])]
        return torch.cat(rows, dim=d0) if d0 is not None else rows[0]

    def linear(a, b):
        t.calls.append(("matmul",))
        return mapped(sim.matmul(a, b))

    def add(a, b):
        t.calls.append(("add",))
        return mapped(sim.add(a, b))

    def mul(a, b, input_tensor_a_activations=()):
        assert list(input_tensor_a_activations) == ["SILU"]
        g = sim.to_torch(a)
        t.calls.append(("multiply",))
        silu = sim.from_torch(g * torch.sigmoid(g), layout=sim.ROW_MAJOR_LAYOUT)
        return mapped(sim.multiply(silu, b))

    def _chip_dim(x, dim):
        return dim % (sim.to_torch(x).dim() - 2) + 2

    def all_reduce(x, *, cluster_axis, num_links=1, topology=None):
        t.calls.append(("all_reduce", cluster_axis))
        return sim.all_reduce(x, cluster_axis=cluster_axis)

    def all_gather(x, dim, *, cluster_axis, num_links=1, topology=None):
        t.calls.append(("all_gather", cluster_axis))
        return sim.all_gather(x, dim=_chip_dim(x, dim), cluster_axis=cluster_axis)

    def reduce_scatter(x, dim, *, cluster_axis, num_links=1, topology=None):
        t.calls.append(("reduce_scatter", cluster_axis))
        total = sim.to_torch(sim.all_reduce(x, cluster_axis=cluster_axis))
        n, d = total.shape[cluster_axis], _chip_dim(x, dim)
        chunks = torch.chunk(total, n, dim=d)                   # chip i of the group keeps chunk i
        keep = torch.stack([torch.stack([chunks[(r, c)[cluster_axis]][r, c] for c in range(total.shape[1])])
                            for r in range(total.shape[0])])
        return mapped(sim.from_torch(keep.contiguous(), layout=sim.ROW_MAJOR_LAYOUT))

    for fn in (open_mesh_device, ShardTensor2dMesh, ReplicateTensorToMesh, ConcatMesh2dToTensor,
               from_torch, to_torch, linear, add, mul, all_reduce, all_gather, reduce_scatter):
        setattr(t, fn.__name__, fn)
    return t

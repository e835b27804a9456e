"""The ttnn path of the mesh backend, driven by a fake `ttnn` module.

The fake keeps each mesh tensor as one numpy array per device (llamanb's emulated mesh) and
implements the handful of ttnn calls the backend makes: mesh mappers and composers, from_torch
(rounding to bfloat8_b / bfloat4_b with llamanb.numerics, checked bit-exact against ttnn
elsewhere), linear, mul with a SiLU activation, and the three collectives with their
keyword-only cluster_axis / num_links / topology. It records every call, so the tests see both
what the backend asks ttnn to do and what the result would be."""
import sys
import types

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.mesh import ccl
from llamanb.mesh.backend import MeshBackend, TtnnMeshBackend, load_ttnn
from llamanb.mesh.config import GALAXY, MeshConfig
from llamanb.mesh.device import EmulatedMesh, MeshTensor
from llamanb.numerics import blockfloat_padded


def fake_ttnn(fail_open=False):
    calls = []
    t = types.ModuleType("ttnn")
    t.calls = calls
    t.bfloat16, t.bfloat8_b, t.bfloat4_b, t.TILE_LAYOUT = "bfloat16", "bfloat8_b", "bfloat4_b", "tile"
    t.Topology = types.SimpleNamespace(Linear="Linear", Ring="Ring")
    t.UnaryOpType = types.SimpleNamespace(SILU="SILU")
    t.MeshShape = lambda r, c: (r, c)

    def open_mesh_device(shape):
        calls.append(("open_mesh_device", shape))
        if fail_open:
            raise RuntimeError("no Tenstorrent device found\nmore detail")
        return EmulatedMesh(MeshConfig(shape))

    t.open_mesh_device = open_mesh_device
    t.ShardTensor2dMesh = lambda dev, dims, mesh_shape: ("shard", dims, mesh_shape)
    t.ReplicateTensorToMesh = lambda dev: ("replicate", (None, None), None)
    t.ConcatMesh2dToTensor = lambda dev, dims, mesh_shape: ("concat", dims, mesh_shape)

    def from_torch(x, dtype, layout, device, mesh_mapper):
        calls.append(("from_torch", tuple(x.shape), dtype, mesh_mapper))
        dims = {k: d for k, d in enumerate(mesh_mapper[1]) if d is not None}
        mt = device.shard(x.numpy(), dims)
        if dtype in ("bfloat8_b", "bfloat4_b"):      # the device holds the block-float values
            mt = mt.map(lambda a: blockfloat_padded(a, dtype))
        return mt

    def to_torch(x, mesh_composer):
        import torch

        dims = {k: d for k, d in enumerate(mesh_composer[1]) if d is not None}
        return torch.from_numpy(x.gather(dims))

    def linear(a, b):
        calls.append(("linear",))
        return MeshTensor(a.mesh, [[x @ w for x, w in zip(ra, rb)] for ra, rb in zip(a.arrays, b.arrays)], {})

    def mul(a, b, input_tensor_a_activations=()):
        calls.append(("mul", tuple(input_tensor_a_activations)))
        assert list(input_tensor_a_activations) == ["SILU"]
        return MeshTensor(a.mesh, [[x / (1 + np.exp(-x)) * y for x, y in zip(ra, rb)]
                                   for ra, rb in zip(a.arrays, b.arrays)], a.dims)

    def collective(name):
        def run(x, *args, cluster_axis, num_links, topology):
            calls.append((name, args, cluster_axis, num_links, topology))
            x = MeshTensor(x.mesh, x.arrays, {})
            if name == "all_reduce":
                return ccl.all_reduce(x, cluster_axis)
            dim = args[0] % x[0, 0].ndim
            if name == "reduce_scatter":
                return ccl.reduce_scatter(x, dim, cluster_axis)
            return ccl.all_gather(x, dim, cluster_axis)
        return run

    t.from_torch, t.to_torch, t.linear, t.mul = from_torch, to_torch, linear, mul
    for name in ("all_reduce", "reduce_scatter", "all_gather"):
        setattr(t, name, collective(name))
    return t


@pytest.mark.parametrize("shape", [(3, 4), (1, 3)])
def test_ttnn_mlp_equals_the_emulated_mlp(smollm, shape):
    """Same placement, same block-float weights (W1/W3 bfloat4_b, W2 bfloat8_b): the MLP run
    through (fake) ttnn calls equals the emulated backend's MLP."""
    pytest.importorskip("torch")
    t = fake_ttnn()
    cfg = MeshConfig(shape)
    dtypes = {"w1": "bfloat4_b", "w3": "bfloat4_b", "w2": "bfloat8_b"}
    tt = TtnnMeshBackend(smollm.weights, cfg, ttnn=t, weight_dtypes=dtypes)
    emu = MeshBackend(smollm.weights, cfg, weight_formats=dtypes)
    h = np.random.default_rng(0).standard_normal((5, smollm.config.hidden)).astype(np.float32)
    xa = cfg.hidden_axis
    got = tt.to_host(tt.mlp(7, tt.to_device(h, {xa: 1})), {xa: 1})
    want = emu.tp.mlp(7, emu.tp.to_mesh(h)).gather()
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5)
    ops = [c[0] for c in t.calls if c[0] in ("linear", "reduce_scatter", "mul", "all_gather", "all_reduce")]
    assert ops == ["linear", "reduce_scatter", "linear", "reduce_scatter", "mul", "all_gather",
                   "linear", "all_reduce"]
    rs = [c for c in t.calls if c[0] == "reduce_scatter"]
    assert all(c[2] == cfg.hidden_axis and c[4] == "Linear" for c in rs)
    assert [c for c in t.calls if c[0] == "all_reduce"][0][2] == cfg.head_axis


def test_ttnn_projections_equal_the_emulated_ones(smollm):
    """QKV (all-reduced over the hidden axis) and WO (all-reduced over the head axis) through
    the fake ttnn equal the emulated layers' products on a 3x4 mesh."""
    pytest.importorskip("torch")
    t = fake_ttnn()
    cfg = MeshConfig((3, 4))
    fmts = {"wqkv": "bfloat8_b", "wo": "bfloat8_b"}
    tt = TtnnMeshBackend(smollm.weights, cfg, ttnn=t, weight_dtypes=fmts)
    emu = MeshBackend(smollm.weights, cfg, weight_formats=fmts).tp
    rng = np.random.default_rng(1)
    h = rng.standard_normal((4, smollm.config.hidden)).astype(np.float32)
    got = tt.qkv(3, tt.to_device(h, {1: 1}))
    want = ccl.all_reduce(emu.matmul(emu.to_mesh(h), emu._w(3, "wqkv"), {}), 1)
    assert all(np.allclose(got[r, c], want[r, c], rtol=1e-5, atol=1e-5) for r in range(3) for c in range(4))
    attn = rng.standard_normal((4, smollm.config.q_dim)).astype(np.float32)
    got = tt.to_host(tt.wo(3, tt.to_device(attn, {0: 1})), {1: 1})
    want = ccl.all_reduce(emu.matmul(emu.mesh.shard(attn, {0: 1}), emu._w(3, "wo"), {1: 1}), 0).gather()
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5)
    assert [c[2] for c in t.calls if c[0] == "all_reduce"] == [1, 0]


def test_weights_go_up_once_sharded_in_their_formats(smollm):
    pytest.importorskip("torch")
    t = fake_ttnn()
    tt = TtnnMeshBackend(smollm.weights, MeshConfig((3, 4), topology="ring", num_links=3), ttnn=t)
    tt.mlp_weights(0)
    tt.mlp_weights(0)
    ups = [c for c in t.calls if c[0] == "from_torch"]
    H, F = smollm.config.hidden, smollm.config.ffn
    assert [(c[1], c[2], c[3][1]) for c in ups] == [((H, F), "bfloat8_b", (1, 0)), ((H, F), "bfloat8_b", (1, 0)),
                                                    ((F, H), "bfloat8_b", (0, 1))]
    tt.all_reduce(tt.to_device(np.zeros((32, 96), np.float32), {}), cluster_axis=0)
    assert t.calls[-1] == ("all_reduce", (), 0, 3, "Ring")


def test_galaxy_opens_an_8x4_mesh_device(smollm, tmp_path, make_tiny):
    import llamanb

    make_tiny(tmp_path / "tiny", n_heads=8, n_kv_heads=8, tie=True)
    model = llamanb.load_model(tmp_path / "tiny")
    t = fake_ttnn()
    tt = TtnnMeshBackend(model.weights, GALAXY, ttnn=t)
    assert t.calls[0] == ("open_mesh_device", (8, 4)) and not tt.emulated
    assert "emulated" not in tt.description
    with pytest.raises(LlamanbError, match="attention is not written yet"):
        tt.block(0, None, None, None)


def test_ttnn_missing_or_without_device_is_one_line(smollm, monkeypatch):
    monkeypatch.setitem(sys.modules, "ttnn", None)                   # import fails
    with pytest.raises(LlamanbError, match="ttnn is not usable"):
        load_ttnn()
    with pytest.raises(LlamanbError, match="could not open a 3x1 mesh device: no Tenstorrent device found$"):
        TtnnMeshBackend(smollm.weights, MeshConfig((3, 1)), ttnn=fake_ttnn(fail_open=True))

"""Collectives on the emulated mesh against closed-form float64 sums, and their traffic against
the closed forms of each algorithm (the traffic is counted from the messages the code sends)."""
import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.mesh import ccl
from llamanb.mesh.bounds import gamma
from llamanb.mesh.config import GALAXY, GALAXY_4U, MeshConfig
from llamanb.mesh.device import EmulatedMesh, MeshTensor

SHAPES = [(1, 1), (1, 3), (2, 3), (8, 4), (3, 5)]


def partials(mesh, rows=4, width=None, seed=0):
    """A different random array on every device, as float32, plus the float64 copies."""
    R, C = mesh.config.shape
    width = width or 2 * R * C * 4
    x = np.random.default_rng(seed).standard_normal((R, C, rows, width)).astype(np.float32)
    return MeshTensor(mesh, [[x[r, c] for c in range(C)] for r in range(R)], {}), x.astype(np.float64)


def group_sum(x64, axis, r, c):
    return x64.sum(axis=axis)[c if axis == 0 else r]


@pytest.mark.parametrize("topology", ["line", "ring"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [0, 1])
def test_results_match_float64_sums(shape, topology, axis):
    mesh = EmulatedMesh(MeshConfig(shape, topology=topology))
    t, x64 = partials(mesh)
    n, (R, C) = shape[axis], shape
    ar = ccl.all_reduce(t, axis)
    rs = ccl.reduce_scatter(t, 1, axis)
    ag = ccl.all_gather(rs, 1, axis)
    for r in range(R):
        for c in range(C):
            want = group_sum(x64, axis, r, c)
            tol = gamma(n - 1) * group_sum(np.abs(x64), axis, r, c)   # any order of n - 1 adds
            assert np.all(np.abs(ar[r, c] - want) <= tol)
            k = r if axis == 0 else c
            assert np.all(np.abs(rs[r, c] - np.split(want, n, axis=1)[k]) <= np.split(tol, n, axis=1)[k])
            assert np.array_equal(ag[r, c], np.concatenate(
                [rs[g] for g in mesh.group(axis, c if axis == 0 else r)], axis=1))
    # replicas of an all-reduce are bit-identical within each group
    for g in range(shape[1 - axis]):
        devs = mesh.group(axis, g)
        assert all(np.array_equal(ar[d], ar[devs[0]]) for d in devs)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [0, 1])
def test_traffic_closed_form(shape, axis):
    """B = one device's array in bytes, n = devices in the group.
    line: reduce_scatter and all_gather of B/n shards put (n-1) B/n on the busiest link
          (the end link, one direction); an all-reduce puts exactly B on every link direction.
    ring: every chunk is halved over the two directions: half of that.
    steps: n-1 for each half of an all-reduce."""
    for topology in ("line", "ring"):
        mesh = EmulatedMesh(MeshConfig(shape, topology=topology))
        t, _ = partials(mesh)
        B, n = t[0, 0].nbytes, shape[axis]
        rs = ccl.reduce_scatter(t, 1, axis)
        ccl.all_gather(rs, 1, axis)
        ccl.all_reduce(t, axis)
        rs_t, ag_t, ar_t = mesh.ledger
        half = 2 if topology == "ring" and n > 2 else 1
        assert rs_t.busiest == (n - 1) * B / n / half
        assert ag_t.busiest == (n - 1) * B / n / half
        assert ar_t.busiest == (B if topology == "line" else 2 * (n - 1) * B / n / half) * (n > 1)
        assert (rs_t.steps, ag_t.steps, ar_t.steps) == (n - 1, n - 1, 2 * (n - 1))
        # every device's chunk reaches every other device once: n (n-1) chunks of B/n per group
        groups = shape[1 - axis]
        assert ag_t.total == groups * n * (n - 1) * B / n
        assert rs_t.total == groups * n * (n - 1) * B / n


def test_wire_format_scales_bytes():
    mesh = EmulatedMesh(MeshConfig((1, 4)))
    t, _ = partials(mesh, rows=32, width=64)
    ccl.all_gather(MeshTensor(mesh, t.arrays, {1: 1}), 1, 1)
    ccl.all_gather(MeshTensor(mesh, t.arrays, {1: 1}), 1, 1, wire="bfp8")
    f32, bfp8 = mesh.ledger
    assert bfp8.busiest / f32.busiest == (1 + 1 / 16) / 4


def test_galaxy_is_the_6u_ring_with_four_links():
    """tt-metal models/demos/llama3_70b_galaxy/tt/model_config.py: GALAXY_NUM_LINKS 4 and
    Topology.Ring on a 6U (the machine PERF.md measured), 3 and Linear on a 4U."""
    assert GALAXY.shape == (8, 4) and GALAXY.n_devices == 32
    assert (GALAXY.topology, GALAXY.num_links) == ("ring", 4)
    assert (GALAXY_4U.topology, GALAXY_4U.num_links) == ("line", 3)
    assert "emulated" in repr(EmulatedMesh(GALAXY))


def test_sharding_round_trip_and_refusals():
    mesh = EmulatedMesh(MeshConfig((2, 3)))
    x = np.arange(6 * 12, dtype=np.float32).reshape(6, 12)
    t = mesh.shard(x, {0: 0, 1: 1})
    assert t.shape == (3, 4) and np.array_equal(t[1, 2], x[3:, 8:])
    assert np.array_equal(t.gather(), x)
    with pytest.raises(LlamanbError, match="cannot split"):
        mesh.shard(np.zeros((5, 5)), {1: 0})      # 5 rows over 3 devices
    with pytest.raises(LlamanbError, match="already splits"):
        ccl.reduce_scatter(t, 1, 1)
    with pytest.raises(LlamanbError, match="cluster_axis"):
        ccl.all_reduce(mesh.replicate(x), 2)
    bad = mesh.replicate(x)
    bad.arrays[1][0] = bad.arrays[1][0] + 1
    with pytest.raises(LlamanbError, match="disagree"):
        bad.gather()


@pytest.mark.parametrize("kw,msg", [(dict(shape=(0, 4)), "positive"), (dict(shape=(9, 8)), "64"),
                                    (dict(topology="torus"), "topology"),
                                    (dict(head_axis=1, hidden_axis=1), "0 and 1")])
def test_bad_configs(kw, msg):
    with pytest.raises(LlamanbError, match=msg):
        MeshConfig(**kw)

"""Llama 3 70B accounting and the Galaxy latency model.

Accounting: the collective plan is the one the layers really run, traffic is linear in rows,
per-device bytes add up to the model. Latency: the collective fits reproduce the tech report's
own measurements they were fitted to, the parts add up and grow as they should. The split and
the validation table the appendix prints are pinned in tests/appendix/test_appendix_mesh_cost.py."""
import numpy as np
import pytest

from llamanb.model.config import BYTES_PER_PARAM, LLAMA3_70B
from llamanb.engine.engine import Engine
from llamanb.errors import LlamanbError
from llamanb.mesh import cost
from llamanb.mesh.config import GALAXY, MeshConfig
from llamanb.engine.step import Step
from llamanb.model.weights import tensor_specs


@pytest.mark.parametrize("topology", ["line", "ring"])
def test_plan_is_what_a_block_runs(tmp_path, make_tiny, topology):
    import llamanb

    make_tiny(tmp_path / "tiny", n_heads=8, n_kv_heads=8, tie=True)
    model = llamanb.load_model(tmp_path / "tiny")
    mesh = MeshConfig((8, 4), topology=topology)
    eng = Engine(model, backend="galaxy-emulated", mesh=mesh)
    ids = list(range(3, 3 + 7))
    cache = eng.new_cache(16)
    eng.backend.layers(eng.backend.embed(np.array(ids)), Step.build([(0, 0, ids)]), cache)
    ran = eng.backend.mesh.ledger[:8]                                   # layer 0
    planned = cost.layer_traffic(model.config, mesh, rows=7, wire=None, count_rows=7)
    assert [(t.op, t.label, t.cluster_axis, t.steps) for t in ran] == \
           [(t.op, t.label, t.cluster_axis, t.steps) for t in planned]
    assert [t.link_bytes for t in ran] == [t.link_bytes for t in planned]


def test_traffic_is_linear_in_rows():
    for plan in (cost.collective_plan, cost.prefill_ccl_plan):
        a = cost.layer_traffic(LLAMA3_70B, GALAXY, rows=64, count_rows=64, plan=plan)
        b = cost.layer_traffic(LLAMA3_70B, GALAXY, rows=64, count_rows=32, plan=plan)
        assert [t.busiest for t in a] == [t.busiest for t in b]
        assert [t.total for t in a] == [t.total for t in b]


def test_demo_plans_have_the_demo_shapes():
    """Prefill: the norm statistics travel as a bf16 tile column, prompts over 1024 rows add ring
    SDPA's two gathers; decode: QKV reduce-scattered and attention gathered over the hidden
    axis (8 users per column), only WO and W2 all-reduced, over the head axis."""
    short = cost.prefill_ccl_plan(LLAMA3_70B, GALAXY, 1024)
    long = cost.prefill_ccl_plan(LLAMA3_70B, GALAXY, 2048)
    assert [p[1] for p in long] == [p[1] for p in short][:2] + ["SDPA out", "SDPA out rev"] + \
        [p[1] for p in short][2:]
    assert all(p[5] == ("bf16" if p[1] == "norm stats" else "bfp8") for p in long)
    dec = cost.decode_ccl_plan(LLAMA3_70B, GALAXY)
    assert [(p[0], p[2]) for p in dec if p[0] == "all_reduce"] == [("all_reduce", 0), ("all_reduce", 0)]
    qkv = next(p for p in dec if p[1] == "QKV heads")
    assert qkv[0] == "reduce_scatter" and qkv[2] == 1 and qkv[3][0] // 4 == 8
    led = cost.layer_traffic(LLAMA3_70B, GALAXY, 32, plan=lambda c, m, r: cost.decode_ccl_plan(c, m))
    assert [t.group_size for t in led] == [4, 4, 4, 8, 4, 4, 4, 4, 8]


def test_per_device_bytes_add_up_to_the_model():
    per = cost.weight_bytes_per_device(LLAMA3_70B, GALAXY)
    specs = dict(tensor_specs(LLAMA3_70B))
    params = {k: 0 for k in ("wqkv", "wo", "w1", "w3", "w2")}
    for name, shape in specs.items():
        n = int(np.prod(shape))
        for key, part in (("wqkv", "q_proj"), ("wqkv", "k_proj"), ("wqkv", "v_proj"), ("wo", "o_proj"),
                          ("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
            if part in name:
                params[key] += n
    for key, n in params.items():
        assert per[key] * 32 == pytest.approx(n * BYTES_PER_PARAM[cost.DEMO_FORMATS[key]])
    assert per["lm_head"] * 32 == pytest.approx(specs["lm_head.weight"][0] * 8192 * (1 + 1 / 16))
    # every chip's share fits its 12 GB, with the 128K-token KV cache of one user on top
    assert sum(per.values()) + cost.kv_bytes_per_device(LLAMA3_70B, GALAXY, 131072) < 12e9


def test_kv_bytes_closed_form():
    # one K/V head per device (8 over 8), 80 layers, K and V, 128 values of 1 + 1/16 bytes
    assert cost.kv_bytes_per_device(LLAMA3_70B, GALAXY, 1000) == 2 * 80 * 1 * 1000 * 128 * 1.0625


# --- the latency model ----------------------------------------------------------------------------
def test_collective_fits_reproduce_the_reports_measurements():
    """CCL_FIT (rates per link direction, bytes as llamanb.mesh.ccl counts them) against rows of
    the tech report's Wormhole table it was fitted to: 4-chip line and 8-chip ring, 4 MiB and
    64 MiB in total; the report says its fits are within 0-19 % (all_gather) and 2-58 %
    (ring reduce_scatter, worst at small sizes)."""
    measured_us = {("all_gather", "line", 4, 4194304): 278.65, ("all_gather", "ring", 8, 4194304): 199.16,
                   ("all_gather", "ring", 8, 67108864): 2843.17,
                   ("reduce_scatter", "line", 4, 4194304): 334.89,
                   ("reduce_scatter", "ring", 8, 67108864): 3572.99}
    for (op, topo, n, size), us in measured_us.items():
        cols = size // 2 // 32                                   # bf16, 32 rows
        if op == "all_gather":
            plan = lambda c, m, r: [(op, "x", 1, (32, cols // n), 1, "bf16")]   # noqa: E731
        else:
            plan = lambda c, m, r: [(op, "x", 1, (32, cols), 1, "bf16")]        # noqa: E731
        mesh = MeshConfig((1, n), topology=topo)
        t = cost.ccl_seconds(cost.layer_traffic(LLAMA3_70B, mesh, 32, count_rows=32, plan=plan), mesh,
                             links=1)
        assert t == pytest.approx(us * 1e-6, rel=0.2), (op, topo, n, size)


def test_prompts_are_padded_as_the_demo_pads_them():
    assert [cost.padded_prompt(n) for n in (1, 128, 129, 1024, 1025, 4096, 5000)] == \
        [128, 128, 1024, 1024, 2048, 4096, 8192]
    with pytest.raises(LlamanbError):
        cost.padded_prompt(0)


def test_model_refuses_what_it_is_not_calibrated_for():
    with pytest.raises(LlamanbError, match="calibrated for Llama 3 70B"):
        cost.prefill_estimate(LLAMA3_70B, MeshConfig((4, 8), head_axis=1, hidden_axis=0), 128)


def test_parts_add_up_and_grow_as_they_should():
    small, big = (cost.prefill_estimate(LLAMA3_70B, GALAXY, n) for n in (32768, 131072))
    assert small.seconds == pytest.approx(sum(small.parts.values()))
    # attention is quadratic, the rest at most linear in rows
    assert big.parts["attention"] / small.parts["attention"] == pytest.approx(16, rel=0.02)
    assert big.parts["matmuls"] / small.parts["matmuls"] == pytest.approx(4, rel=0.02)
    d1, d2 = (cost.decode_estimate(LLAMA3_70B, GALAXY, 1, c) for c in (1024, 131072))
    assert d2.seconds > d1.seconds and d1.parts["layer ops (measured)"] == d2.parts["layer ops (measured)"]

"""Llama 3 70B accounting: the collective plan is the one the layers really run, traffic is
linear in rows, per-device bytes add up to the model, and the latency model stays a lower bound
of the demo's published times (it assumes peak rates and no overheads)."""
import numpy as np
import pytest

from llamanb.config import BYTES_PER_PARAM, LLAMA3_70B
from llamanb.engine import Engine
from llamanb.mesh import cost
from llamanb.mesh.config import GALAXY, MeshConfig
from llamanb.step import Step
from llamanb.weights import tensor_specs


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
    a = cost.layer_traffic(LLAMA3_70B, GALAXY, rows=64, count_rows=64)
    b = cost.layer_traffic(LLAMA3_70B, GALAXY, rows=64, count_rows=32)
    assert [t.busiest for t in a] == [t.busiest for t in b]
    assert [t.total for t in a] == [t.total for t in b]


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


def test_model_is_a_lower_bound_of_the_published_times():
    """Peak rates and no overheads: the model must predict less time than the demo measured
    (PERF.md, 2025-07: TTFT 59.64 ms for 128 tokens, 70.0 tok/s/user at batch 32; 4K 625 ms,
    32K 9.48 s, 128K 102.3 s)."""
    for prompt, published in ((128, 59.64e-3), (4096, 0.625), (32768, 9.48), (131072, 102.3)):
        assert cost.prefill_estimate(LLAMA3_70B, GALAXY, prompt).seconds < published
    assert 1 / cost.decode_estimate(LLAMA3_70B, GALAXY, 32, 128).seconds > 70.0

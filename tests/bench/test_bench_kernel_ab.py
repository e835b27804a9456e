"""`bench --kernels DIR`: the cpu engine's decode on the packaged kernels against changed copies,
alternated token by token in one process (llamanb/bench/kernel_ab.py)."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from conftest import run_cli


class Clock:
    """A fake perf_counter: each variant's step advances it by that variant's cost; `reads`
    counts how often the code under test looked at it."""

    def __init__(self):
        self.now, self.reads = 0.0, 0

    def __call__(self):
        self.reads += 1
        return self.now


def test_run_ab_pairs_each_round_rotates_every_turn_and_finds_the_first_difference():
    from llamanb.bench.kernel_ab import run_ab

    clock, calls, starts = Clock(), [], []
    cost = {"ref": 2.0, "fast": 1.0, "same": 2.0, "diff": 4.0}

    def variant(name):
        def start():
            starts.append(name)
            clock.now += 100.0                        # a prefill: never counted
            state = {"s": 0, "round": len([n for n in starts if n == name]) - 1}

            def step():
                calls.append((name, state["round"], state["s"]))
                clock.now += cost[name]
                logits = np.array([state["s"], 0.0, 1.0])
                if name == "diff" and state["round"] == 2 and state["s"] >= 1:
                    logits[2] = np.nextafter(1.0, 2.0)      # one ulp, from round 2, step 1 on
                state["s"] += 1
                return logits
            return step
        return start

    rounds, steps = 3, 4
    got = run_ab({n: variant(n) for n in cost}, rounds, steps, clock=clock)["variants"]
    names = list(cost)
    # every variant starts one sequence a round, the warm-up included; steps run in turns whose
    # order rotates with the round and the step
    assert starts == [n for _ in range(rounds + 1) for n in names]
    for r in range(rounds + 1):
        for s in range(steps):
            turn = [c[0] for c in calls if c[1] == r and c[2] == s]
            k = (r + s) % len(names)
            assert turn == names[k:] + names[:k]
    # the warm-up is dropped; a round's seconds are its steps' alone (prefills never counted)
    assert all(len(v["seconds"]) == rounds for v in got.values())
    assert got["fast"]["seconds"] == [steps * 1.0] * rounds
    assert got["fast"]["ratios"] == [2.0] * rounds and got["same"]["ratios"] == [1.0] * rounds
    assert got["diff"]["ratios"] == [0.5] * rounds
    # bits: the reference's own logits in the same round; one ulp is a difference
    assert got["ref"]["first_difference"] is None and got["same"]["first_difference"] is None
    assert got["diff"]["first_difference"] == {"round": 2, "step": 1}
    assert clock.reads == 2 * (rounds + 1) * steps * len(names)      # two reads per step, none else


@pytest.mark.parametrize("args, says", [
    (["--kernels", "."], "use --backend cpu"),
    (["--backend", "cpu", "--kernels", "/nonexistent/kernels"], "not a directory"),
    (["--backend", "cpu:q4_1", "--kernels", "{copy}", "{partial}"], ": lacks forward.cc ("),
    (["--backend", "cpu", "--batching", "--kernels", "{copy}"], "pass one"),
    (["--backend", "cpu/avx512-simde", "--kernels", "{copy}"], "emulated through SIMDe"),
])
def test_kernels_bad_input_is_one_line_before_anything_runs(tmp_path, args, says):
    from llamanb.cpu import kernels as cpu_kernels

    shutil.copytree(cpu_kernels.KERNELS_DIR, tmp_path / "copy")
    shutil.copytree(cpu_kernels.KERNELS_DIR, tmp_path / "partial")
    (tmp_path / "partial" / "forward.cc").unlink()
    args = [a.format(partial=tmp_path / "partial", copy=tmp_path / "copy") for a in args]
    p = run_cli(["bench", *args], cache=tmp_path / "cache")
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "cache").exists()             # refused before a model or a build


def test_kernels_ab_end_to_end_on_a_tiny_checkpoint(make_tiny, kernels, tmp_path):
    """A plain copy of kernels/cpu as the variant (the same sources: the same cached build): the
    table and the JSON carry both, every round is paired, and the bits agree."""
    make_tiny(tmp_path / "tiny", n_heads=6, n_kv_heads=2, tie=False, max_position_embeddings=1024)
    from llamanb.cpu import kernels as cpu_kernels

    variant = tmp_path / "variant"
    shutil.copytree(cpu_kernels.KERNELS_DIR, variant)
    out = tmp_path / "ab.json"
    p = run_cli(["bench", "--model", tmp_path / "tiny", "--backend", "cpu:bf16", "--kernels",
                 variant, "--runs", "3", "--decode-tokens", "4", "--json", out],
                cache=os.environ["LLAMANB_CACHE"])
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(out.read_text())
    assert list(d["variants"]) == ["packaged", str(variant.resolve())]
    assert d["settings"]["rounds"] == 3 and d["settings"]["decode_tokens"] == 4
    for v in d["variants"].values():
        assert len(v["seconds"]) == len(v["ratios"]) == 3 and min(v["seconds"]) > 0
        assert v["first_difference"] is None
    assert d["variants"]["packaged"]["ratios"] == [1.0] * 3
    assert "kernel A/B: cpu:bf16 decode, 4 tokens after a 128-token prompt, 3 rounds" in p.stdout
    assert str(variant.resolve())[-30:] in p.stdout and p.stdout.count(" yes") == 2

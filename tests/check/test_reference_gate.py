"""The release gate: the embedded SmolLM2-135M-Instruct against the shared HF transformers reference
(../shared/reference/hf_smollm2_reference.json, computed by transformers 5.23 / torch 2.13 fp32 on
transformers' own dequantisation of the same GGUF).

Greedy sequences are compared with vLLM's `check_logprobs_close` rule: walk both sequences; at the
first divergence each side's token must be in the other side's top-5 at that step; nothing after
the first divergence is compared (the contexts differ from there on).
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import ALL_STEPS_TOP5_ATOL, FIRST_STEP_TOP5_ATOL, REFERENCE_DIR, greedy_walk

def _case_names():
    import json

    p = REFERENCE_DIR / "hf_smollm2_reference.json"
    if not p.is_file():
        return ["missing-reference"]
    return [c["name"] for c in json.loads(p.read_text())["cases"]]


def _case(reference_data, name):
    for c in reference_data["cases"]:
        if c["name"] == name:
            return c
    pytest.skip(f"reference case {name} not present")


def test_reference_file_shape(reference_data):
    cases = reference_data["cases"]
    assert len(cases) == 8
    for c in cases:
        assert len(c["top5"]) == len(c["greedy_ids"]) >= 1
        for step, t in zip(c["greedy_ids"], c["top5"]):
            assert len(t["ids"]) == len(t["logits"]) == 5
            assert t["ids"][0] == step                      # top5[i] produced greedy_ids[i]


@pytest.mark.parametrize("name", _case_names())
def test_greedy_matches_reference(smollm_engine, reference_data, name):
    c = _case(reference_data, name)
    ref_ids, ref_top5 = c["greedy_ids"], c["top5"]
    ours, tops, kept = greedy_walk(smollm_engine, c["prompt_ids"], ref_ids, ref_top5)

    # Top-5 logits agree while the contexts are identical.
    first = np.abs(kept[0][ref_top5[0]["ids"]] - np.array(ref_top5[0]["logits"], dtype=np.float32))
    assert first.max() <= FIRST_STEP_TOP5_ATOL, f"{name}: first-step top-5 logits differ by {first.max()}"
    for i, logits in enumerate(kept):
        d = np.abs(logits[ref_top5[i]["ids"]] - np.array(ref_top5[i]["logits"], dtype=np.float32))
        assert d.max() <= ALL_STEPS_TOP5_ATOL, f"{name} step {i}: top-5 logits differ by {d.max()}"

    # vLLM check_logprobs_close rule at the first divergence.
    for i, (a, b) in enumerate(zip(ours, ref_ids)):
        if a != b:
            assert a in ref_top5[i]["ids"], f"{name} step {i}: our token {a} not in reference top-5"
            assert b in tops[i], f"{name} step {i}: reference token {b} not in our top-5 {tops[i]}"
            break
    else:
        assert len(ours) == len(ref_ids), f"{name}: stopped after {len(ours)} of {len(ref_ids)} steps"


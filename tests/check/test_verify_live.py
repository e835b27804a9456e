"""`python -m llamanb verify --live`, the command the README gives: it reads the prompts shipped in
data/prompts.json, asks transformers for fresh greedy references and runs the gate on them. It
had looked for the prompts under llamanb/data/ and failed before any work."""
from __future__ import annotations

import json

import pytest
from conftest import REFERENCE_DIR, REPO_ROOT, run_cli_here


@pytest.mark.slow
def test_verify_live_runs_from_the_cli_and_agrees_with_the_shipped_reference(smollm, llamanb_cache,
                                                                            tmp_path):
    save = tmp_path / "live.json"
    p = run_cli_here(["verify", "--live", "--steps", "2", "--save", save], cache=llamanb_cache)
    assert p.returncode == 0, p.stderr[-2000:] + p.stdout[-2000:]
    prompts = json.loads((REPO_ROOT / "data" / "prompts.json").read_text())["cases"]
    assert f"{len(prompts)} passed, 0 failed" in p.stdout, p.stdout
    live = json.loads(save.read_text())
    assert [c["name"] for c in live["cases"]] == [c["name"] for c in prompts]
    assert live["reference"].startswith("transformers ")
    # the one prompt both lists hold: transformers' first greedy tokens, computed now and shipped
    shipped = {c["name"]: c for c in json.loads(
        (REFERENCE_DIR / "hf_smollm2_reference.json").read_text())["cases"]}["capital"]
    fresh = {c["name"]: c for c in live["cases"]}["capital"]
    assert fresh["prompt_ids"] == shipped["prompt_ids"]
    assert fresh["greedy_ids"] == shipped["greedy_ids"][:2]


def test_a_broken_prompt_list_is_one_line(smollm, tmp_path):
    from llamanb.check.verify import live_references
    from llamanb.errors import LlamanbError

    bad = tmp_path / "prompts.json"
    for text in ('{"cases": [{"name": "x"}]}', "[1, 2]", "not json"):
        bad.write_text(text)
        with pytest.raises(LlamanbError, match="not a prompt list"):
            live_references(smollm, 1, bad)
    with pytest.raises(LlamanbError, match="prompt list not found"):
        live_references(smollm, 1, tmp_path / "absent.json")

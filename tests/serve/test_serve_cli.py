"""`python -m llamanb batch FILE`: answers, the --check against generating alone, and one-line
errors (exit 2) that name the bad request. The command runs in this process (conftest.run_cli_here:
llamanb.cli.main(argv), its exit status, stdout and stderr captured as a child's)."""
import json
import os

import pytest

from conftest import run_cli_here


def test_batch_check_passes(smollm, tmp_path):
    f = tmp_path / "reqs.json"
    f.write_text(json.dumps([
        "What is the capital of France?",
        {"name": "story", "prompt": "Once upon a time", "raw": True, "max_new_tokens": 6,
         "temperature": 0.8, "seed": 5},
        {"messages": [{"role": "user", "content": "Say hi."}], "max_new_tokens": 3},
    ]))
    p = run_cli_here(["batch", f, "--slots", "2", "--max-new-tokens", "5", "--check",
                      "--order", "longest-first"],
                cache=os.environ["LLAMANB_CACHE"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "=== request 1:" in p.stdout and "=== story:" in p.stdout and "=== request 3:" in p.stdout
    assert "check: all 3 requests token-identical" in p.stderr
    assert "tok/s" in p.stderr and "time to first token: p50" in p.stderr


@pytest.mark.parametrize("content, message", [
    ('[{"prompt": "hi", "temprature": 0.5}]', "request 1: unknown field 'temprature'"),
    ('{"prompt": "a"}\n{"prompt": "b", "top_p": 0}\n', "request 2 (line 2): top_p must be a number in"),
    ('{"prompt": "a"}\n\n{"prompt": "b"\n', "line 3 is not valid JSON"),
    ('[{"prompt": "a", "messages": []}]', "exactly one of 'prompt' and 'messages'"),
    ('["ok", {"prompt": "  "}]', "request 2: empty prompt"),
    ('[{"prompt": "a", "max_new_tokens": "ten"}]', "'max_new_tokens' must be int"),
    ('[{"messages": [{"role": "user"}]}]', "'messages' must be a non-empty list"),
    ('[3]', "request 1: expected a string or an object"),
    ('[]', "no requests"),
    ('', "empty file"),
])
def test_bad_request_files_are_one_line_errors(smollm, tmp_path, content, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    p = run_cli_here(["batch", f], cache=os.environ["LLAMANB_CACHE"])
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llamanb: error:") and message in lines[0], lines


def test_batch_missing_file_and_small_pool(smollm, tmp_path):
    p = run_cli_here(["batch", tmp_path / "nope.json"], cache=os.environ["LLAMANB_CACHE"])
    assert p.returncode == 2 and "no such file" in p.stderr
    f = tmp_path / "r.json"
    f.write_text('[{"name": "big", "prompt": "hello there", "max_new_tokens": 100}]')
    p = run_cli_here(["batch", f, "--kv-positions", "32"], cache=os.environ["LLAMANB_CACHE"])
    assert p.returncode == 2 and "request big:" in p.stderr and "blocks" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1

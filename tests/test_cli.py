"""`python -m llamanb` as a user runs it: every bad input is one line on stderr, exit code 2, no
traceback; a good run prints an answer and timings; failed conversions leave no debris.

Most tests call the entry point in this process (conftest.run_cli_here: llamanb.cli.main(argv),
the function `python -m llamanb` runs, with its exit status and stdout / stderr captured as a
child's); those about the process itself start `python -m llamanb`: the embedded model's answer,
the cpu default (built once, then found in the cache by a new process), argv bytes that are not
UTF-8, the prompt on standard input, and Ctrl-C during a conversion."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO_ROOT, make_tiny_checkpoint, run_cli, run_cli_here, write_tiny_gguf

from gguf import GGMLQuantizationType as Q


def assert_user_error(proc, *, contains: str | None = None):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, f"rc {proc.returncode}, stderr: {proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {proc.stderr[-2000:]}"
    assert lines[0].startswith("llamanb: error:"), lines[0]
    if contains is not None:
        assert contains.lower() in lines[0].lower(), lines[0]
    return lines[0]


def residue(cache) -> list[str]:
    return sorted(os.listdir(cache)) if os.path.exists(cache) else []


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny HF checkpoint with a 16-token context."""
    d = tmp_path_factory.mktemp("cli-tiny") / "tiny"
    make_tiny_checkpoint(d, n_heads=4, n_kv_heads=2, tie=True, seed=0, max_position_embeddings=16)
    return d


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def _edited_copy(src, dst, **changes):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


# ---- bad model inputs ---------------------------------------------------------------------------------
def test_missing_model_file(tmp_path, cache):
    p = run_cli_here(["generate", "--model", tmp_path / "nope.gguf", "--prompt", "hi"], cache=cache)
    assert_user_error(p, contains="not found")
    assert residue(cache) == []


def test_corrupt_model_file(tmp_path, cache):
    f = tmp_path / "x.gguf"
    f.write_bytes(np.random.default_rng(0).integers(0, 256, 10_000, dtype=np.uint8).tobytes())
    p = run_cli_here(["generate", "--model", f, "--prompt", "hi"], cache=cache)
    assert_user_error(p)
    assert residue(cache) == []


def test_gguf_magic_then_garbage(tmp_path, cache):
    f = tmp_path / "x.gguf"
    f.write_bytes(b"GGUF" + np.random.default_rng(1).integers(0, 256, 10_000, dtype=np.uint8).tobytes())
    assert_user_error(run_cli_here(["generate", "--model", f, "--prompt", "hi"], cache=cache))
    assert residue(cache) == []


def test_unsupported_quant_type(tmp_path, cache):
    """A valid GGUF with an IQ4_NL tensor: the conversion fails part-way; the error names the type
    and the cache keeps nothing half-written."""
    hf = make_tiny_checkpoint(tmp_path / "src", n_heads=4, n_kv_heads=2, tie=False, seed=1)
    rows, cols = hf.config.hidden_size, hf.config.intermediate_size
    raw = np.random.default_rng(0).integers(0, 256, (rows, cols // 32 * 18), dtype=np.uint8)
    f = tmp_path / "iq4.gguf"
    write_tiny_gguf(f, hf, raw_override={"blk.1.ffn_down.weight": (Q.IQ4_NL, raw)})
    p = run_cli_here(["generate", "--model", f, "--prompt", "hi"], cache=cache)
    assert_user_error(p, contains="IQ4_NL")
    assert residue(cache) == []


@pytest.mark.parametrize("change", [{"hidden_size": 128}, {"num_hidden_layers": 3},
                                    {"intermediate_size": 96}, {"vocab_size": 300},
                                    {"num_key_value_heads": 4}])
def test_weights_do_not_match_config(tmp_path, cache, tiny_dir, change):
    d = _edited_copy(tiny_dir, tmp_path / "edited", **change)
    p = run_cli_here(["generate", "--model", d, "--prompt", "w3 w4", "--raw"], cache=cache)
    assert_user_error(p, contains="do not match")
    assert residue(cache) == []


def test_directory_without_config(tmp_path, cache):
    (tmp_path / "empty").mkdir()
    assert_user_error(run_cli_here(["generate", "--model", tmp_path / "empty", "--prompt", "hi"], cache=cache))


def test_checkpoint_without_tokenizer(tmp_path, cache, tiny_dir):
    d = tmp_path / "notok"
    shutil.copytree(tiny_dir, d)
    (d / "tokenizer.json").unlink()
    assert_user_error(run_cli_here(["generate", "--model", d, "--prompt", "hi"], cache=cache), contains="tokenizer")


# ---- bad prompts and options ------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", ["", "   ", "\n"])
def test_empty_prompt(cache, prompt):
    assert_user_error(run_cli_here(["generate", "--prompt", prompt], cache=cache), contains="empty prompt")


def test_prompt_longer_than_context(cache, tiny_dir):
    long_prompt = " ".join(f"w{i}" for i in range(3, 23))          # 20 tokens, context 16
    p = run_cli_here(["generate", "--model", tiny_dir, "--raw", "--prompt", long_prompt], cache=cache)
    assert_user_error(p)


def test_chat_mode_without_template(cache, tiny_dir):
    p = run_cli_here(["generate", "--model", tiny_dir, "--prompt", "w3 w4"], cache=cache)
    assert_user_error(p, contains="chat template")


@pytest.mark.parametrize("args", [
    ["--temperature", "-1"], ["--temperature", "nan"], ["--temperature", "abc"],
    ["--top-p", "0"], ["--top-p", "1.5"], ["--top-k", "0"], ["--top-k", "-2"],
    ["--max-new-tokens", "0"], ["--max-new-tokens", "x"], ["--dtype", "int8"], ["--bogus-flag"],
])
def test_bad_options(cache, args):
    p = run_cli_here(["generate", "--prompt", "hello", *args], cache=cache)
    assert_user_error(p)
    assert residue(cache) == []                      # rejected before any model work


def test_bad_subcommand_and_preset(cache):
    assert_user_error(run_cli_here(["frobnicate"], cache=cache))
    assert_user_error(run_cli_here(["info", "--preset", "gpt-5"], cache=cache), contains="preset")


# ---- good runs ----------------------------------------------------------------------------------------------------
def test_generate_embedded_model(smollm, llamanb_cache):
    """On the embedded model (already converted in the session cache): an answer, then timings."""
    p = run_cli(["generate", "--max-new-tokens", "8", "--prompt", "What is the capital of France?"],
                cache=llamanb_cache)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    assert p.stdout.strip().startswith("The capital of France")       # greedy, as the reference
    err = p.stderr
    assert "memory-mapped from cache" in err
    for word in ("load", "prefill", "decode", "tok/s", "stop:"):
        assert word in err, err


@pytest.mark.slow
def test_default_engine_is_cpu_with_numpy_tokens(smollm, llamanb_cache):
    """Without --backend the fastest ready engine answers (cpu, where a compiler is found) and says
    so on its status line; its greedy tokens are the numpy reference's, token for token."""
    from llamanb.cpu.readiness import cpu_compiler_missing

    from llamanb.engine_choice import ready_devices

    if cpu_compiler_missing():
        pytest.skip("no C++ compiler here: the default is numpy (test below)")
    if ready_devices():
        pytest.skip(f"{ready_devices()[0]} is ready here: auto takes it (tests/test_engine_choice.py)")
    args = ["generate", "--max-new-tokens", "24", "--temperature", "0", "--no-stream",
            "--prompt", "Name three planets of the solar system."]
    auto = run_cli(args, cache=llamanb_cache, extra_env={"LLAMANB_BACKEND": ""})
    ref = run_cli_here(args + ["--backend", "numpy"], cache=llamanb_cache)    # the reference
    assert auto.returncode == 0 and ref.returncode == 0, auto.stderr + ref.stderr
    assert "[compiled C++ kernels on the host CPU" in auto.stderr, auto.stderr
    assert "[numpy reference engine" in ref.stderr
    assert auto.stdout == ref.stdout and auto.stdout.strip()
    again = run_cli(args, cache=llamanb_cache, extra_env={"LLAMANB_BACKEND": ""})
    assert "compiling" not in again.stderr                    # built once, then found in the cache


def test_default_engine_without_a_compiler_is_numpy_with_one_line(cache, tiny_dir):
    p = run_cli_here(["generate", "--model", tiny_dir, "--raw", "--prompt", "w3 w4", "--max-new-tokens",
                 "2"], cache=cache, extra_env={"LLAMANB_BACKEND": "", "LLAMANB_CXX": "none"})
    assert p.returncode == 0, p.stderr
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("llamanb:")]
    assert notes == ["llamanb: engine numpy, the reference: the faster cpu backend is compiled "
                     "from C++ and needs host C++ builds, which are turned off (LLAMANB_CXX=none), "
                     "so the numpy engine runs instead"], p.stderr
    assert "[numpy reference engine" in p.stderr


def test_no_compiler_on_path_says_what_is_missing_and_that_numpy_runs(cache, tiny_dir, tmp_path):
    """A newcomer without g++ read "the faster cpu backend needs no C++ compiler: 'g++' is not on
    PATH"; the line names what is missing and the engine that runs instead."""
    (tmp_path / "bin").mkdir()                               # a PATH with no compiler on it
    env = {"LLAMANB_BACKEND": "", "LLAMANB_CXX": "", "CXX": "", "PATH": str(tmp_path / "bin")}
    p = run_cli_here(["generate", "--model", tiny_dir, "--raw", "--prompt", "w3 w4",
                      "--max-new-tokens", "2"], cache=cache, extra_env=env)
    assert p.returncode == 0, p.stderr
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("llamanb:")]
    assert notes == ["llamanb: engine numpy, the reference: the faster cpu backend is compiled "
                     "from C++ and needs a C++ compiler (none of g++, c++, clang++ is on PATH; "
                     "install g++ or name one in $LLAMANB_CXX), so the numpy engine runs "
                     "instead"], p.stderr
    info = run_cli_here(["info", "--preset", "smollm2-135m"], cache=cache, extra_env=env)
    assert "cpu                host CPU  not ready, missing: a C++ compiler (none of g++" in info.stdout


def test_quantised_dtype_on_a_file_without_those_blocks_says_so(llamanb_cache, tiny_dir):
    """`generate --dtype q4_0` (auto engine) on a checkpoint that has no Q4_0 blocks: the reason
    is the file, not the engine ("runs on --backend cpu" sent the user to what was running)."""
    from llamanb.cpu.readiness import cpu_compiler_missing

    if cpu_compiler_missing():
        pytest.skip("no C++ compiler: auto cannot start the cpu backend here")
    p = run_cli_here(["generate", "--model", tiny_dir, "--raw", "--prompt", "w3 w4", "--dtype",
                      "q4_0"], cache=llamanb_cache, extra_env={"LLAMANB_BACKEND": ""})
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("llamanb: error:")]
    assert len(errors) == 1 and "--dtype q4_0 runs a GGUF file's own Q4_0 blocks" in errors[0]
    assert "was not loaded from a GGUF file" in errors[0] and "--backend cpu" not in errors[0]


def test_info_and_the_build_find_the_same_compiler(tmp_path, monkeypatch):
    """One lookup: `info`'s verdict and the build's compiler agree, whichever variable names it."""
    from llamanb.cpu.readiness import cpu_compiler_missing
    from llamanb.platform.cxx_build import find_cxx
    from llamanb.platform import cxx_build as hostbuild

    real = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if real is None:
        pytest.skip("no C++ compiler")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "clang++").symlink_to(real)          # only clang++ on PATH
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for var in ("LLAMANB_CXX", "CXX"):
        monkeypatch.delenv(var, raising=False)
    assert find_cxx()[0] == hostbuild.compiler()[0] == str(tmp_path / "bin" / "clang++")
    assert cpu_compiler_missing() == ()
    monkeypatch.setenv("CXX", "no-such-c++")                  # $CXX named: both refuse it
    assert hostbuild.compiler()[0] is None and "$CXX=no-such-c++" in cpu_compiler_missing()[0]
    monkeypatch.setenv("LLAMANB_CXX", "clang++")              # LLAMANB_CXX first
    assert hostbuild.compiler()[0] == find_cxx()[0] and cpu_compiler_missing() == ()
    monkeypatch.setenv("LLAMANB_CXX", "none")
    assert hostbuild.compiler()[0] is None and "LLAMANB_CXX=none" in cpu_compiler_missing()[0]


def test_generate_tiny_raw_no_stream(cache, tiny_dir):
    p = run_cli_here(["generate", "--model", tiny_dir, "--raw", "--prompt", "w3 w4 w5", "--max-new-tokens", "3",
                 "--no-stream"], cache=cache)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("w3 w4 w5")
    assert "converted and cached" in p.stderr


def test_info_preset(cache):
    p = run_cli_here(["info", "--preset", "llama3.2-1b", "--seq", "2048"], cache=cache)
    assert p.returncode == 0, p.stderr
    assert "1,235,814,400" in p.stdout
    assert residue(cache) == []                      # no weights needed, nothing converted


def test_interrupted_conversion_leaves_nothing(tmp_path, smollm_gguf_path):
    """Ctrl-C in the middle of converting the embedded GGUF: exit 130, and the cache holds no
    half-written entry (the temporary directory is removed on the way out)."""
    cache = tmp_path / "cache"
    env = dict(os.environ, LLAMANB_CACHE=str(cache), PYTHONPATH=str(REPO_ROOT))
    # as from a terminal: SIGINT at its default in the child, whatever this suite inherited (under
    # a shell's `&` it is ignored, the child would inherit that, finish, and the test say nothing)
    proc = subprocess.Popen([sys.executable, "-m", "llamanb", "info", "--model", str(smollm_gguf_path)],
                            cwd=str(REPO_ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            if any(n.startswith(".") and n != ".llamanb-cache" for n in residue(cache)):
                time.sleep(0.3)                     # inside convert(): writing tensors
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            pytest.skip("conversion finished before it could be interrupted")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode == 0:
        pytest.skip("conversion finished before the signal arrived")
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert residue(cache) == []


# ---- sampling seeds and --help ------------------------------------------------------------------------------
def _seed_of(proc) -> int:
    import re

    status = proc.stderr.strip().splitlines()[-1]
    m = re.search(r"\| seed (\d+)$", status)
    assert m, f"no seed on the status line: {status!r}"
    return int(m.group(1))


def test_sampling_gets_a_fresh_seed_and_prints_it(cache, tiny_dir):
    """Without --seed every run draws its own seed and prints it; --seed N with that number
    repeats the run token for token."""
    args = ["generate", "--model", tiny_dir, "--raw", "--prompt", "w3 w4", "--temperature", "1.5",
            "--max-new-tokens", "12", "--no-stream"]
    # A drawn seed may meet EOS within a token or two (3 of seeds 0..149 did on this checkpoint),
    # leaving too little to compare. Draw again, up to 8 times, for a run that generated more:
    # all 8 short has p ~ 0.02**8 < 1e-13.
    runs = []
    for _ in range(8):
        runs.append(run_cli_here(args, cache=cache))
        assert runs[-1].returncode == 0, runs[-1].stderr
        if len(runs) >= 2 and len(runs[-1].stdout.split()) > 2:
            break
    first = runs[-1]
    assert len(first.stdout.split()) > 2             # it did generate something to compare
    seeds = [_seed_of(r) for r in runs]
    assert len(set(seeds)) == len(seeds)             # 32 random bits each: a repeat has p < 2**-26
    again = run_cli_here(args + ["--seed", str(seeds[-1])], cache=cache)
    assert again.returncode == 0, again.stderr
    assert _seed_of(again) == seeds[-1]
    assert again.stdout == first.stdout


def test_greedy_status_says_greedy(cache, tiny_dir):
    p = run_cli_here(["generate", "--model", tiny_dir, "--raw", "--prompt", "w3 w4", "--max-new-tokens", "2"],
                cache=cache)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines()[-1].endswith("| greedy")


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--seed", "1.5"], ["--seed", "abc"]])
def test_bad_seed(cache, args):
    assert_user_error(run_cli_here(["generate", "--prompt", "hi", *args], cache=cache), contains="seed")


def test_help_shows_every_default(cache):
    """Each option that has a default shows it in --help (argparse's %(default)s, or a sentence
    saying what the default is when it is computed at run time)."""
    from llamanb.cli import build_parser

    ap = build_parser()
    subs = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sp in subs.items():
        text = " ".join(sp.format_help().split())
        for act in sp._actions:
            if not act.option_strings or act.dest == "help":
                continue
            if act.default is None or act.default is False:
                continue                             # nothing to show (a flag, or an optional value)
            assert f"(default: {act.default})" in text, (name, act.dest, act.default)
    gen = run_cli_here(["generate", "--help"], cache=cache)
    assert gen.returncode == 0
    flat = " ".join(gen.stdout.split())
    for shown in ("(default: 256)", "(default: 0.0)", "(default: 1.0)", "(default: float32)",
                  "--seed SEED random seed for sampling (default: a fresh one"):
        assert shown in flat, shown


# ---- prompt text that is not UTF-8 ----------------------------------------------------------------------------
def test_prompt_argv_bytes_not_utf8(cache, tiny_dir):
    """A shell passes the raw byte 0xff; Python hands it over as the lone surrogate U+DCFF
    (subprocess encodes a str argv with os.fsencode, so the child sees the byte itself)."""
    p = run_cli(["generate", "--model", tiny_dir, "--raw", "--prompt", "w3 \udcff w4"], cache=cache)
    assert_user_error(p, contains="not valid UTF-8: byte 0xff")
    assert residue(cache) == []                      # rejected before any model work


def test_system_argv_bytes_not_utf8(cache):
    p = run_cli_here(["generate", "--prompt", "hi", "--system", "\udcc3"], cache=cache)
    assert_user_error(p, contains="--system is not valid UTF-8")


def test_prompt_file_not_utf8(tmp_path, cache, tiny_dir):
    f = tmp_path / "prompt.txt"
    f.write_bytes("w3 w4 caf\u00e9 ".encode("latin-1"))            # é as one latin-1 byte 0xe9
    p = run_cli_here(["generate", "--model", tiny_dir, "--raw", "--prompt-file", f], cache=cache)
    assert_user_error(p, contains="byte 0xe9 at byte offset 9")


def test_prompt_file_and_stdin(tmp_path, cache, tiny_dir):
    """A UTF-8 prompt file (or '-' for standard input) gives the same answer as --prompt."""
    f = tmp_path / "prompt.txt"
    f.write_text("w3 w4 w5", encoding="utf-8")
    base = ["generate", "--model", tiny_dir, "--raw", "--max-new-tokens", "3", "--no-stream"]
    direct = run_cli_here(base + ["--prompt", "w3 w4 w5"], cache=cache)
    from_file = run_cli_here(base + ["--prompt-file", f], cache=cache)
    # numpy, as the two runs above (run_cli's default): with `auto` this child compiled the cpu
    # kernels into the test's fresh cache first (15 s), and compared another engine's tokens
    env = dict(os.environ, LLAMANB_CACHE=str(cache), PYTHONPATH=str(REPO_ROOT),
               LLAMANB_BACKEND="numpy")
    env.pop("LLAMANB_MODEL", None)
    from_stdin = subprocess.run([sys.executable, "-m", "llamanb", *map(str, base), "--prompt-file", "-"],
                                input=b"w3 w4 w5", cwd=str(REPO_ROOT), env=env, capture_output=True,
                                timeout=300)
    assert direct.returncode == from_file.returncode == from_stdin.returncode == 0, from_stdin.stderr
    assert direct.stdout == from_file.stdout == from_stdin.stdout.decode()


def test_prompt_file_missing_or_with_prompt(tmp_path, cache):
    assert_user_error(run_cli_here(["generate", "--prompt-file", tmp_path / "none.txt"], cache=cache),
                      contains="no such file")
    assert_user_error(run_cli_here(["generate", "--prompt", "a", "--prompt-file", "b"], cache=cache),
                      contains="not allowed with")


# ---- malformed config.json in a local checkpoint --------------------------------------------------------------
@pytest.mark.parametrize("change, contains", [
    ({"hidden_size": "96"}, "hidden_size must be a positive integer"),
    ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
    ({"intermediate_size": -128}, "intermediate_size must be a positive integer, got -128"),
    ({"rms_norm_eps": "1e-5"}, "rms_norm_eps"),
    ({"eos_token_id": "</s>"}, "eos_token_id"),
    ({"num_hidden_layers": None}, "num_hidden_layers is null"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
])
def test_malformed_config_values(tmp_path, cache, tiny_dir, change, contains):
    d = _edited_copy(tiny_dir, tmp_path / "edited", **change)
    line = assert_user_error(run_cli_here(["generate", "--model", d, "--prompt", "w3", "--raw"], cache=cache),
                             contains=contains)
    assert "config.json" in line
    assert residue(cache) == []


def _rewrite_config(src, dst, text: bytes):
    shutil.copytree(src, dst)
    (dst / "config.json").write_bytes(text)
    return dst


@pytest.mark.parametrize("text, contains", [
    (None, "lacks 'vocab_size'"),                     # a required field removed
    (b'{"hidden_size": 96,', "not valid JSON"),
    (b"", "not valid JSON"),
    (b"[1, 2, 3]", "expected a JSON object"),
    (b'{"model_type": "llama", "name": "\xff"}', "not UTF-8"),
])
def test_broken_config_json(tmp_path, cache, tiny_dir, text, contains):
    if text is None:
        cfg = json.loads((tiny_dir / "config.json").read_text())
        del cfg["vocab_size"]
        text = json.dumps(cfg).encode()
    d = _rewrite_config(tiny_dir, tmp_path / "broken", text)
    line = assert_user_error(run_cli_here(["info", "--model", d], cache=cache), contains=contains)
    assert "config.json" in line
    assert residue(cache) == []


def test_broken_tokenizer_config_json(tmp_path, cache, tiny_dir):
    """Caught before the conversion, so no cache entry with a broken tokenizer is ever written."""
    d = tmp_path / "badtok"
    shutil.copytree(tiny_dir, d)
    (d / "tokenizer_config.json").write_text('{"chat_template": ')
    assert_user_error(run_cli_here(["info", "--model", d], cache=cache), contains="tokenizer_config.json")
    assert residue(cache) == []


@pytest.mark.parametrize("variant, contains", [("string_size", "malformed GGUF metadata"),
                                               ("zero_heads", "head_count must be positive")])
def test_malformed_gguf_metadata(tmp_path, cache, variant, contains):
    import gguf

    f = tmp_path / "bad.gguf"
    w = gguf.GGUFWriter(str(f), "llama")
    if variant == "string_size":
        w.add_string("llama.embedding_length", "wide")
        w.add_head_count(4)
    else:
        w.add_embedding_length(96)
        w.add_head_count(0)
    w.add_block_count(2)
    w.add_feed_forward_length(128)
    w.add_context_length(64)
    w.add_token_list(["a", "b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert_user_error(run_cli_here(["info", "--model", f], cache=cache), contains=contains)
    assert residue(cache) == []


def test_hardware_backend_without_its_stack_is_one_line(smollm, llamanb_cache):
    """A real-hardware backend named where its stack is absent: one line, exit 2, no traceback.
    (The embedded model is loaded before the backend is chosen: the session cache, where it is
    converted already, spares converting it again into a fresh one.)"""
    from importlib.util import find_spec

    if find_spec("ttnn") is not None:
        pytest.skip("ttnn is installed here")
    assert_user_error(run_cli_here(["generate", "--prompt", "hi", "--backend", "galaxy-ttnn"],
                                   cache=llamanb_cache), contains="ttnn")

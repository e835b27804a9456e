"""`python -m llamanb` where its surroundings fail: standard output that is full, closed or cannot
encode the answer, an address-space limit, a bad LLAMANB_THREADS. Each is one line on stderr and a
nonzero exit (never a traceback, never a lost answer reported as success). These start a real
process: what they test (descriptors, the interpreter's encodings, limits) is the process's."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, make_tiny_checkpoint, run_cli


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("streams-tiny") / "tiny"
    make_tiny_checkpoint(d, n_heads=4, n_kv_heads=2, tie=True, seed=0, max_position_embeddings=16)
    return d


def _env(cache, **extra) -> dict:
    env = dict(os.environ, LLAMANB_CACHE=str(cache), LLAMANB_BACKEND="numpy", OMP_NUM_THREADS="1",
               PYTHONPATH=str(REPO_ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                            if os.environ.get("PYTHONPATH") else ""))
    env.pop("LLAMANB_MODEL", None)
    env.update(extra)
    return env


def _generate(tiny_dir, *more):
    return [sys.executable, "-m", "llamanb", "generate", "--model", str(tiny_dir), "--raw",
            "--prompt", "w3 w4", "--max-new-tokens", "2", *more]


def _one_error_line(stderr: str, *words: str) -> str:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("llamanb: error:")]
    assert len(errors) == 1, stderr
    for w in words:
        assert w in errors[0], errors[0]
    return errors[0]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("stream", [[], ["--no-stream"]])
def test_full_stdout_is_an_error_naming_stdout(tmp_path, tiny_dir, stream):
    with open("/dev/full", "w") as full:
        p = subprocess.run(_generate(tiny_dir, *stream), stdout=full, stderr=subprocess.PIPE,
                           text=True, env=_env(tmp_path / "cache"), cwd=str(REPO_ROOT), timeout=300)
    assert p.returncode == 2, p.stderr
    _one_error_line(p.stderr, "standard output", "No space left on device")


def test_closed_stdout_is_an_error_not_a_lost_answer(tmp_path, tiny_dir):
    """`generate >&-`: Python starts with sys.stdout None and print() writes nowhere; the answer
    would vanish with exit 0."""
    p = subprocess.run(["/bin/sh", "-c", 'exec "$@" >&-', "sh", *_generate(tiny_dir)],
                       stderr=subprocess.PIPE, text=True, env=_env(tmp_path / "cache"),
                       cwd=str(REPO_ROOT), timeout=300)
    assert p.returncode == 2, p.stderr
    _one_error_line(p.stderr, "standard output is closed")
    assert not (tmp_path / "cache").exists()                  # said before any work


def test_closed_stderr_still_answers(tmp_path, tiny_dir):
    """`2>&-`: the status lines have nowhere to go, the answer still reaches stdout, exit 0."""
    p = subprocess.run(["/bin/sh", "-c", 'exec "$@" 2>&-', "sh", *_generate(tiny_dir)],
                       stdout=subprocess.PIPE, text=True, env=_env(tmp_path / "cache"),
                       cwd=str(REPO_ROOT), timeout=300)
    assert p.returncode == 0 and p.stdout.startswith("w3 w4"), p.stdout


def test_a_reader_that_leaves_is_not_an_error(tmp_path, tiny_dir):
    """`generate | head -c 2`: the reader left on purpose; no 'Exception ignored' at exit."""
    p = subprocess.run(["/bin/sh", "-c", '"$@" | head -c 2', "sh",
                        *_generate(tiny_dir)], capture_output=True, text=True,
                       env=_env(tmp_path / "cache"), cwd=str(REPO_ROOT), timeout=300)
    assert p.stdout == "w3" and "Exception" not in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"},
                                 {"PYTHONIOENCODING": "latin-1"},
                                 {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}])
def test_stdout_that_cannot_encode_the_answer_prints_what_it_can(tmp_path, tiny_dir, env):
    """Non-ASCII text (the raw prompt is echoed) on a stdout that is not UTF-8: the characters it
    cannot show become '?', the rest is printed, exit 0; not a UnicodeEncodeError traceback."""
    p = subprocess.run(_generate(tiny_dir, "--prompt", "w3 café ☕ w4"), capture_output=True,
                       env=_env(tmp_path / "cache", **env), cwd=str(REPO_ROOT), timeout=300)
    err = p.stderr.decode("ascii", "replace")
    assert p.returncode == 0 and "Traceback" not in err, err
    out = p.stdout.decode("latin-1")
    assert out.startswith("w3 caf") and "?" in out and " w4" in out, out


def test_address_space_limit_is_one_line(tmp_path, smollm):
    """Under `ulimit -v` too small for the embedded model (its 538 MB of weights are mapped and
    the numpy engine derives more), but enough to start: one line that says memory ran out."""
    import resource

    probe = subprocess.run([sys.executable, "-c",
                            "import numpy, tokenizers, llamanb.cli, llamanb.io.store, "
                            "llamanb.engine.engine\n"
                            "print([l for l in open('/proc/self/status') if l.startswith('VmPeak')]"
                            "[0].split()[1])"],
                           capture_output=True, text=True, env=_env(tmp_path / "c"),
                           cwd=str(REPO_ROOT), timeout=120)
    if probe.returncode != 0 or not probe.stdout.strip().isdigit():
        pytest.skip(f"cannot measure this Python's address space: {probe.stderr[-300:]}")
    limit = (int(probe.stdout) + 300_000) * 1024             # started + 300 MB: less than the model

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    p = subprocess.run([sys.executable, "-m", "llamanb", "generate", "--prompt", "hi",
                        "--max-new-tokens", "2"], capture_output=True, text=True,
                       env=_env(os.environ["LLAMANB_CACHE"]), cwd=str(REPO_ROOT), timeout=300,
                       preexec_fn=cap)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    _one_error_line(p.stderr, "out of memory", "ulimit -v")


@pytest.mark.parametrize("value", ["abc", "0", "-3", "2.5", "100000"])
def test_bad_llamanb_threads_is_one_line(tmp_path, tiny_dir, value):
    """kernels/cpu/pool.cc reads it with atoi: 'abc' silently meant every core, 100000 a thread
    each; the CLI says so before any work."""
    p = run_cli(["generate", "--model", tiny_dir, "--raw", "--prompt", "w3", "--max-new-tokens", "1"],
                cache=tmp_path / "cache", extra_env={"LLAMANB_THREADS": value})
    assert p.returncode == 2, p.stderr
    _one_error_line(p.stderr, "LLAMANB_THREADS", repr(value))
    assert not (tmp_path / "cache").exists()

"""python -m llamanb generate | chat | verify | bench | info | batch | npu | tcp

Every user mistake ends as one line on stderr and exit code 2; no traceback.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys

from llamanb.cpu.dtypes import DTYPES      # the cpu track's one table of precisions
from llamanb.errors import LlamanbError

DEFAULT_PROMPT = "What are three good reasons to learn how a language model works inside?"


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """--help shows each option's default, except where there is none to show (None, False)."""

    def _get_help_string(self, action):
        if (action.default is None or action.default is False or action.default is argparse.SUPPRESS
                or "(default:" in (action.help or "")):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message):                        # one line, exit 2 (argparse prints two)
        if "required: cmd" in message:               # `python -m llamanb` alone
            subs = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction))
            message = f"name a command: {' | '.join(subs.choices)}"
        print(f"llamanb: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _int_at_least(minimum: int):
    """An argparse type: an integer >= minimum."""
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v
    return parse


_positive_int = _int_at_least(1)
_seed = _int_at_least(0)


def _model_arg(p):
    p.add_argument("--model", default=os.environ.get("LLAMANB_MODEL") or None,
                   help="GGUF file or HF checkpoint directory (default: $LLAMANB_MODEL if set, else "
                        "the embedded SmolLM2-135M-Instruct)")


def _backend_arg(p, default: str | None = None) -> None:
    """--backend; generate and chat default to `auto` (or $LLAMANB_BACKEND), verify to numpy."""
    from llamanb.engine.registry import BACKENDS, LAZY

    names = ", ".join({**BACKENDS, **LAZY})
    if default is None:
        p.add_argument("--backend", default=os.environ.get("LLAMANB_BACKEND") or AUTO, metavar="NAME",
                       help=f"{AUTO} (default, or $LLAMANB_BACKEND): cuda or npu2 where `info` "
                            f"calls one ready (float32 --dtype), else cpu where a C++ compiler is "
                            f"found (built once), else numpy, the reference. Any of: {names}. "
                            "npu2* and galaxy-* run bf16; --dtype applies to numpy and cpu")
    else:
        p.add_argument("--backend", default=default, metavar="NAME",
                       help=f"one of: {names} (npu2* and galaxy-* run bf16; --dtype applies to "
                            "numpy and cpu)")


def _sampling_args(p, chat: bool = False) -> None:
    """The options generate and chat share: system message, length, sampling, dtype (chat's
    sampling defaults to what the model recommends)."""
    from llamanb.engine.chat import CHAT_DEFAULT

    p.add_argument("--system", default=None, help="system message for the chat template")
    p.add_argument("--max-new-tokens", type=_positive_int, default=256,
                   help="stop after this many new tokens (or at end of turn)")
    if chat:                       # the model's recommendation (llamanb.engine.chat.recommended_sampling)
        rec = "(default: the model's recommendation, else {})"
        p.add_argument("--temperature", type=float, default=None,
                       help="0 = greedy " + rec.format(CHAT_DEFAULT["temperature"]))
        p.add_argument("--top-k", type=int, default=None, help="sample from the k most likely "
                       "tokens " + rec.format(CHAT_DEFAULT["top_k"]))
        p.add_argument("--top-p", type=float, default=None, help="sample from the smallest set of "
                       "tokens whose probability reaches p (1 = off) " + rec.format(CHAT_DEFAULT["top_p"]))
        p.add_argument("--repeat-penalty", type=float, default=None, help="llama.cpp's repeat "
                       "penalty: a token among the last --repeat-last-n has its logit divided by it "
                       "(multiplied if negative); 1 = off " + rec.format(CHAT_DEFAULT["repeat_penalty"]))
        p.add_argument("--repeat-last-n", type=_positive_int, default=None,
                       help="tokens the repeat penalty looks back over "
                            + rec.format(CHAT_DEFAULT["repeat_last_n"]))
        p.add_argument("--greedy", action="store_true", help="the reproducible run: always the "
                       "most likely token, no repeat penalty")
    else:
        p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
        p.add_argument("--top-k", type=int, default=None, help="sample from the k most likely "
                       "tokens (default: all)")
        p.add_argument("--top-p", type=float, default=1.0, help="sample from the smallest set of "
                       "tokens whose probability reaches p (1 = off)")
    p.add_argument("--seed", type=_seed, default=None,
                   help="random seed for sampling (default: a fresh one, printed on the status "
                        "line so that --seed N repeats the run)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help=DTYPE_HELP)


DTYPE_HELP = ("bf16 rounds weights and every op's output to bfloat16 (numpy, cpu); q4_1 / q4_0 / "
              "q5_0 / q4_k / q6_k / q8_0 run a GGUF's own quantised blocks (every layer matrix in that "
              "format), auto each matrix as the file stores it (cpu backend)")


from llamanb.engine_choice import AUTO, choose_engine as _engine  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m llamanb", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="answer a prompt")
    _model_arg(g)
    src = g.add_mutually_exclusive_group()
    src.add_argument("--prompt", default=DEFAULT_PROMPT, help="the prompt text")
    src.add_argument("--prompt-file", default=None, metavar="PATH",
                     help="read the prompt from a UTF-8 text file ('-': standard input)")
    g.add_argument("--raw", action="store_true", help="plain text continuation, no chat template")
    _sampling_args(g)
    g.add_argument("--no-stream", action="store_true", help="print the answer only when complete")
    _backend_arg(g)

    c = sub.add_parser("chat", help="talk to the model in the terminal (multi-turn, KV cache kept)")
    _model_arg(c)
    _sampling_args(c, chat=True)
    c.add_argument("--context", type=_positive_int, default=4096,
                   help="KV-cache positions for the whole conversation (capped at the model's "
                        "context)")
    _backend_arg(c)

    v = sub.add_parser("verify", help="check llamanb against HF transformers references")
    _model_arg(v)
    v.add_argument("--reference", default=None,
                   help="reference JSON (default: data/reference/hf_smollm2_reference.json, shipped)")
    v.add_argument("--live", action="store_true", help="compute fresh references with transformers")
    v.add_argument("--diagnose", action="store_true",
                   help="per-layer cosine similarity / max |diff| of hidden states vs transformers")
    v.add_argument("--prompt", default="What is the capital of France?",
                   help="prompt for --diagnose")
    v.add_argument("--steps", type=_positive_int, default=32, help="greedy steps for --live")
    v.add_argument("--save", default=None, help="with --live: write the fresh references here")
    v.add_argument("--dtype", choices=DTYPES, default="float32",
                   help=DTYPE_HELP + " (verify: against the float32 reference; the gate's top-5 "
                        "rule judges where bf16 rounding changes a token)")
    _backend_arg(v, default="numpy")

    b = sub.add_parser("bench", help="llamanb vs transformers on this machine")
    _model_arg(b)
    b.add_argument("--json", default=None, help="also write the results to this file")
    b.add_argument("--runs", type=_positive_int, default=None, help="timed rounds (default 3; "
                   "medians; a target between engines is decided by the lower quartile of the "
                   "paired rounds, from 7 rounds on; with --kernels default 61)")
    from llamanb.bench.runners import DECODE_STEPS

    b.add_argument("--decode-tokens", type=_positive_int, default=DECODE_STEPS,
                   help="tokens generated in each decode measurement")
    b.add_argument("--no-transformers", action="store_true", help="measure llamanb only")
    b.add_argument("--no-bf16", action="store_true", help="skip transformers bf16")
    from llamanb.engine.registry import BACKENDS, LAZY

    b.add_argument("--backend", default="numpy", help="also measure this llamanb backend beside "
                   "the numpy engine, as a ratio in the same run; one of: "
                   + ", ".join({**BACKENDS, **LAZY}))
    b.add_argument("--peer-python", default=None, help="with --backend cpu: a Python that has "
                   "llama-cpp-python, to measure llama.cpp F32/BF16 (and the file's own Q4_1) beside it (default: "
                   "$LLAMANB_PEER_PYTHON, or this Python if it can import llama_cpp)")
    b.add_argument("--also-march", default="auto", help="with --backend cpu: also measure the "
                   "cpu engines on their kernels built for these -march targets, side by side "
                   "(comma-separated, e.g. x86-64-v3; 'portable'; 'none'; default 'auto': "
                   "x86-64-v3 -- the AVX2 kernels -- where this CPU's own build uses AVX-512)")
    b.add_argument("--batching", action="store_true", help="instead: one request at a time vs "
                   "static vs continuous batching (llamanb only, slot counts 1-16)")
    b.add_argument("--kernels", nargs="+", default=None, metavar="DIR", help="instead: with "
                   "--backend cpu[:DTYPE], decode on the packaged kernels/cpu against the same "
                   "engine built from each DIR (a changed copy), alternated in one process; "
                   "prints each one's speed-up (median and quartiles of the rounds) and whether "
                   "its logits are bit for bit the packaged kernels'")

    i = sub.add_parser("info", help="which backends this machine can run (ready, or what is "
                       "missing); config, parameter and memory accounting")
    _model_arg(i)
    from llamanb.model.config import PRESETS

    i.add_argument("--preset", default=None, help=f"{' | '.join(PRESETS)} (no weights needed)")
    i.add_argument("--seq", type=_positive_int, default=None, help="KV cache length to price")

    k = sub.add_parser("cache", help="list what llamanb keeps in $LLAMANB_CACHE (sizes, "
                       "sources, last use), verify it, or prune what no run can use")
    k.add_argument("action", nargs="?", choices=["list", "verify", "prune"], default="list",
                   help="list (default; sizes and checks), verify (every byte of every entry), "
                        "prune (remove damaged entries, entries whose source is gone or changed, "
                        "kernels of sources that no longer exist, a killed run's temporaries)")
    k.add_argument("--all", action="store_true", dest="all_entries",
                   help="with prune: remove every entry llamanb wrote (what `make clean-cache` "
                        "runs); files llamanb did not write are never touched")

    from llamanb.serve.cli import add_parser as add_batch_parser
    add_batch_parser(sub, _model_arg, _positive_int)
    from llamanb.npu.cli import add_parser as add_npu_parser
    add_npu_parser(sub, _model_arg, _positive_int)
    from llamanb.tcp.cli import add_parser as add_tcp_parser
    add_tcp_parser(sub, _model_arg, _positive_int)
    return ap


def cmd_generate(a) -> int:
    from llamanb.engine.engine import Engine
    from llamanb.engine.generate import SamplingParams, generate
    from llamanb.io.store import load_model
    from llamanb.model.tokenizer import as_text

    prompt = _read_prompt(a)
    if not prompt or not prompt.strip():
        raise LlamanbError("empty prompt: give --prompt some text")
    system = None if a.system is None else as_text(a.system, "--system")
    seed = secrets.randbits(32) if a.seed is None else a.seed
    params = SamplingParams(a.temperature, a.top_k, a.top_p, seed)   # validates
    from llamanb.io.store import entry_bytes

    model = load_model(a.model)
    ids = model.tokenizer.encode_prompt(prompt, chat=not a.raw, system=system)
    if len(ids) >= model.config.max_seq:
        raise LlamanbError(f"prompt of {len(ids)} tokens leaves no room in the "
                           f"{model.config.max_seq}-token context")
    engine = _engine(model, a.backend, a.dtype)          # a backend that cannot run: one line
    where = (f"converted and cached, {entry_bytes(model.cache_dir) / 1e6:.0f} MB"
             if model.converted else "memory-mapped from cache")
    print(f"model: {model.config.name} ({model.config.n_params() / 1e6:.1f} M params, {where}: "
          f"{model.cache_dir})", file=sys.stderr)
    counters = getattr(engine.backend, "counters", None)
    c0 = counters.copy() if counters is not None else None
    stream = None if a.no_stream else (lambda t, s: print(s, end="", flush=True))
    if not a.no_stream and a.raw:
        print(prompt, end="", flush=True)
    r = generate(engine, ids, a.max_new_tokens, params, on_token=stream)
    if a.no_stream:
        print((prompt if a.raw else "") + r.text, end="")
    print()
    dtype = a.dtype if engine.backend.name in ("numpy", "cpu") else "bf16"
    print(f"[{engine.backend.description}, {dtype}] load {model.load_s:.2f} s | "
          f"prefill {len(ids)} tok in {r.prefill_s:.3f} s ({r.prefill_tok_s:.1f} tok/s) | "
          f"decode {r.decode_steps} tok in {r.decode_s:.3f} s ({r.decode_tok_s:.1f} tok/s) | "
          f"stop: {r.stop_reason} | {f'seed {seed}' if params.temperature > 0 else 'greedy'}",
          file=sys.stderr)
    if c0 is not None:                 # a device backend: its calls and bytes, per token
        d, n = counters - c0, max(1, r.decode_steps + 1)
        print(f"[{engine.backend.name}] {d.dispatches / n:.1f} NPU calls/token, "
              f"{d.bytes_to_device / n:,.0f} B to / {d.bytes_from_device / n:,.0f} B from the "
              f"device per token (prefill included); estimated NPU time "
              f"{d.estimated_s * 1e3:.1f} ms (cost model, not measured)", file=sys.stderr)
    return 0


def _read_prompt(a) -> str:
    """The prompt as text: --prompt (argv bytes that were not UTF-8 arrive as lone surrogates) or
    --prompt-file; either way, text that is not UTF-8 is a LlamanbError naming the bad byte."""
    from llamanb.model.tokenizer import as_text

    if a.prompt_file is None:
        return as_text(a.prompt, "--prompt")
    if a.prompt_file == "-":
        return as_text(sys.stdin.buffer.read(), "the prompt on standard input")
    try:
        with open(a.prompt_file, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LlamanbError(f"--prompt-file {a.prompt_file}: {e.strerror}") from None
    return as_text(data, f"--prompt-file {a.prompt_file}")


def cmd_verify(a) -> int:
    from llamanb.check import verify

    if a.save is not None:
        if not a.live:
            raise LlamanbError("--save writes the references that --live computes: add --live")
        from llamanb.platform.paths import check_output_file

        check_output_file(a.save, "--save")
    if a.diagnose:
        return verify.diagnose_cli(a.model, a.prompt)
    if a.live:
        return verify.live_cli(a.model, a.steps, a.save)
    if a.backend == "cuda":                  # before loading anything: what a GPU run lacks here
        from llamanb.cuda.readiness import cuda_missing

        if cuda_missing():
            raise LlamanbError(f"backend 'cuda' needs {'; '.join(cuda_missing())} (backend "
                               f"'cuda-simulated' runs the same kernels in numba-cuda's "
                               f"simulator, tiny models only)")
    return verify.reference_cli(a.model, a.reference, backend=a.backend, dtype=a.dtype)


def cmd_bench(a) -> int:
    from llamanb.bench import cli as bench

    return bench.main(a)


def cmd_chat(a) -> int:
    from llamanb.chat_cli import main as chat

    return chat(a)


def cmd_info(a) -> int:
    from llamanb.readiness import readiness_report
    from llamanb.model.info import describe

    if a.preset:                               # arguments first, then the model, then output
        from llamanb.model.config import PRESETS

        if a.preset not in PRESETS:
            raise LlamanbError(f"unknown preset {a.preset!r}; known: {', '.join(PRESETS)}")
        cfg = PRESETS[a.preset]
    else:
        from llamanb.io.store import load_model

        cfg = load_model(a.model).config
    text = describe(cfg, a.seq)
    print("backends on this machine:")
    print("\n".join("  " + line for line in readiness_report(width=None).splitlines()))
    print(text)
    return 0


def cmd_cache(a) -> int:
    from llamanb.io.cache_inventory import main as cache

    return cache(a.action, a.all_entries)


def cmd_batch(a) -> int:
    from llamanb.serve.cli import main as batch

    return batch(a)


def cmd_npu(a) -> int:
    from llamanb.npu.cli import main as npu

    return npu(a)


def cmd_tcp(a) -> int:
    from llamanb.tcp.cli import main as tcp

    return tcp(a)


def _os_error_line(e: OSError) -> str:
    from pathlib import Path

    from llamanb.platform.paths import cache_fault, cache_root, os_problem

    name = e.filename
    if name is not None:
        p = Path(os.fsdecode(name)).absolute()
        if p == cache_root().absolute() or cache_root().absolute() in p.parents:
            return str(cache_fault(p, os_problem(e)))
        return f"{p}: {os_problem(e)}"
    return f"{type(e).__name__}: {e}"


class StdoutError(LlamanbError):
    """Standard output failed (full, closed, an I/O error): the answer did not reach it."""


def _stdout_problem(e: OSError) -> StdoutError:
    import errno

    why = {errno.ENOSPC: "it is full (No space left on device)",
           errno.EBADF: "it is closed", errno.EDQUOT: "the disk quota is exceeded"}.get(
        e.errno, f"{e.strerror or type(e).__name__}")
    return StdoutError(f"cannot write to standard output: {why}; the answer is lost (redirect it "
                       f"to a file with room, or a terminal)")


class _GuardedStdout:
    """sys.stdout for the length of a command: a write or flush that fails (a full disk under
    `> /dev/full`, a descriptor closed meanwhile) becomes one line naming standard output; a
    reader that went away (`| head`) stays a BrokenPipeError. Everything else is the stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, s):
        try:
            return self._stream.write(s)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise _stdout_problem(e) from None

    def flush(self):
        try:
            return self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise _stdout_problem(e) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _printable_streams() -> None:
    """Text that the terminal's encoding cannot show (PYTHONIOENCODING=ascii, a Latin-1 locale)
    is printed with '?' in its place (stdout) or as an escape (stderr, Python's own default)
    instead of a UnicodeEncodeError traceback."""
    import codecs

    for name, errors in (("stdout", "replace"), ("stderr", "backslashreplace")):
        s = getattr(sys, name)
        enc = getattr(s, "encoding", None) or "utf-8"
        try:
            utf8 = codecs.lookup(enc).name == "utf-8"
        except LookupError:
            utf8 = False
        if (not utf8 and getattr(s, "errors", None) in ("strict", "surrogateescape")
                and hasattr(s, "reconfigure")):             # the C locale: surrogateescape
            s.reconfigure(errors=errors)


def _drop_pending_stdout() -> None:
    """After standard output failed: what is still buffered for it can never be written, so the
    interpreter's last flush must not print 'Exception ignored' (and exit 120): point the
    descriptor at /dev/null."""
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def _check_environment() -> None:
    """Variables that change how llamanb runs, checked before any work (one line each)."""
    from llamanb.cpu.kernels import threads_from_env

    threads_from_env()


def main(argv=None) -> int:
    if sys.stderr is None:                  # started with 2>&-: its messages have nowhere to go
        sys.stderr = open(os.devnull, "w")
    if sys.stdout is None:                  # started with >&-: the answer would vanish, exit 0
        print("llamanb: error: standard output is closed (started with >&-?); the answer would "
              "be lost: redirect it to a file or a terminal", file=sys.stderr)
        return 2
    _printable_streams()
    a = build_parser().parse_args(argv)
    real_stdout = sys.stdout
    sys.stdout = _GuardedStdout(real_stdout)
    try:
        _check_environment()
        code = {"generate": cmd_generate, "chat": cmd_chat, "verify": cmd_verify,
                "bench": cmd_bench, "info": cmd_info, "batch": cmd_batch, "npu": cmd_npu,
                "tcp": cmd_tcp, "cache": cmd_cache}[a.cmd](a)
        sys.stdout.flush()                  # a full or closed stdout is said here, not at exit
        return code
    except StdoutError as e:
        _drop_pending_stdout()
        print(f"llamanb: error: {e}", file=sys.stderr)
        return 2
    except LlamanbError as e:
        print(f"llamanb: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nllamanb: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:                 # the reader left (`| head`): nothing more to say
        _drop_pending_stdout()
        return 0
    except MemoryError:
        print(f"llamanb: error: out of memory ({_memory_limit()}); run a smaller model or raise the "
              "limit", file=sys.stderr)
        return 2
    except OSError as e:                 # a fault no check foresaw: still one line, naming the file
        import errno

        if e.errno == errno.ENOMEM:
            print(f"llamanb: error: out of memory ({_memory_limit()}): {_os_error_line(e)}",
                  file=sys.stderr)
        else:
            print(f"llamanb: error: {_os_error_line(e)}", file=sys.stderr)
        return 2
    finally:
        if sys.stdout.__class__ is _GuardedStdout:
            sys.stdout = real_stdout


def _memory_limit() -> str:
    """The limit a MemoryError most likely met, in words: an address-space limit (ulimit -v)
    where one is set, else the machine's memory."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            return f"this process may use {soft / 2**30:.2f} GiB of address space: ulimit -v"
    except (ImportError, OSError, ValueError):
        pass
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return f"the machine has {total / 2**30:.1f} GiB of memory"
    except (ValueError, OSError, AttributeError):
        return "the machine's memory ran out"

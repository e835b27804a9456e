"""Shared fixtures for the llamanb test suite.

Every reference here is independent of llamanb: HF transformers (torch), the `gguf` package,
the shared reference data produced by transformers, or closed-form arithmetic.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
# The reference data ships in the project (data/reference/); a clone needs nothing beside it.
# ../shared/reference, where a developer's checkout has it, must hold the same bytes.
REFERENCE_DIR = REPO_ROOT / "data" / "reference"
OUTSIDE_REFERENCE = REPO_ROOT.parent / "shared" / "reference"

# `python -m pytest` puts the working directory on sys.path; make the package importable from
# anywhere (the package is not necessarily pip-installed in the venv).
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

EOS_ID = 2
BOS_ID = 1


# ---- session-wide cache ------------------------------------------------------------------------
SEED_VAR = "LLAMANB_TEST_SEED_CACHE"


def seed_session_cache(path: Path) -> list[str]:
    """Copy into the session's cache, from the cache $LLAMANB_TEST_SEED_CACHE names (`make test`
    names the one `make warm` just filled), what every session would otherwise make again: the
    embedded model's converted entry (~9 s) and the cpu kernels' builds (~11 s each). Only entries
    keyed to the current model file and kernel sources are taken -- the keys hash those, so a
    stale entry has another name -- and they are copied: the seed is read, never written. Returns
    the names copied."""
    seed = os.environ.get(SEED_VAR)
    if not seed or not Path(seed).is_dir():
        return []
    import shutil

    from llamanb.platform import cxx_build
    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.io.store import default_model_path, finished_entry

    copied = []
    # the model's digest is remembered in the session's cache (the seed is never written), where
    # the session's first load finds it
    entry = finished_entry(Path(seed), default_model_path(), memo_root=path)
    if entry is not None:
        shutil.copytree(entry, path / entry.name)
        copied.append(entry.name)
    cxx, _ = cxx_build.compiler()
    # native and every flavour the kernel tests build (extra_builds; `make warm-test` builds them),
    # so that each pytest-xdist worker copies them instead of compiling them again
    for name in () if cxx is None else ("native", "portable", *cpu_kernels.EMULATED):
        key = cxx_build.build_key(cxx, cpu_kernels.KERNELS_DIR, cpu_kernels.flavour_flags(name))
        lib = Path(seed) / "cpu" / cxx_build.library_name("cpu-kernels", key)
        record = cxx_build.record_path(lib)
        if lib.is_file() and record.is_file():        # a library is used only with its record
            (path / "cpu").mkdir(exist_ok=True)
            shutil.copy2(lib, path / "cpu" / lib.name)
            shutil.copy2(record, path / "cpu" / record.name)
            copied.append(f"cpu/{lib.name}")
    return copied


@pytest.fixture(scope="session", autouse=True)
def llamanb_cache(tmp_path_factory) -> Path:
    """LLAMANB_CACHE points at a fresh per-session directory for every test (and subprocess that
    inherits the environment), so the user's ~/.cache/llamanb is never written (and read only as
    the seed, above, when make test names it)."""
    path = tmp_path_factory.mktemp("llamanb_cache")
    seed_session_cache(path)
    old = os.environ.get("LLAMANB_CACHE")
    os.environ["LLAMANB_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("LLAMANB_CACHE", None)
    else:
        os.environ["LLAMANB_CACHE"] = old


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    """A private, empty LLAMANB_CACHE for one test (for tests that inspect the cache contents)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("LLAMANB_CACHE", str(path))
    return path


@pytest.fixture(scope="session")
def smollm(llamanb_cache):
    """The embedded SmolLM2-135M-Instruct GGUF, converted once into the session cache."""
    from llamanb.io.store import load_model

    return load_model(None)


@pytest.fixture(scope="session")
def smollm_engine(smollm):
    from llamanb.engine.engine import Engine

    return Engine(smollm)


@pytest.fixture(scope="session")
def smollm_gguf_path():
    from llamanb.io.store import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def smollm_reader(smollm_gguf_path):
    """The embedded GGUF opened with the gguf package's own reader (slow: ~8 s, once)."""
    import gguf

    return gguf.GGUFReader(str(smollm_gguf_path))


@pytest.fixture(scope="session")
def shared_reference() -> Path:
    assert (REFERENCE_DIR / "hf_smollm2_reference.json").is_file(), f"{REFERENCE_DIR} is incomplete"
    return REFERENCE_DIR


@pytest.fixture(scope="session")
def reference_data(shared_reference) -> dict:
    return json.loads((shared_reference / "hf_smollm2_reference.json").read_text())


# ---- tiny random HF checkpoints ----------------------------------------------------------------
TINY_HIDDEN = 96          # a multiple of every head count used (HF checks it)
TINY_HEAD_DIM = 16
TINY_FFN = 128
TINY_VOCAB = 272
TINY_LAYERS = 2


def tiny_tokenizer_json(vocab: int) -> str:
    """A word-level tokenizer over the words w3 .. w{vocab-1}, plus <unk> <s> </s> = 0, 1, 2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = {"<unk>": 0, "<s>": BOS_ID, "</s>": EOS_ID}
    words.update({f"w{i}": i for i in range(3, vocab)})
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return tok.to_str()


def tiny_text(ids) -> str:
    """Text that the tiny tokenizer encodes to exactly `ids` (all >= 3)."""
    return " ".join(f"w{int(i)}" for i in ids)


def make_tiny_checkpoint(directory, *, n_heads: int, n_kv_heads: int, tie: bool,
                         rope_scaling: dict | None = None, seed: int = 0,
                         max_position_embeddings: int = 256, n_layers: int = TINY_LAYERS,
                         init_std: float = 0.1, hidden: int = TINY_HIDDEN, ffn: int = TINY_FFN):
    """Build a random transformers LlamaForCausalLM, save it (safetensors) with a tokenizer.json
    into `directory`, and return the HF model (float32, eval mode).

    init_std is larger than HF's default 0.02 so that attention is far from uniform and RoPE,
    GQA grouping and the norms all visibly shape the logits."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    kwargs = {}
    if rope_scaling is not None:
        kwargs["rope_scaling"] = dict(rope_scaling)
    cfg = LlamaConfig(
        vocab_size=TINY_VOCAB, hidden_size=hidden, intermediate_size=ffn,
        num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
        head_dim=TINY_HEAD_DIM, max_position_embeddings=max_position_embeddings,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=tie, bos_token_id=BOS_ID,
        eos_token_id=EOS_ID, initializer_range=init_std, attention_bias=False, mlp_bias=False,
        **kwargs)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(torch.rand_like(p) + 0.5)          # uniform [0.5, 1.5): not all ones
            else:
                p.copy_(torch.randn_like(p) * init_std)
    model.eval()
    model.save_pretrained(directory, safe_serialization=True)
    (directory / "tokenizer.json").write_text(tiny_tokenizer_json(TINY_VOCAB))
    return model


@pytest.fixture
def make_tiny():
    return make_tiny_checkpoint


def hf_logits(model, ids) -> np.ndarray:
    """All-position logits [S, V] of an HF causal LM for one sequence, float32 numpy."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([list(map(int, ids))], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()


# ---- subprocess helper for the CLI -------------------------------------------------------------
def run_cli(args, *, cache: Path, timeout: float = 300, extra_env: dict | None = None):
    import subprocess

    env = dict(os.environ)
    env["LLAMANB_CACHE"] = str(cache)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("LLAMANB_MODEL", None)
    env.setdefault("OMP_NUM_THREADS", "2")
    # the reference engine unless a test asks otherwise: `auto` would compile the cpu backend's
    # kernels into each test's fresh cache (tests/test_cli.py checks `auto` itself)
    env.setdefault("LLAMANB_BACKEND", "numpy")
    if extra_env:
        env.update(extra_env)
    return subprocess.run([sys.executable, "-m", "llamanb", *map(str, args)], cwd=str(REPO_ROOT),
                          env=env, capture_output=True, text=True, timeout=timeout)


# CPython's warning filters in a fresh interpreter started without -W or PYTHONWARNINGS (what
# `python -m llamanb` runs under), most specific first, as warnings.filters lists them.
_FRESH_INTERPRETER_WARNING_FILTERS = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, None),
    ("ignore", PendingDeprecationWarning, None),
    ("ignore", ImportWarning, None),
    ("ignore", ResourceWarning, None),
)


def run_cli_here(args, *, cache: Path, extra_env: dict | None = None):
    """`python -m llamanb ARGS` without starting a Python: the entry point that llamanb/__main__.py
    calls, llamanb.cli.main(argv), run in this process under run_cli's environment (and working
    directory), with what it writes to stdout / stderr captured as a child's would be (UTF-8,
    strict on stdout, backslashreplace on stderr; a warning is printed to stderr as a fresh
    interpreter would print it; what reaches file descriptors 1 and 2 directly, from C code or a
    child process, follows the Python text) and its exit status as `sys.exit(main())` gives it:
    main's return value, a SystemExit's code (argparse: 2 for bad input, 0 for --help), or 1 with
    the traceback on stderr for any other exception -- so a test's "exit 2, one line, no
    traceback" checks the same things as against the child. Everything it changes (environment,
    cwd, streams and descriptors 1 and 2, warning filters) is put back afterwards.

    It saves a process start and llamanb's imports per call (0.6 s and more on 2 cores); the
    process boundary itself (argv bytes, stdin, signals, a fresh interpreter's caches) is checked
    by the tests that still use run_cli / subprocess."""
    import ctypes
    import io
    import tempfile
    import traceback
    import warnings

    from llamanb.cli import main

    env = {"LLAMANB_CACHE": str(cache), "LLAMANB_MODEL": None}
    env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "2")
    env["LLAMANB_BACKEND"] = os.environ.get("LLAMANB_BACKEND", "numpy")
    # argparse wraps --help to the terminal's width: a child whose stdout is a pipe gets 80 columns
    env["COLUMNS"] = os.environ.get("COLUMNS", "80")
    env["LINES"] = os.environ.get("LINES", "24")
    env.update(extra_env or {})
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cwd = os.getcwd()
    saved_streams = sys.stdout, sys.stderr
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    # what reaches file descriptors 1 and 2 directly (C code, a compiler or other child the
    # command starts) is captured too: a child's pipe would hold it
    fd_files = {fd: tempfile.TemporaryFile() for fd in (1, 2)}
    saved_fds = {}
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="backslashreplace",
                           write_through=True)

    def show(message, category, filename, lineno, file=None, line=None):
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.chdir(REPO_ROOT)
        for fd, f in fd_files.items():
            saved_fds[fd] = os.dup(fd)
            os.dup2(f.fileno(), fd)
        sys.stdout, sys.stderr = out, err
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(_FRESH_INTERPRETER_WARNING_FILTERS):
                warnings.filterwarnings(action, category=category, module=module or "")
            warnings.showwarning = show
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:
                code = e.code
            except Exception:                      # noqa: BLE001 -- the child would print it
                traceback.print_exc(file=err)
                code = 1
        if code is None:
            code = 0
        elif not isinstance(code, int):            # sys.exit("text"): printed, status 1
            print(code, file=err)
            code = 1
        out.flush()
        err.flush()
    finally:
        sys.stdout, sys.stderr = saved_streams
        try:
            ctypes.CDLL(None).fflush(None)         # C stdio buffers, before the descriptors move
        except (OSError, AttributeError):
            pass
        for fd, saved in saved_fds.items():
            os.dup2(saved, fd)
            os.close(saved)
        os.chdir(saved_cwd)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for f, b in ((fd_files[1], out_bytes), (fd_files[2], err_bytes)):
        f.seek(0)
        raw = f.read()
        f.close()
        b.write(raw.decode("utf-8", "backslashreplace").encode("utf-8"))   # after the Python text
    text = lambda b: b.getvalue().decode("utf-8").replace("\r\n", "\n")   # noqa: E731 (text=True)
    import subprocess

    return subprocess.CompletedProcess(["llamanb", *map(str, args)], code, text(out_bytes),
                                       text(err_bytes))


# ---- tiny GGUF files, written with the `gguf` package --------------------------------------------
def llamacpp_permute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF half-split Q/K rows -> llama.cpp's interleaved order, by explicit index arithmetic:
    within head h (d_h rows), GGUF row 2j + t holds HF row t * d_h/2 + j (t in {0, 1})."""
    rows = w.shape[0]
    d = rows // n_heads
    src = np.empty(rows, dtype=np.int64)
    for h in range(n_heads):
        for j in range(d // 2):
            for t in range(2):
                src[h * d + 2 * j + t] = h * d + t * (d // 2) + j
    return w[src]


def _byte_level_vocab(vocab: int) -> tuple[list[str], list[str]]:
    """Specials, the 256 byte-level symbols, then two-symbol tokens each with its BPE merge."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = ["<unk>", "<s>", "</s>"] + alphabet
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    merges = []
    for a in letters:
        for b in letters:
            if len(tokens) >= vocab:
                break
            tokens.append(a + b)
            merges.append(f"{a} {b}")
    assert len(tokens) == vocab, "vocab too small for the byte-level alphabet"
    return tokens, merges


def write_tiny_gguf(path, hf_model, *, qtype: str = "F32", raw_override: dict | None = None,
                    architecture: str = "llama", with_merges: bool = True) -> dict:
    """Write an HF LlamaForCausalLM as a llama GGUF (Q/K rows permuted the llama.cpp way).

    2-D weights are stored as `qtype` (quantised with gguf.quants.quantize), norms as F32.
    raw_override: {gguf tensor name: (GGMLQuantizationType, raw uint8 bytes [rows, bytes])}.
    Returns {hf name: float32 array the file really holds, in HF layout} (after quantisation)."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    cfg = hf_model.config
    n_heads, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    state = {k: v.detach().float().numpy() for k, v in hf_model.state_dict().items()}
    tied = bool(cfg.tie_word_embeddings)
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny-gguf")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    tokens, merges = _byte_level_vocab(cfg.vocab_size)
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    if with_merges:
        w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not tied:
        names["lm_head.weight"] = "output.weight"
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                 "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(cfg.num_hidden_layers):
        for hf_part, gg in per_layer.items():
            names[f"model.layers.{i}.{hf_part}.weight"] = f"blk.{i}.{gg}.weight"

    stored = {}
    raw_override = raw_override or {}
    for hf_name, gg_name in names.items():
        a = state[hf_name]
        if hf_name.endswith("q_proj.weight"):
            a = llamacpp_permute_rows(a, n_heads)
        elif hf_name.endswith("k_proj.weight"):
            a = llamacpp_permute_rows(a, n_kv)
        if gg_name in raw_override:
            qt, raw = raw_override[gg_name]
            w.add_tensor(gg_name, raw, raw_dtype=qt)
            continue
        if a.ndim == 2 and qtype != "F32":
            qt = Q[qtype]
            q = gguf.quants.quantize(a, qt)
            w.add_tensor(gg_name, q, raw_dtype=qt)
            back = gguf.quants.dequantize(q, qt).astype(np.float32).reshape(a.shape)
        else:
            w.add_tensor(gg_name, a.astype(np.float32))
            back = a.astype(np.float32)
        # stored in HF layout: undo our own permutation by inverting the index map
        if hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            nh = n_heads if "q_proj" in hf_name else n_kv
            inv = np.argsort(llamacpp_permute_rows(np.arange(a.shape[0])[:, None], nh)[:, 0])
            back = back[inv]
        stored[hf_name] = back
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


@pytest.fixture(scope="module")
def kernels():
    """The compiled cpu kernels (llamanb.cpu.kernels), built once per module; skipped
    where no C++ compiler is found."""
    from llamanb.cpu import kernels as cpu_kernels

    from llamanb.platform import cxx_build as hostbuild

    if hostbuild.compiler()[0] is None:                 # no compiler here: nothing to test
        pytest.skip("no C++ compiler")
    return cpu_kernels.load()             # a compiler that fails on the sources fails the tests


# ---- the release gate's rule (tests/check/test_reference_gate.py; the cpu backend reuses it) ----
# Both sides run float32 on bit-identical dequantised weights (tests/io/test_gguf.py), so the only
# difference is float32 rounding/accumulation order (numpy/OpenBLAS vs torch) through 30 layers.
# Measured on this machine: max |diff| of the reference's top-5 logits at the first step is 3.8e-5
# (over the 8 cases; 'capital'); over every compared step 5.2e-5 ('french'). Logits are O(10..30), so float32
# round-off alone is ~1e-6 relative per op; 1e-3 leaves a 20x+ margin while still catching any
# real error (a wrong RoPE, norm or head changes these logits by 0.1 or more).
FIRST_STEP_TOP5_ATOL = 1e-3
ALL_STEPS_TOP5_ATOL = 2e-3


def greedy_walk(engine, prompt_ids, ref_ids, ref_top5):
    """Decode greedily for len(ref_ids) steps with the one greedy loop (llamanb.check.greedy).

    Returns (ours, our_top5_per_step, logits_per_step), cut after the first divergence."""
    from llamanb.check.greedy import engine_greedy

    run = engine_greedy(engine, prompt_ids, len(ref_ids), k=5, keep_logits=True)
    n = next((i + 1 for i, (a, b) in enumerate(zip(run.ids, ref_ids)) if a != b), len(run.ids))
    return run.ids[:n], run.top_ids[:n], run.logits[:n]


def extra_builds(native) -> dict:
    """The builds of the cpu kernels the tests run besides `native` (flavour name -> whether this
    machine runs it): portable always; the AVX-512 paths through SIMDe where the native build is
    not AVX-512 already; the 256-bit vpdpbusd through SIMDe where the native build has no VNNI.
    An emulated flavour also needs an AVX2 CPU and a compiler that targets it. `make warm-test`
    builds them into the cache the tests are seeded from."""
    from llamanb.cpu import kernels as cpu_kernels

    def runs(name):
        return not cpu_kernels.missing_here(name) and cpu_kernels.target_macros(name) is not None

    return {"portable": True,
            cpu_kernels.EMULATED_AVX512: native.vector_width != 16 and runs(cpu_kernels.EMULATED_AVX512),
            cpu_kernels.EMULATED_VNNI256: (native.vector_width != 16 and not native.dpbusd_bits
                                           and runs(cpu_kernels.EMULATED_VNNI256))}


def warm_test_builds() -> list[str]:
    """Build extra_builds' flavours into $LLAMANB_CACHE (`make warm-test`); their names."""
    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.cpu.readiness import cpu_compiler_missing

    if cpu_compiler_missing():
        return []
    wanted = [n for n, ok in extra_builds(cpu_kernels.load()).items() if ok]
    for name in wanted:
        cpu_kernels.load(flavour_name=name)
    return wanted


def _build(native, name):
    from llamanb.cpu import kernels as cpu_kernels

    return cpu_kernels.load(flavour_name=name) if extra_builds(native)[name] else None


@pytest.fixture(scope="module")
def portable_kernels(kernels):
    """The cpu kernels built for plain x86-64 (no AVX): the portable flavour."""
    return _build(kernels, "portable")


@pytest.fixture(scope="module")
def emulated_kernels(kernels):
    """The AVX-512 paths where this CPU cannot run them itself: the avx512-simde flavour (an AVX2
    build with every _mm512 intrinsic carried out by SIMDe; `make test` installs Debian's
    libsimde-dev). None where the native build is AVX-512 already, or the CPU lacks AVX2."""
    from llamanb.cpu.kernels import EMULATED_AVX512

    return _build(kernels, EMULATED_AVX512)


@pytest.fixture(scope="module")
def vnni256_kernels(kernels):
    """The AVX2 kernels with the 256-bit vpdpbusd where this CPU has no VNNI: the vnni256-simde
    flavour (SIMDe's simde_mm256_dpbusd_epi32). None where the native build takes vpdpbusd
    already, or is AVX-512, or the CPU lacks AVX2."""
    from llamanb.cpu.kernels import EMULATED_VNNI256

    return _build(kernels, EMULATED_VNNI256)


@pytest.fixture(scope="module")
def kernel_builds(kernels, portable_kernels, emulated_kernels, vnni256_kernels):
    """Every build of the cpu kernels this machine runs: native, portable, the AVX-512 paths
    (natively, or emulated through SIMDe on an AVX2 CPU) and the 256-bit vpdpbusd (emulated where
    the CPU has no VNNI)."""
    return [k for k in (kernels, portable_kernels, emulated_kernels, vnni256_kernels)
            if k is not None]

"""What the cpu backend keeps resident: the panels the decode streams, and little beside them.

The peak RSS of a child process that loads SmolLM2 and prefills the benchmark's 512-token prompt
is checked against the bytes it must hold (its panels, the KV cache of 512 positions, the step's
activations) plus a fixed allowance; the embedding is read without mapping its file's pages in;
the tokenizer is read only when asked for."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

LINUX = sys.platform.startswith("linux")
MB = 1e6


def _present_pages(a: np.ndarray) -> int:
    """Pages of a's memory mapped into this process now (/proc/self/pagemap bit 63)."""
    page = 4096
    start = a.__array_interface__["data"][0]
    lo, hi = start // page, -(-(start + a.nbytes) // page)
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(lo * 8)
        entries = np.frombuffer(f.read((hi - lo) * 8), dtype="<u8")
    return int(np.count_nonzero(entries >> np.uint64(63)))


@pytest.mark.skipif(not LINUX, reason="/proc/self/pagemap: Linux")
def test_file_rows_read_rows_without_mapping_them(tmp_path):
    """FileRows reads a file-mapped array's rows as indexing does, and maps none of its pages;
    indexing through the mapping maps at least the rows' own pages (the read-around more)."""
    from llamanb.cpu.backend import FileRows

    rows, cols = 8192, 576                              # 18.9 MB, 2,304-byte rows
    data = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    (tmp_path / "w.bin").write_bytes(b"\0" * 128 + data.tobytes())
    mapped = np.memmap(tmp_path / "w.bin", dtype=np.uint8, mode="r").view(np.ndarray)
    table = mapped[128:].view(np.float32).reshape(rows, cols)     # a view, as the store's are
    ids = np.random.default_rng(1).integers(0, rows, 300)
    fr = FileRows.of(table)
    assert fr is not None
    got = fr[ids]
    assert np.array_equal(got, data[ids]) and got.dtype == np.float32
    for one in ([ids[0]], [rows - 1], np.array([0])):             # a decode step's one row
        assert np.array_equal(fr[one], data[one]) and fr[one].shape == (1, cols)
    assert fr[[]].shape == (0, cols)
    assert _present_pages(table) == 0                             # read, never mapped
    assert np.array_equal(table[ids], data[ids])
    assert _present_pages(table) >= len(np.unique(ids))           # the mapping: a page a row at least
    assert FileRows.of(data) is None                              # not file-mapped: index it
    with pytest.raises(IndexError):
        fr[[rows]]
    with pytest.raises(IndexError):
        fr[[-1]]


@pytest.mark.skipif(not LINUX, reason="/proc/self/pagemap: Linux")
@pytest.mark.parametrize("dtype", ["float32", "bf16", "q4_1"])
def test_cpu_embed_is_the_cache_rows_and_maps_none(smollm, kernels, dtype):
    """The backend's embedding rows are the cache's float32 rows (bf16: rounded to bfloat16, as
    to_bf16 rounds them), and embedding a prompt maps none of the table's pages."""
    from llamanb.cpu.backend import release_pages
    from llamanb.engine.engine import Engine
    from llamanb.model.numerics import to_bf16

    b = Engine(smollm, "cpu", dtype=dtype).backend
    table = smollm.weights.embed
    ids = np.random.default_rng(2).integers(0, smollm.config.vocab, 200)
    release_pages(table)                      # other tests may have read it through the mapping
    assert _present_pages(table) == 0
    got = b.embed(ids)
    assert _present_pages(table) == 0
    want = np.array(table[ids], dtype=np.float32)
    assert np.array_equal(got, to_bf16(want) if dtype == "bf16" else want)


def test_tokenizer_is_read_at_first_use(smollm):
    """load_model leaves the tokenizer unread; the first use reads it, once."""
    from llamanb.io.store import load_model
    from llamanb.model.tokenizer import ChatTokenizer

    m = load_model(None)
    assert not isinstance(m._tokenizer, ChatTokenizer)
    tok = m.tokenizer
    assert isinstance(tok, ChatTokenizer) and m.tokenizer is tok
    assert tok.encode("Hello") == smollm.tokenizer.encode("Hello")


# The child: the bench child's work (bench.runners.LlamanbRunner), reporting its resident memory
# after its imports and kernels (`base`), and its high-water mark after a 512-token prefill.
CHILD = r"""
import json, sys
def kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
import numpy as np
from llamanb.bench.runners import LlamanbRunner
from llamanb.cpu import kernels
kernels.load()
base = kb("VmRSS")
ids, dtype = json.loads(sys.argv[1]), sys.argv[2]
r = LlamanbRunner(None, "cpu:" + dtype)
b = r.engine.backend
r.prefill(ids)
print(json.dumps({"base": base, "hwm": kb("VmHWM"), "arena": b.arena._buf.nbytes,
                  "kv_per_position": r.info["kv_bytes_per_position"]}))
"""


@pytest.mark.skipif(not LINUX, reason="VmHWM: Linux")
@pytest.mark.parametrize("dtype", ["q4_1", "bf16"])
def test_peak_rss_is_the_panels_kv_and_activations(smollm, kernels, dtype):
    """A process that loads SmolLM2 on the cpu backend and prefills 512 tokens peaks at most at
    what it must hold beyond its interpreter and imports: the panels' arena (rounded up to 2 MiB
    huge pages, one more for its alignment), the KV cache of 512 positions, the step's float32
    activations (x, q|k|v, attention out, gate|up, silu: R (3 H + Q + 3 F) floats), and 24 MiB
    for the rest (the kernels' threads and code, the GGUF index). Before the embedding was read
    by pread and the tokenizer at first use, a q4_1 run took 51 MB more: 28 MB of the mapped
    embedding's read-around and 30 MB of tokenizer (2-core EPYC)."""
    from llamanb.bench.runners import prompt_ids

    c = smollm.config
    ids = prompt_ids(smollm.tokenizer, 512, c.vocab)           # 105 distinct tokens, scattered
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(ids), dtype],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    huge = 2 << 20
    panels = (-(-got["arena"] // huge) + 1) * huge
    kv = got["kv_per_position"] * len(ids)
    Q = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim
    acts = 4 * len(ids) * (3 * c.hidden + Q + 3 * c.ffn)
    allowance = panels + kv + acts + (24 << 20)
    used = got["hwm"] - got["base"]
    assert used <= allowance, (f"peak {got['hwm'] / MB:.1f} MB, {used / MB:.1f} MB beyond the "
                               f"interpreter and imports; allowed {allowance / MB:.1f} MB "
                               f"(panels {panels / MB:.1f}, KV {kv / MB:.1f}, activations "
                               f"{acts / MB:.1f}, 24 MiB)")

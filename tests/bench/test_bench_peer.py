"""The bench's reports and its llama.cpp peer (llamanb.bench): the ratio rows and their targets,
the peer interpreter's one-line failure, the GGUF files llama.cpp is measured on, and the memory
bandwidth probe the roofline divides by."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from llamanb.errors import LlamanbError

def test_roofline_targets_by_precision():
    """Decode against its own roofline: at least 90 % at fp32 and bf16, 80 % at q4_1 (and auto,
    the file's own blocks), each row deciding PASS / MISS against its own precision's target --
    0.85 of the roofline passes q4_1 and misses fp32 and bf16."""
    from llamanb.bench.report import ratios

    eng = {"llamanb": {"decode_tok_s": 1.0, "prefill_128_tok_s": 1.0, "prefill_512_tok_s": 1.0}}
    for b in ("cpu", "cpu:bf16", "cpu:q4_1", "cpu:auto"):
        # 100 MB a token at 40 GB/s: a 400 tok/s roofline, run at 340 tok/s (0.85) in 7 rounds
        eng[f"llamanb@{b}"] = {"decode_tok_s": 340.0, "prefill_128_tok_s": 1.0,
                               "prefill_512_tok_s": 1.0, "weight_bytes": 100e6,
                               "samples_tok_s": {"decode": [340.0] * 7}, "round_gb_s": [40.0] * 7}
    rows = ratios(eng, roofline=60.0, gb_s=40.0)
    got = {r["name"].split(" decode / its roofline")[0]: (r["target"], r["pass"]) for r in rows
           if "its roofline" in r["name"]}
    assert got == {"cpu": (0.90, False), "cpu:bf16": (0.90, False), "cpu:q4_1": (0.80, True),
                   "cpu:auto": (0.80, True)}
    assert all(abs(r["value"] - 0.85) < 1e-12 for r in rows if "its roofline" in r["name"])


def test_bench_ratios_against_llamacpp_and_roofline():
    """`bench --backend cpu`: each precision against llama.cpp at the same precision, and decode
    against its own roofline (bandwidth / the bytes it reads per token: bf16 reads half)."""
    from llamanb.bench.report import ratios

    eng = {"llamanb": {"decode_tok_s": 40.0, "prefill_128_tok_s": 400.0,
                       "prefill_512_tok_s": 500.0, "weight_bytes": 500e6},
           "llamanb@cpu": {"decode_tok_s": 60.0, "prefill_128_tok_s": 400.0,
                           "prefill_512_tok_s": 400.0, "weight_bytes": 500e6},
           "llamanb@cpu:bf16": {"decode_tok_s": 100.0, "prefill_128_tok_s": 400.0,
                                "prefill_512_tok_s": 300.0, "weight_bytes": 250e6},
           "llamacpp_f32": {"decode_tok_s": 50.0, "prefill_512_tok_s": 500.0},
           "llamacpp_bf16": {"decode_tok_s": 125.0, "prefill_512_tok_s": 250.0}}
    rows = {r["name"]: r for r in ratios(eng, roofline=60.0, gb_s=40.0)}
    f32 = rows["cpu decode / llama.cpp F32 decode"]
    assert (f32["value"], f32["target"], f32["pass"]) == (1.2, 1.0, True)
    bf = rows["cpu:bf16 decode / llama.cpp BF16 decode"]
    assert (bf["value"], bf["pass"]) == (0.8, False)
    assert rows["cpu prefill_512 / llama.cpp F32 prefill_512"]["value"] == 0.8
    bp = rows["cpu:bf16 prefill_512 / llama.cpp BF16 prefill_512"]
    assert (bp["value"], bp["target"], bp["pass"]) == (1.2, 1.0, True)
    assert rows["cpu decode / its roofline (40.0 GB/s / 500 MB read)"]["value"] == 60.0 / 80.0
    assert rows["cpu:bf16 decode / its roofline (40.0 GB/s / 250 MB read)"]["value"] == 100.0 / 160.0
    assert rows["cpu prefill_512 / numpy fp32 prefill_512"]["value"] == 0.8
    # with the cached keys and values each reads a token: its own bytes per position (float32
    # for the cpu engines, F16 for llama.cpp) times the mean positions a timed step attends over
    for e, per_pos in (("llamanb@cpu", 46080), ("llamanb@cpu:bf16", 46080), ("llamacpp_bf16", 23040)):
        eng[e]["kv_bytes_per_position"] = per_pos
    rows = {r["name"]: r for r in ratios(eng, roofline=60.0, gb_s=40.0, kv_positions=160.5)}
    f32_read, bf_read = 500e6 + 46080 * 160.5, 250e6 + 46080 * 160.5
    assert rows["cpu decode / its roofline (40.0 GB/s / 507 MB read)"]["value"] == 60.0 / (40e9 / f32_read)
    assert rows["cpu:bf16 decode / its roofline (40.0 GB/s / 257 MB read)"]["value"] == 100.0 / (40e9 / bf_read)
    peer = rows["llama.cpp BF16 decode / roofline (40.0 GB/s / 254 MB read)"]
    assert peer["value"] == 125.0 / (40e9 / (250e6 + 23040 * 160.5))
    # peak RSS against llama.cpp's at the same precision: at most 1.1x (lower is better)
    for e, mb in (("llamanb@cpu", 660.0), ("llamacpp_f32", 650.0), ("llamanb@cpu:bf16", 430.0),
                  ("llamacpp_bf16", 380.0)):
        eng[e]["peak_rss_mb"] = mb
    rows = {r["name"]: r for r in ratios(eng, roofline=60.0, gb_s=40.0)}
    f32 = rows["cpu peak RSS / llama.cpp F32 peak RSS"]
    assert (f32["value"], f32["target"], f32["pass"]) == (660.0 / 650.0, 1.1, True)
    bf = rows["cpu:bf16 peak RSS / llama.cpp BF16 peak RSS"]
    assert (bf["value"], bf["pass"]) == (430.0 / 380.0, False)


def test_roofline_pairs_each_round_with_its_own_bandwidth_probe():
    """A shared machine's bandwidth drifts over a run: given the probes around an engine's turn
    in each timed round (`round_gb_s`), decode / roofline is a paired sample per round (that
    round's rate over the roofline of those probes), and its target is decided by their lower
    quartile, as between engines."""
    import statistics

    from llamanb.bench.report import ratios

    dec = [40.0, 44.0, 38.0, 41.0, 45.0, 39.0, 42.0]                  # tok/s, 7 rounds
    gbs = [20.0, 22.0, 19.0, 20.5, 22.5, 19.5, 21.0]                  # GB/s the same rounds
    eng = {"llamanb": {"decode_tok_s": 30.0, "prefill_128_tok_s": 1.0, "prefill_512_tok_s": 1.0},
           "llamanb@cpu": {"decode_tok_s": statistics.median(dec), "prefill_128_tok_s": 1.0,
                           "prefill_512_tok_s": 1.0, "weight_bytes": 500e6,
                           "samples_tok_s": {"decode": dec}, "round_gb_s": gbs}}
    row = next(r for r in ratios(eng, 60.0, gb_s=30.0)
               if r["name"].startswith("cpu decode / its roofline"))
    want = sorted(d * 500e6 / (g * 1e9) for d, g in zip(dec, gbs))   # each 1.0: tracks the probe
    assert row["spread"]["min"] == want[0] and row["spread"]["max"] == want[-1]
    assert row["pass"] is True and "19.0-22.5 GB/s, probed around each turn" in row["name"]
    # llama.cpp's row (no target) is paired with the probes around its own turns, round by round
    eng["llamacpp_f32"] = {"decode_tok_s": statistics.median(dec), "prefill_512_tok_s": 1.0,
                           "samples_tok_s": {"decode": dec}, "round_gb_s": gbs}
    peer = next(r for r in ratios(eng, 60.0, gb_s=30.0)
                if r["name"].startswith("llama.cpp F32 decode / roofline"))
    assert "19.0-22.5 GB/s, probed around each turn" in peer["name"] and peer["pass"] is None
    assert peer["spread"]["min"] == want[0] and peer["spread"]["max"] == want[-1]
    del eng["llamacpp_f32"], eng["llamanb@cpu"]["round_gb_s"]
    # against the one probe before the rounds (30 GB/s) the same rates would read 0.67
    one = next(r for r in ratios(eng, 60.0, gb_s=30.0) if r["name"].startswith("cpu decode / its"))
    assert one["pass"] is False and abs(one["value"] - 41.0 * 500e6 / 30e9) < 1e-12


def test_each_turn_is_paired_with_the_probes_just_before_and_after_it():
    """run_rounds reads the memory at each round's start and after every engine's turn; an
    engine's bandwidth for a timed round is the mean of the two probes around its own turn
    (the order rotates every round), the warm-up's probes are not kept, and every probe of a
    timed round is."""
    from llamanb.bench.child import run_rounds

    calls = []

    class Fake:                                      # an engine process: ask("round") only
        def __init__(self, name, rate):
            self.name, self.rate = name, rate

        def ask(self, what):
            assert what == "round"
            calls.append(self.name)
            return {"prefill_128": 1.0, "prefill_512": 1.0, "decode": self.rate}, [1, 2]

    reads = iter(range(100))                         # probe k reads k GB/s
    procs = {"a": Fake("a", 10.0), "b": Fake("b", 20.0), "c": Fake("c", 30.0)}
    got = run_rounds(procs, 2, probe=lambda: float(next(reads)), settle=0.0)
    assert got["orders"] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    # warm-up probes 0..3; round 1: 4 (start) b 5 c 6 a 7; round 2: 8 c 9 a 10 b 11
    assert got["probes"] == [[4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0]]
    assert got["round_gb_s"] == {"a": [6.5, 9.5], "b": [4.5, 10.5], "c": [5.5, 8.5]}
    assert got["samples"]["c"]["decode"] == [30.0, 30.0]
    # without a probe nothing is read and no engine carries a bandwidth
    plain = run_rounds(procs, 1, settle=0.0)
    assert plain["probes"] == [] and plain["round_gb_s"] == {"a": [], "b": [], "c": []}


def test_peer_python_missing_is_one_line(monkeypatch):
    from llamanb.bench.peer import peer_python

    monkeypatch.delenv("LLAMANB_PEER_PYTHON", raising=False)
    with pytest.raises(LlamanbError, match="cannot import llama_cpp|does not run"):
        peer_python(sys.executable if __import__("importlib").util.find_spec("llama_cpp") is None
                    else "/nonexistent/python")


def test_peer_ggufs_rewrite_every_tensor_and_key(tmp_path):
    """make_ggufs (the files llama.cpp is measured on) on a small GGUF: every metadata key kept,
    2-D tensors in float32 / bfloat16 (nearest-even, checked with ml_dtypes), 1-D kept float32,
    the file type updated, and a second call rewrites nothing."""
    import ml_dtypes
    from gguf import GGUFReader, GGUFWriter

    from llamanb.bench.peer import make_ggufs

    rng = np.random.default_rng(0)
    mat, norm = rng.standard_normal((6, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    src = tmp_path / "tiny.gguf"
    w = GGUFWriter(str(src), "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_tensor("blk.0.ffn_down.weight", mat)
    w.add_tensor("blk.0.attn_norm.weight", norm)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    out = tmp_path / "peer"
    files = make_ggufs(src, out)
    for prec, path in files.items():
        r = GGUFReader(path)
        assert r.fields["llama.block_count"].contents() == 1
        assert r.fields["tokenizer.ggml.tokens"].contents() == ["a", "b", "c"]
        assert r.fields["general.file_type"].contents() == (0 if prec == "F32" else 32)
        t = {x.name: x for x in r.tensors}
        assert np.array_equal(np.asarray(t["blk.0.attn_norm.weight"].data), norm)
        got = np.asarray(t["blk.0.ffn_down.weight"].data)
        if prec == "BF16":
            got = got.view(np.uint16).reshape(mat.shape).view(ml_dtypes.bfloat16).astype(np.float32)
            assert np.array_equal(got, mat.astype(ml_dtypes.bfloat16).astype(np.float32))
        else:
            assert np.array_equal(got, mat)
    stamps = {p: p.stat().st_mtime_ns for p in files.values()}
    assert make_ggufs(src, out) == files
    assert {p: p.stat().st_mtime_ns for p in files.values()} == stamps      # cached
    assert sorted(p.suffix for p in out.iterdir()) == [".gguf", ".gguf"]     # no .tmp left


def test_bandwidth_probe_takes_the_kernels_streaming_sum(kernels):
    """The roofline's bandwidth is the best of every probe, the cpu kernels' own streaming read
    among them; that read sums what numpy sums."""
    from llamanb.bench.machine import memory_read_bandwidth

    a = np.random.default_rng(2).standard_normal(1 << 20).astype(np.float32)
    assert abs(kernels.read_sum(a) - float(a.astype(np.float64).sum())) < 1e-6 * np.abs(a).sum()
    bw = memory_read_bandwidth(nbytes=64 << 20, repeats=2, extra={"cpu sum": kernels.read_sum})
    meds = {n: m["median_gb_s"] for n, m in bw["methods"].items()}
    assert "cpu sum" in meds and len(meds) == 5
    assert bw["gb_s"] == max(meds.values()) and bw["best"] == max(meds, key=meds.get)


def test_q4_1_row_against_llamacpp_on_the_same_file(smollm_gguf_path, tmp_path):
    """The shipped GGUF's layers are Q4_1 (counted from its header by the gguf package's reader,
    independently of llamanb's own header parser): the bench then runs the cpu backend on those
    blocks beside llama.cpp on that very file, the ratio row pairs them, and llama.cpp's Q4_1
    roofline divides by the q4_1 engine's own bytes. A float32 file has no such row."""
    from gguf import GGUFReader, GGUFWriter

    from llamanb.bench.peer import source_quant
    from llamanb.bench.report import ratios

    kinds = {t.tensor_type.name for t in GGUFReader(str(smollm_gguf_path)).tensors
             if t.name.startswith("blk.") and len(t.shape) == 2}
    assert source_quant(smollm_gguf_path) == "Q4_1" == "".join(kinds)
    src = tmp_path / "tiny.gguf"
    w = GGUFWriter(str(src), "llama")
    w.add_tensor("blk.0.ffn_down.weight", np.ones((4, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    assert source_quant(src) is None and source_quant(tmp_path / "none.gguf") is None

    eng = {"llamanb": {"decode_tok_s": 40.0, "prefill_128_tok_s": 400.0,
                       "prefill_512_tok_s": 500.0, "weight_bytes": 500e6},
           "llamanb@cpu:q4_1": {"decode_tok_s": 150.0, "prefill_128_tok_s": 600.0,
                                "prefill_512_tok_s": 600.0, "weight_bytes": 100e6,
                                "samples_tok_s": {"decode": [150.0] * 7, "prefill_512": [600.0] * 7}},
           "llamacpp_q4_1": {"decode_tok_s": 200.0, "prefill_512_tok_s": 500.0,
                             "samples_tok_s": {"decode": [200.0] * 7, "prefill_512": [500.0] * 7}}}
    rows = {r["name"]: r for r in ratios(eng, roofline=60.0, gb_s=40.0)}
    q = rows["cpu:q4_1 decode / llama.cpp Q4_1 decode"]
    assert (q["value"], q["target"], q["pass"], q["spread"]["n"]) == (0.75, 1.0, False, 7)
    assert rows["llama.cpp Q4_1 decode / roofline (40.0 GB/s / 100 MB read)"]["value"] == 200.0 / 400.0


def test_file_row_for_other_formats_the_cpu_backend_runs_from_blocks(tmp_path, kernels):
    """A GGUF of other block formats (here Q4_0, written by the gguf package) that the cpu backend
    runs every matrix of from its blocks: the bench adds `cpu:auto` beside llama.cpp on the
    file itself, with its own decode target and no prefill target. One matrix in a format with no
    panels (Q5_1) and the file gets no such engine."""
    import gguf
    from conftest import make_tiny_checkpoint, write_tiny_gguf

    from llamanb.bench.peer import QUANT_PEERS, source_quant
    from llamanb.bench.report import CPU_PEER, ratios
    from llamanb.io.store import load_model

    hf = make_tiny_checkpoint(tmp_path / "hf", n_heads=8, n_kv_heads=2, tie=False, seed=3)
    write_tiny_gguf(tmp_path / "q4_0.gguf", hf, qtype="Q4_0")
    assert source_quant(tmp_path / "q4_0.gguf", load_model(tmp_path / "q4_0.gguf")) == "FILE"
    assert QUANT_PEERS["FILE"] == "auto" and CPU_PEER["cpu:auto"] == "llamacpp_file"
    down = hf.state_dict()["model.layers.0.mlp.down_proj.weight"].numpy()
    Q51 = gguf.GGMLQuantizationType.Q5_1
    write_tiny_gguf(tmp_path / "mixed.gguf", hf, qtype="Q4_0",
                    raw_override={"blk.0.ffn_down.weight": (Q51, gguf.quants.quantize(down, Q51))})
    assert source_quant(tmp_path / "mixed.gguf", load_model(tmp_path / "mixed.gguf")) is None

    eng = {"llamanb": {"decode_tok_s": 40.0, "prefill_128_tok_s": 400.0,
                       "prefill_512_tok_s": 500.0, "weight_bytes": 500e6},
           "llamanb@cpu:auto": {"decode_tok_s": 150.0, "prefill_128_tok_s": 600.0,
                                "prefill_512_tok_s": 600.0, "weight_bytes": 100e6,
                                "samples_tok_s": {"decode": [150.0] * 7, "prefill_512": [600.0] * 7}},
           "llamacpp_file": {"decode_tok_s": 100.0, "prefill_512_tok_s": 500.0, "weight_bytes": 80e6,
                             "samples_tok_s": {"decode": [100.0] * 7, "prefill_512": [500.0] * 7}}}
    rows = {r["name"]: r for r in ratios(eng, roofline=60.0, gb_s=40.0)}
    q = rows["cpu:auto decode / llama.cpp (the file's blocks) decode"]
    assert (q["value"], q["target"], q["pass"]) == (1.5, 1.0, True)
    assert rows["cpu:auto prefill_512 / llama.cpp (the file's blocks) prefill_512"]["target"] is None
    # llama.cpp's roofline divides by the bytes of the file's tensors, as it reports them
    assert rows["llama.cpp (the file's blocks) decode / roofline (40.0 GB/s / 80 MB read)"][
        "value"] == 100.0 / 500.0


def test_weights_read_alone_rows_pair_each_round():
    """A cpu engine that reports `weights_read` (its packed weights read alone, a second) gets
    two rows without a target: decode over that rate, and that rate over its roofline, each a
    paired sample per round (the second with the probes around the engine's turn); the rounds'
    extra rate is kept by run_rounds beside the three timed ones."""
    import statistics

    from llamanb.bench.child import run_rounds
    from llamanb.bench.report import ratios

    dec = [40.0, 44.0, 38.0, 41.0, 45.0, 39.0, 42.0]                  # tok/s, 7 rounds
    red = [50.0, 50.0, 40.0, 50.0, 50.0, 60.0, 50.0]                  # reads a second
    gbs = [20.0, 22.0, 19.0, 20.5, 22.5, 19.5, 21.0]
    eng = {"llamanb": {"decode_tok_s": 30.0, "prefill_128_tok_s": 1.0, "prefill_512_tok_s": 1.0},
           "llamanb@cpu": {"decode_tok_s": statistics.median(dec), "prefill_128_tok_s": 1.0,
                           "prefill_512_tok_s": 1.0, "weight_bytes": 500e6,
                           "weights_read_tok_s": statistics.median(red),
                           "samples_tok_s": {"decode": dec, "weights_read": red},
                           "round_gb_s": gbs}}
    rows = {r["name"]: r for r in ratios(eng, 60.0, gb_s=30.0)}
    alone = rows["cpu decode / its weights read alone"]
    assert alone["target"] is None and alone["pass"] is None
    assert alone["value"] == statistics.median(d / w for d, w in zip(dec, red))   # 0.84, not 41 / 50
    assert alone["spread"]["min"] == min(d / w for d, w in zip(dec, red))
    near = rows["cpu weights read alone / its roofline"]
    assert near["pass"] is None
    assert near["value"] == statistics.median(w * 500e6 / (g * 1e9) for w, g in zip(red, gbs))
    # an engine without the rate (the numpy engine, llama.cpp) has neither row
    del eng["llamanb@cpu"]["weights_read_tok_s"]
    assert not [r for r in ratios(eng, 60.0, gb_s=30.0) if "read alone" in r["name"]]

    class Fake:
        def ask(self, what):
            return {"prefill_128": 1.0, "prefill_512": 2.0, "decode": 3.0, "weights_read": 4.0}, []

    got = run_rounds({"a": Fake()}, 2, settle=0.0)
    assert got["samples"]["a"] == {"prefill_128": [1.0, 1.0], "prefill_512": [2.0, 2.0],
                                   "decode": [3.0, 3.0], "weights_read": [4.0, 4.0]}

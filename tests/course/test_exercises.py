"""The exercises' checkers: every one passes its solution (solutions/NN_name.py), fails a plausible
wrong answer with a message that names the mistake, and says "not attempted yet" for the stub.

The checkers compute their expected values from the finished code in llamanb (or closed-form
math); the solutions are written independently of it, so a solution passing is evidence for both.
The wrong answers below are the mistakes a reader is likely to make, one or more per exercise.
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from llamanb.course.exercises import CHAPTERS, chapter
from llamanb.course.exercises.check import NOT_ATTEMPTED, Case, Exercise, difference

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = {
    "ch01": "01_llama_math_numpy", "ch01b": "01b_prefill_flops", "ch02": "02_rope_einsum_tables",
    "ch03": "03_attention_masks", "ch03b": "03b_padded_prefill", "ch04": "04_kv_cache_growth",
    "ch04b": "04b_sampling", "ch04c": "04c_kv_cache_cost", "ch05": "05_npu_kernels",
    "ch05b": "05b_npu_tiles", "ch06": "06_elf_stitching",
    "ch07": "07_buffer_objects", "ch08": "08_tcp_mapping", "ch09": "09_galaxy_mesh",
    "ch10": "10_continuous_batching", "ch11": "11_cpu_kernels", "ch11b": "11b_quantised_weights",
    "ch12": "12_cuda_kernels",
    "ch13": "13_hardware_chat", "chA": "A_cost_models",
}


def solution_module(ch: str):
    path = ROOT / "solutions" / f"{SOLUTIONS[ch]}.py"
    spec = importlib.util.spec_from_file_location(f"solution_{ch}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ALL = [(ch, ex.name) for ch in CHAPTERS for ex in chapter(ch).EXERCISES]


def exercise(ch: str, name: str) -> Exercise:
    return next(ex for ex in chapter(ch).EXERCISES if ex.name == name)


def test_every_chapter_has_exercises_and_a_solution_file():
    assert set(SOLUTIONS) == set(CHAPTERS)
    for ch in CHAPTERS:
        exs = chapter(ch).EXERCISES
        assert 2 <= len(exs) <= 4, ch
        numbers = [ex.number for ex in exs]
        assert numbers == [f"{ch[2:]}.{i + 1}" for i in range(len(exs))], numbers
        assert (ROOT / "solutions" / f"{SOLUTIONS[ch]}.py").is_file()
        assert (ROOT / "notebooks" / f"{SOLUTIONS[ch]}.py").is_file()


@pytest.mark.parametrize("ch,name", ALL)
def test_solution_passes(ch, name):
    v = exercise(ch, name).verdict(getattr(solution_module(ch), name))
    assert v.passed, v.message
    assert v.message.startswith(f"{exercise(ch, name).number} {name}: passed, all ")


@pytest.mark.parametrize("ch,name", ALL)
def test_stub_is_not_attempted(ch, name):
    def stub(*args, **kwargs):
        raise NotImplementedError

    v = exercise(ch, name).verdict(stub)
    assert v.status == NOT_ATTEMPTED
    assert v.message == (f"{exercise(ch, name).number} {name}: not attempted yet (the function "
                         f"still raises NotImplementedError)")


@pytest.mark.parametrize("ch,name", ALL)
def test_every_exercise_has_cases_that_can_fail(ch, name):
    ex = exercise(ch, name)
    assert len(ex.cases()) >= 2
    v = ex.verdict(lambda *a, **k: None)           # returns nothing: must fail on case 1
    assert not v.passed and "FAILED on case 1/" in v.message


# ---- plausible wrong answers: (chapter, exercise, wrong function, words the message must hold) --
def _rms_no_eps(x, g, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True)) * g


def _rms_sum(x, g, eps):
    return x / np.sqrt(np.sum(x * x, -1, keepdims=True) + eps) * g


def _flops_full_attention(c, S):
    from llamanb.model import flops
    return flops.total(flops.prefill_flops(c, S, attention="full"))


def _flops_all_rows(c, S):
    from llamanb.model import flops
    return flops.total(flops.prefill_flops(c, S, lm_head_rows="all"))


def _decode_context_keys(c, ctx):                  # forgets that the new token attends to itself
    from llamanb.model import flops
    return flops.total(flops.decode_flops(c, ctx)) - 4 * c.n_layers * c.n_heads * c.head_dim


def _decode_flops_no_head(c, ctx):
    from llamanb.model import flops
    return flops.total(flops.decode_flops(c, ctx)) - 2 * c.hidden * c.vocab


def _inv_freq_all_dims(d, theta):
    return (theta ** (-np.arange(d) / d)).astype(np.float32)


def _inv_freq_wrong_step(d, theta):
    return (theta ** (-np.arange(d // 2) / d)).astype(np.float32)


def _table_textbook(p, f):
    a = np.asarray(p, np.float64)[:, None] * np.asarray(f, np.float64)
    c, s = np.cos(a), np.sin(a)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2).astype(np.float32)


def _apply_half_split(x, t):
    S, H, d = x.shape
    return np.einsum("shfi,sifo->shoi", x.reshape(S, H, 2, d // 2), t).reshape(S, H, d)


def _gqa_wrong_group(q, k):
    S, Nh, d = q.shape
    T, Nkv, _ = k.shape
    qg = q.reshape(S, Nh // Nkv, Nkv, d)                      # [S, G, N_kv, d]: head h -> h % N_kv
    return np.einsum("sgnd,tnd->ngst", qg, k) / np.sqrt(d)


def _gqa_unscaled(q, k):
    S, Nh, d = q.shape
    T, Nkv, _ = k.shape
    return np.einsum("sngd,tnd->ngst", q.reshape(S, Nkv, Nh // Nkv, d), k)


def _mask_no_offset(S, start):
    return np.where(np.tril(np.ones((S, S + start), bool)), 0, -np.inf).astype(np.float32)


def _append_reshape(kc, n0, kn):
    n = kn.shape[0]
    kc[:, n0:n0 + n] = kn.reshape(kc.shape[0], n, -1)
    return kc, n0 + n


def _append_forgets_length(kc, n0, kn):
    kc[:, n0:n0 + kn.shape[0]] = kn.transpose(1, 0, 2)
    return kc, n0


def _attention(q, kc, vc, length, rows, group_of):
    n_h, d = q.shape
    out = np.empty((n_h, d), np.float32)
    for h in range(n_h):
        keys, values = kc[group_of(h), :rows], vc[group_of(h), :rows]
        s_ = keys @ q[h] / np.sqrt(d)
        p = np.exp(s_ - s_.max())
        out[h] = p / p.sum() @ values
    return out.reshape(-1)


def _attention_whole_capacity(q, kc, vc, length):       # reads the empty rows past length too
    return _attention(q, kc, vc, length, kc.shape[1], lambda h: h // (q.shape[0] // kc.shape[0]))


def _attention_heads_interleaved(q, kc, vc, length):    # query head h -> KV head h % N_kv
    return _attention(q, kc, vc, length, length, lambda h: h % kc.shape[0])


def _max_batch_no_weights(c, seq, mem):                  # forgets that the weights are there first
    return mem // c.kv_bytes(seq, "bf16")


def _max_batch_negative(c, seq, mem):                    # no floor at 0 when the weights overflow
    return int((mem - c.weight_bytes("bf16")) // c.kv_bytes(seq, "bf16"))


def _bf16_truncate(x):                                   # drops the low bits: rounds toward zero
    return (np.asarray(x, np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)


def _bf16_ties_up(x):                                    # rounds half away from zero, not to even
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x8000) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def _merge_no_rescale(p1, p2):                           # adds sums taken relative to different maxima
    (m1, l1, a1), (m2, l2, a2) = p1, p2
    return np.maximum(m1, m2), l1 + l2, a1 + a2


def _top_p_excludes_crossing(logits, p):
    z = np.asarray(logits, np.float64)
    pr = np.exp(z - z.max())
    pr /= pr.sum()
    o = np.argsort(-pr)
    keep = np.zeros(pr.size, bool)
    keep[o[np.cumsum(pr[o]) <= p]] = True
    out = np.where(keep, pr, 0)
    return out / out.sum()


def _top_k_after_softmax_no_renorm(logits, t, k):   # filters the probabilities, never renormalises
    z = np.asarray(logits, np.float64) / t
    p = np.exp(z - z.max())
    p /= p.sum()
    return np.where(z >= np.sort(z)[-k], p, 0.0)


def _top_k_temperature_multiplied(logits, t, k):
    z = np.asarray(logits, np.float64) * t
    e = np.where(z >= np.sort(z)[-k], np.exp(z - z.max()), 0.0)
    return e / e.sum()


def _pad_counted_length(ids, length, pad_id):       # recovers the length by counting non-pad ids
    padded = np.array(list(ids) + [pad_id] * (length - len(ids)), dtype=np.int64)
    return padded, int(np.sum(padded != pad_id))


def _sum_numpy_pairwise(xs):
    return np.sum(np.asarray(xs, np.float32))


def _sum_float64(xs):
    return np.float32(sum(float(x) for x in xs))


def _tile_no_divisor(m, k, t):
    return min(m // t, 16384 // (2 * k))


def _l1_weights_only(tm, k):
    return 2 * tm * k


def _largest_single_buffered(m, k, t):       # forgets that ping-pong holds the fed buffers twice
    rows = m // t
    return next(x for x in range(rows, 0, -1) if rows % x == 0 and 2 * (x * k + k + x) <= 64512)


def _group_no_sharing(members):
    names, slots = [], []
    for lab, args, amap in members:
        sl = []
        for a in args:
            names.append(amap.get(a, f"{lab}_{a}"))
            sl.append(len(names) - 1)
        slots.append(sl)
    return names, slots


def _roles_written_is_intermediate(events, names):
    out = {}
    for g in names:
        roles = [r for ev in events for n, r in ev if n == g]
        out[g] = "intermediate" if "output" in roles else ("weight" if "weight" in roles else "input")
    return out


def _call_intermediates_back(sizes, roles, first):
    to = sum(n for n, r in zip(sizes, roles) if r == "input" or (first and r in ("weight", "intermediate")))
    back = sum(n for n, r in zip(sizes, roles) if r in ("output", "intermediate"))
    return 2 * to, 2 * back


def _call_weights_every_time(sizes, roles, first):
    to = sum(n for n, r in zip(sizes, roles) if r != "output")
    return 2 * to, 2 * sum(n for n, r in zip(sizes, roles) if r == "output")


def _decode_no_head(c):
    H, qd, kvd, L = c.hidden, c.q_dim, c.kv_dim, c.n_layers
    return 2 * L * ((H + qd + kvd) + (qd + H)), 2 * L * ((qd + 2 * kvd) + H)


def _prefill_alias_ignored(c, S, aliasing):
    from llamanb.npu import traffic
    d = traffic.prefill_bytes(c, S, aliasing=False)
    return d["to_device"], d["from_device"]


def _subscripts_first_letters(arg_axes, out_axes):
    j = lambda axes: "".join(a[0].lower() for a in axes)            # noqa: E731
    return ",".join(j(a) for a in arg_axes) + "->" + j(out_axes)


def _flops_output_only(arg_axes, out_axes, dims):
    return 2 * math.prod(dims[a] for a in out_axes)


def _rope_contract_r(q, t):
    return np.einsum("bihpf,iprf->bhipr", q, t)


def _traffic_ring_like_line(op, topo, n, B):
    steps = (n - 1) * (2 if op == "all_reduce" else 1)
    return steps, (B if op == "all_reduce" else (n - 1) / n * B)


def _traffic_line_all_reduce_doubled(op, topo, n, B):
    steps = (n - 1) * (2 if op == "all_reduce" else 1)
    one = (n - 1) / n * B / (2 if topo == "ring" else 1)
    return steps, 2 * one if op == "all_reduce" else one


def _bfp8_round_half_up(v):
    a = np.abs(v.astype(np.float64))
    e = max(int(np.frexp(x)[1]) - 1 if x > 0 else -127 for x in a)
    st = 2.0 ** (e - 6)
    m = np.minimum(np.floor(a / st + 0.5), 127)
    return (np.sign(v) * m * st).astype(np.float32)


def _bfp8_no_saturation(v):
    a = np.abs(v.astype(np.float64))
    e = max(int(np.frexp(x)[1]) - 1 if x > 0 else -127 for x in a)
    st = 2.0 ** (e - 6)
    return (np.sign(v) * np.round(a / st) * st).astype(np.float32)


def _preempt_oldest(cached, block, free):
    run, out = list(range(len(cached))), []
    while sum(1 for i in run if cached[i] % block == 0) > free:
        x = run.pop(0)
        free += -(-cached[x] // block)
        out.append(x)
    return out


def _preempt_keeps_blocks(cached, block, free):
    run, out = list(range(len(cached))), []
    while sum(1 for i in run if cached[i] % block == 0) > free:
        out.append(run.pop())
    return out


def _gather_no_transpose(pool, table, n):
    return pool[table].reshape(pool.shape[1], -1, pool.shape[3])[:, :n]


def _gather_ignores_table(pool, table, n):
    nb = len(table)
    return pool[:nb].transpose(1, 0, 2, 3).reshape(pool.shape[1], -1, pool.shape[3])[:, :n]


def _gate_one_direction(ref, got, rt, gt):
    for i in range(min(len(ref), len(got))):
        if ref[i] != got[i]:
            return got[i] in rt[i], i
    return len(ref) == len(got), (None if len(ref) == len(got) else min(len(ref), len(got)))


def _gate_ignores_length(ref, got, rt, gt):
    for i in range(min(len(ref), len(got))):
        if ref[i] != got[i]:
            return got[i] in rt[i] and ref[i] in gt[i], i
    return True, None


def _turn_never_recomputes(cached, rendered):      # forgets that the last row must run again
    keep = 0
    while keep < min(len(cached), len(rendered)) and cached[keep] == rendered[keep]:
        keep += 1
    return keep, list(rendered[keep:])


def _turn_keeps_whole_cache(cached, rendered):     # trusts the cache without comparing it
    keep = min(len(cached), len(rendered) - 1)
    return keep, list(rendered[keep:])


def _bytes_untied_twice(cfg, fmt):                 # counts the embedding as well as the head
    per = {"float32": 4.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_1": 20 / 32}[fmt]
    layer = 2 * cfg.q_dim * cfg.hidden + 2 * cfg.kv_dim * cfg.hidden + 3 * cfg.ffn * cfg.hidden
    return (cfg.n_layers * layer + 2 * cfg.vocab * cfg.hidden) * per


def _bytes_no_block_scales(cfg, fmt):              # 4 bits, 8 bits: forgets the block's scales
    per = {"float32": 4.0, "bf16": 2.0, "q8_0": 1.0, "q4_1": 0.5}[fmt]
    layer = 2 * cfg.q_dim * cfg.hidden + 2 * cfg.kv_dim * cfg.hidden + 3 * cfg.ffn * cfg.hidden
    return (cfg.n_layers * layer + cfg.vocab * cfg.hidden) * per


def _registers_no_broadcast(mr, npan):
    return 2 * mr * npan + 2 * npan


def _q4_1_interleaved(block):                      # nibbles in the order llama.cpp's Q4_1 is NOT
    b = np.asarray(block, np.uint8)
    d, m = b[:4].view(np.float16).astype(np.float32)
    q = np.stack([b[4:] & 0x0F, b[4:] >> 4], axis=1).reshape(32).astype(np.float32)
    return d * q + m


def _q4_1_fused_in_float16(block):                 # computes in float16 and converts at the end
    b = np.asarray(block, np.uint8)
    d, m = b[:4].view(np.float16)
    q = np.concatenate([b[4:] & 0x0F, b[4:] >> 4]).astype(np.float16)
    return (d * q + m).astype(np.float32)


def _q8_round_half_away(x):                          # llama.cpp's roundf: halves away from zero
    xb = np.asarray(x, np.float32).reshape(-1, 32)
    d = (np.abs(xb).max(axis=1) / np.float32(127)).astype(np.float32)
    v = xb / np.where(d == 0, 1, d)[:, None]
    q = np.clip(np.sign(v) * np.floor(np.abs(v.astype(np.float64)) + 0.5), -127, 127).astype(np.int8)
    return q.reshape(-1), d, (d * q.astype(np.int32).sum(axis=1)).astype(np.float32)


def _q8_float16_scales(x):                          # llama.cpp's block_q8_1 keeps d and s as fp16
    xb = np.asarray(x, np.float32).reshape(-1, 32)
    d = (np.abs(xb).max(axis=1) / np.float32(127)).astype(np.float32)
    q = np.clip(np.rint(xb / np.where(d == 0, 1, d)[:, None]), -127, 127).astype(np.int8)
    s = d * q.astype(np.int32).sum(axis=1)
    return q.reshape(-1), d.astype(np.float16).astype(np.float32), s.astype(np.float16).astype(np.float32)


def _maddubs_wraps(u, s):                            # casts to int16 without saturating
    p = np.asarray(u, np.uint8).astype(np.int32) * np.asarray(s, np.int8).astype(np.int32)
    return (p[0::2] + p[1::2]).astype(np.int16)


def _maddubs_signed_u(u, s):                         # reads u as signed bytes
    p = np.asarray(u, np.uint8).view(np.int8).astype(np.int32) * np.asarray(s, np.int8)
    return np.clip(p[0::2] + p[1::2], -32768, 32767).astype(np.int16)


# ---- chapter 12 -------------------------------------------------------------------------------
def _kt_untransposed(slot, head, c, j, n_kv, d, S):
    """V's layout [slots, N_kv, S, d] instead of the transposed K cache's."""
    return ((slot * n_kv + head) * S + j) * d + c


def _grid_first_segment(segs, n_kv, d, tile):
    """y sized for the first segment instead of the longest."""
    return ((-(-d // tile), -(-segs[0] // tile), len(segs) * n_kv), (tile, tile))


def _grid_no_heads(segs, n_kv, d, tile):
    """one z slice per segment, forgetting the K/V heads."""
    return ((-(-d // tile), -(-max(segs) // tile), len(segs)), (tile, tile))


def _softmax_unmasked(s, length):
    """the whole row's maximum and sum, the tail zeroed afterwards."""
    s = np.asarray(s, dtype=np.float64)
    p = np.exp(s - s.max())
    p /= p.sum()
    p[length:] = 0
    return p


def _fit_two_rate_not_inverted(calls, seconds):
    """returns u = 1 / bytes_per_s (seconds per byte) instead of the rate."""
    (n0, w0), (n1, w1) = calls
    det = n0 * w1 - n1 * w0
    return (seconds[0] * w1 - seconds[1] * w0) / det, (n0 * seconds[1] - n1 * seconds[0]) / det


def _fit_two_ignores_bytes(calls, seconds):
    """all of each call's time charged to its launches."""
    return seconds[0] / calls[0][0], float("inf")


def _elasticity_raw_derivative(calls, seconds, held):
    """dp/ds_i, not scaled by s_i / p."""
    (n0, w0), (n1, w1) = calls
    det = n0 * w1 - n1 * w0
    return (held[0] * w1 - held[1] * n1) / det, (held[1] * n0 - held[0] * w0) / det


WRONG = [
    ("ch01", "block_params", lambda c: c.layer_params() - 2 * c.hidden, "expected 3,540,096, got 3,538,944"),
    ("ch01", "block_params", lambda c: c.hidden * (4 * c.hidden + 3 * c.ffn) + 2 * c.hidden, "N_kv"),
    ("ch01", "rms_norm", _rms_no_eps, "eps=1e-06"),
    ("ch01", "rms_norm", _rms_sum, "values differ"),
    ("ch01b", "prefill_flops", _flops_full_attention, "S=64"),
    ("ch01b", "prefill_flops", _flops_all_rows, "LM head"),
    ("ch01b", "decode_flops", _decode_context_keys, "context=0"),
    ("ch01b", "decode_flops", _decode_flops_no_head, "LM head"),
    ("ch02", "inv_freq", _inv_freq_all_dims, "shape: expected (1,), got (2,)"),
    ("ch02", "inv_freq", _inv_freq_wrong_step, "expected 0.1, got 0.3162278"),
    ("ch02", "rotation_table", _table_textbook, "expected 0.841471, got -0.841471"),
    ("ch02", "apply_table", _apply_half_split, "values differ"),
    ("ch03", "gqa_scores", _gqa_wrong_group, "(G=3)"),
    ("ch03", "gqa_scores", _gqa_unscaled, "1/sqrt(d)"),
    ("ch03", "causal_mask", _mask_no_offset, "S=1, start=9): 9 of 10 values differ"),
    ("ch04", "kv_append", _append_reshape, "values differ at [0]"),
    ("ch04", "kv_append", _append_forgets_length, "at [1]"),
    ("ch04", "decode_attention", _attention_whole_capacity, "values differ"),
    ("ch04", "decode_attention", _attention_heads_interleaved, "N_h=9, N_kv=3"),
    ("ch04c", "kv_bytes_per_token", lambda c, b: 2 * c.n_layers * c.n_heads * c.head_dim * b, "(3x the expected)"),
    ("ch04c", "kv_bytes_per_token", lambda c, b: c.n_layers * c.n_kv_heads * c.head_dim * b, "(0.5x the expected)"),
    ("ch04c", "max_batch", _max_batch_no_weights, "expected 65"),
    ("ch04c", "max_batch", _max_batch_negative, "Llama-3-70B, 8192 tokens each, 80 GiB): expected 0"),
    ("ch04b", "top_p_probs", _top_p_excludes_crossing, "top_p=0.5"),
    ("ch04b", "top_k_probs", _top_k_after_softmax_no_renorm, "values differ"),
    ("ch04b", "top_k_probs", _top_k_temperature_multiplied, "temperature=0.5"),
    ("ch03b", "pad_prompt", _pad_counted_length, "EOS inside: True"),
    ("ch03b", "in_order_sum", _sum_numpy_pairwise, "fifteen 1s"),
    ("ch03b", "in_order_sum", _sum_float64, "[1e8, 1, -1e8, 1]"),
    ("ch05", "bf16_round", _bf16_truncate, "values differ"),
    ("ch05", "bf16_round", _bf16_ties_up, "ties to even"),
    ("ch05", "merge_partials", _merge_no_rescale, "values differ"),
    ("ch05b", "gemv_tile_m", _tile_no_divisor, "expected 12, got 14"),
    ("ch05b", "gemv_l1_bytes", _l1_weights_only, "expected 1,168, got 1,024"),
    ("ch05b", "largest_tile_m", _largest_single_buffered, "expected 24, got 36"),
    ("ch06", "group_arguments", _group_no_sharing, "got ['x', 'norm_w', 'xn', 'wk', 'xn', 'k']"),
    ("ch06", "derive_roles", _roles_written_is_intermediate, "expected 'output' at ['k'], got 'intermediate'"),
    ("ch07", "call_bytes", _call_intermediates_back, "stitched RMSNorm + K projection, first call): expected 64 at [1]"),
    ("ch07", "call_bytes", _call_weights_every_time, "second call, same bo_key"),
    ("ch07", "decode_bytes", _decode_no_head, "expected 150,912 at [0]"),
    ("ch07", "prefill_bytes", _prefill_alias_ignored, "aliasing"),
    ("ch08", "subscripts", _subscripts_first_letters, "expected 'bim,mqe->biqe', got 'bsd,dhd->bshd'"),
    ("ch08", "einsum_flops", _flops_output_only, "expected 4,644,864, got 8,064"),
    ("ch08", "rope_q", _rope_contract_r, "values differ"),
    ("ch09", "collective_traffic", _traffic_ring_like_line, "on a ring of 3 chips"),
    ("ch09", "collective_traffic", _traffic_line_all_reduce_doubled, "all_reduce on a line"),
    ("ch09", "bfloat8_block", _bfp8_round_half_up, "ties"),
    ("ch09", "bfloat8_block", _bfp8_no_saturation, "expected 254, got 256"),
    ("ch10", "preempt", _preempt_oldest, "expected 2 at [0], got 0"),
    ("ch10", "preempt", _preempt_keeps_blocks, "expected [2], got [2, 1]"),
    ("ch10", "gather_keys", _gather_no_transpose, "values differ"),
    ("ch10", "gather_keys", _gather_ignores_table, "table [0, 2, 4], n=9"),
    ("ch11", "weight_bytes", _bytes_untied_twice, "expected"),
    ("ch11", "weight_bytes", _bytes_no_block_scales, "expected"),
    ("ch11", "tile_registers", _registers_no_broadcast, "expected"),
    ("ch11b", "q4_1_decode", _q4_1_interleaved, "values differ"),
    ("ch11b", "q4_1_decode", _q4_1_fused_in_float16, "values differ"),
    ("ch11b", "q8_blocks", _q8_round_half_away, "(halves: d = 1"),
    ("ch11b", "q8_blocks", _q8_float16_scales, "values differ"),
    ("ch11b", "maddubs", _maddubs_wraps, "(u = 255, s = 127 and -128"),
    ("ch11b", "maddubs", _maddubs_signed_u, "(full bytes"),
    ("ch12", "kt_offset", _kt_untransposed, "expected 13, got 21"),
    ("ch12", "fill_grid", _grid_first_segment, "segments [1, 40, 3]"),
    ("ch12", "fill_grid", _grid_no_heads, "expected ((4, 1, 3), (16, 16)), got ((4, 1, 1), (16, 16))"),
    ("ch12", "masked_softmax_row", _softmax_unmasked, "(n=8, length=3): 3 of 8 values differ"),
    ("ch13", "gate", _gate_one_direction, "ours in the reference's top-5 but not the reverse): expected False at [0], got True"),
    ("ch13", "gate", _gate_ignores_length, "ours stops 2 tokens early): expected False at [0], got True"),
    ("ch13", "plan_turn", _turn_never_recomputes, "everything is already cached (recompute the last position)): expected 39 at [0], got 40"),
    ("ch13", "plan_turn", _turn_keeps_whole_cache, "re-tokenizes differently from position 24): expected 24 at [0], got 28"),
    ("chA", "fit_two", _fit_two_rate_not_inverted, "NPU2 decode calls, 76 us and 37.8 GB/s): expected 3.78e+10 at [1]"),
    ("chA", "fit_two", _fit_two_ignores_bytes, "expected 7.6e-05 at [0]"),
    ("chA", "elasticity", _elasticity_raw_derivative, "expected 1.32717 at [0]"),
]


# Exercises whose wrong answer needs a simulator live beside it: 09.3's in tests/mesh/test_mesh_ttlang.py
# (test_the_exercise_catches_a_program_that_reads_the_wrong_k_tile).
WRONG_ELSEWHERE = {("ch09", "matmul_program")}


def test_every_exercise_has_a_wrong_answer_below():
    assert {(ch, name) for ch, name, _, _ in WRONG} | WRONG_ELSEWHERE == set(ALL)


@pytest.mark.parametrize("ch,name,wrong,words", WRONG,
                         ids=[f"{ch}-{name}-{i}" for i, (ch, name, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_a_pointed_message(ch, name, wrong, words):
    ex = exercise(ch, name)
    v = ex.verdict(wrong)
    assert not v.passed and v.status == "failed", v.message
    assert v.message.startswith(f"{ex.number} {name}: FAILED on case "), v.message
    assert words in v.message, v.message
    assert "\n" not in v.message and "| hint: " in v.message


# ---- the mechanics ------------------------------------------------------------------------------
def test_exception_in_student_code_is_one_line():
    ex = Exercise("00.1", "f", lambda: [Case("x=1", (1,), 2)])
    v = ex.verdict(lambda x: {}["missing"])
    assert v.message == "00.1 f: FAILED on case 1/1 (x=1): raised KeyError: 'missing'"


def test_student_cannot_change_the_cases_by_writing_into_arguments():
    a = np.zeros(3)
    ex = Exercise("00.1", "f", lambda: [Case("a", (a,), np.zeros(3))])

    def writes(x):
        x += 1
        return np.zeros(3)

    assert ex.verdict(writes).passed and ex.verdict(writes).passed and not a.any()


def test_difference_reports_shapes_and_first_index():
    e = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert difference(e, e.T).startswith("shape: expected (2, 3), got (3, 2)")
    g = e.copy()
    g[1, 2] = 9
    assert difference(e, g) == ("1 of 6 values differ (shape (2, 3) float32); first at index (1, 2): "
                                "expected 5, got 9")
    assert difference(5, 5.0) is None and difference(True, np.bool_(True)) is None
    assert difference(True, 1) is not None and difference([1, 2], [1]) is not None
    assert difference(np.array([-np.inf, 0.0]), np.array([-np.inf, 0.0])) is None
    assert difference(np.array([-np.inf]), np.array([-1e30])) is not None


def test_not_a_function():
    v = exercise("ch01", "block_params").verdict(42)
    assert not v.passed and "expected a function, got int" in v.message


# ---- the notebooks: stubs at the end, one checker cell each, solutions substituted by name -------
def _notebook_cells(stem: str):
    jupytext = pytest.importorskip("jupytext")
    from llamanb.course.notebooks import cells
    return cells(jupytext.read(ROOT / "notebooks" / f"{stem}.py", fmt="py:percent"))


@pytest.mark.parametrize("ch", CHAPTERS)
def test_notebook_ends_with_its_exercises(ch):
    from llamanb.course.notebooks import stub_functions
    cs = _notebook_cells(SOLUTIONS[ch])
    names = [ex.name for ex in chapter(ch).EXERCISES]
    stubs = [(i, n) for i, (kind, src) in enumerate(cs) if kind == "code" for n in stub_functions(src)]
    assert [n for _, n in stubs] == names
    start = next(i for i, (kind, src) in enumerate(cs) if src.startswith("## Exercises"))
    assert all(i > start for i, _ in stubs)
    for i, name in stubs:                      # the next cell checks it, and nothing else
        assert cs[i + 1] == ("code", f"{ch}.{name}({name})")
    assert cs[-1] == ("code", f"{ch}.{names[-1]}({names[-1]})")


def test_solved_cells_substitutes_stubs_by_name():
    from llamanb.course.notebooks import solved_cells
    from llamanb.errors import LlamanbError
    cs = [("markdown", "raise NotImplementedError in prose"), ("code", "x = 1"),
          ("code", "def f(a):\n    raise NotImplementedError  # your code here"), ("code", "check(f)")]
    sol = "import numpy as np\n\n\ndef g():\n    pass\n\n\ndef f(a):\n    \"\"\"doc\"\"\"\n    return np.sum(a)\n"
    out = solved_cells(cs, sol)
    assert out[0] == cs[0] and out[1] == cs[1] and out[3] == cs[3]
    assert out[2] == ("code", 'import numpy as np\n\ndef f(a):\n    """doc"""\n    return np.sum(a)\n')
    with pytest.raises(LlamanbError, match="no solution for h"):
        solved_cells([("code", "def h():\n    raise NotImplementedError")], sol, "nb")


def test_solutions_command_refuses_a_notebook_without_solutions():
    import subprocess
    import sys
    for arg in ("notebooks/00_overview.py", "notebooks/nope.py"):
        r = subprocess.run([sys.executable, "-m", "llamanb.course.notebooks", "solutions", arg],
                           capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "no solutions file" in r.stderr or "not a notebook source" in r.stderr


# ---- a right answer passes whatever dtype or container carries it ------------------------------
def _exact(ex: Exercise) -> bool:
    return ex.rtol == 0 and ex.atol == 0


def _variants(value, exact: bool):
    """The same right answer as a student might return it: numpy scalars and 0-d arrays for
    numbers, lists / tuples / arrays for sequences, float32 (and float32 values in a list) for
    float arrays when the exercise has a tolerance."""
    out = []
    if isinstance(value, (bool, np.bool_)):
        return [("np.bool_", np.bool_(value)), ("0-d array", np.asarray(value))]
    if isinstance(value, (int, np.integer)):
        v = int(value)
        out += [("int", v), ("np.int64", np.int64(v)) if abs(v) < 2 ** 63 else ("int", v),
                ("0-d array", np.asarray(v)), ("integral float", float(v)) if abs(v) < 2 ** 53
                else ("int", v)]
        return out
    if isinstance(value, (float, np.floating)):
        v = float(value)
        out += [("float", v), ("np.float64", np.float64(v)), ("0-d array", np.asarray(v))]
        if not exact and np.isfinite(v):
            out += [("np.float32", np.float32(v)), ("0-d float32", np.asarray(v, np.float32))]
        return out
    if isinstance(value, np.ndarray):
        out += [("array", value), ("list", value.tolist())]
        if value.dtype.kind == "f" and not exact:
            v32 = value.astype(np.float32)
            out += [("float32 array", v32), ("float32 values in a list", v32.tolist())]
        if value.dtype.kind in "iu":
            out += [("int32 array", value.astype(np.int32)), ("float array", value.astype(np.float64))]
        return out
    if isinstance(value, (list, tuple)):
        other = tuple if isinstance(value, list) else list
        out += [(type(value).__name__, value), (other.__name__, other(value))]
        for i, item in enumerate(value):       # one item at a time in each of its forms
            for label, form in _variants(item, exact)[1:]:
                changed = list(value)
                changed[i] = form
                out.append((f"item {i} as {label}", type(value)(changed)))
        return out
    return [("as is", value)]


@pytest.mark.parametrize("ch,name", ALL)
def test_right_answer_in_every_container_and_dtype_passes(ch, name):
    ex = exercise(ch, name)
    if type(ex).verdict is not Exercise.verdict:
        pytest.skip(f"{name}'s answer is a program run by its own verdict (no value to re-wrap)")
    solution = getattr(solution_module(ch), name)
    tried = 0
    for n, case in enumerate(ex.cases()):
        right = solution(*[np.array(a) if isinstance(a, np.ndarray) else a for a in case.args],
                         **case.kwargs)
        for label, form in _variants(right, _exact(ex)):
            one = Exercise(ex.number, ex.name, lambda c=case: [c], rtol=ex.rtol, atol=ex.atol,
                           compare=ex.compare, steps=ex.steps)
            v = one.verdict(lambda *a, form=form, **k: form)
            assert v.passed, f"case {n + 1} ({case.label}) as {label}: {v.message}"
            tried += 1
    assert tried >= len(ex.cases())                 # text and dict answers have one form


def _top_p_float32(logits, top_p):
    """top_p_probs computed in the logits' own dtype (float32) throughout."""
    z = np.asarray(logits)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    before = np.cumsum(probs[order]) - probs[order]
    keep = np.zeros(probs.size, dtype=bool)
    keep[order[before < top_p]] = True
    out = np.where(keep, probs, np.float32(0))
    return out / out.sum()


def _rms_float32(x, g, eps):
    x = np.asarray(x, np.float32)
    return (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + np.float32(eps)) * g).astype(np.float32)


@pytest.mark.parametrize("ch,name,fn", [("ch04b", "top_p_probs", _top_p_float32),
                                        ("ch01", "rms_norm", _rms_float32)])
def test_right_answer_computed_in_float32_passes(ch, name, fn):
    """Computed in float32 (the inputs' own dtype), not merely cast: judged with the float32
    tolerance its exercise derives (check.py's precision note), so it passes; its float64 twin
    still meets the exercise's own float64 tolerance."""
    ex = exercise(ch, name)
    case = ex.cases()[0]
    assert np.asarray(fn(*case.args)).dtype == np.float32
    v = ex.verdict(fn)
    assert v.passed, v.message


def test_float32_answer_the_old_checker_refused():
    """The report: 'expected 0.3805185, got 0.3805185' for a float32 top-p, and 'expected
    3,540,096, got 3540096' for an int in a 0-d array."""
    logits = np.array([1.0, 0.5, -0.25, 2.0, 0.0], np.float32)
    expected = _top_p_float32(logits.astype(np.float64), 0.9)
    got = _top_p_float32(logits, 0.9)
    assert difference(expected, got, rtol=1e-9, atol=1e-12, steps=50) is None
    assert difference(expected, got, rtol=1e-9, atol=1e-12, steps=0) is not None   # needs the rule
    assert difference(3_540_096, np.asarray(3_540_096)) is None
    assert difference(3_540_096, np.asarray(3_540_096.0)) is None


@pytest.mark.parametrize("answer, words", [
    (np.array(["0.5", "0.5"]), "holds text"),
    (np.array([0.5 + 1e-3j, 0.5]), "complex numbers"),
    (np.array([10 ** 400, 1], dtype=object), "numbers too large"),
    ([10 ** 400, 1], "numbers too large"),
    (np.array([None, None]), "not an array of numbers"),
])
def test_non_numeric_or_complex_array_blames_the_answer(answer, words):
    d = difference(np.array([0.5, 0.5]), answer)
    assert d is not None and words in d and "\n" not in d, d


@pytest.mark.parametrize("expected, answer, words", [
    (3, 10 ** 400, "far too large"),
    (0.5, 10 ** 400, "too large for any float"),
    (0.5, 0.5 + 0j, "complex"),
    (0.5, "0.5", "text"),
    (3, "3", "expected the integer 3"),
    (3, 3 + 0j, "complex"),
])
def test_odd_scalars_fail_in_one_line_without_raising(expected, answer, words):
    d = difference(expected, answer)
    assert d is not None and words in d and "\n" not in d, d


def test_a_checker_never_raises_on_an_odd_answer():
    """Whatever comes back, the verdict is one line that blames the answer."""
    ex = exercise("ch04b", "top_p_probs")
    for odd in (object(), {"a": 1}, [[1, 2], [3]], np.array([1 + 2j] * 5), "probs", 10 ** 400):
        v = ex.verdict(lambda *a, odd=odd: odd)
        assert not v.passed and "\n" not in v.message, v.message

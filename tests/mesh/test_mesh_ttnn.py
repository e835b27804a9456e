"""The ttnn path of the mesh backend, driven by a fake `ttnn` module.

The fake keeps each mesh tensor as one numpy array per device (llamanb's emulated mesh) and
implements the ttnn calls the backend makes: mesh mappers and composers, from_torch (rounding to
bfloat8_b / bfloat4_b with llamanb.model.numerics, checked bit-exact against ttnn elsewhere), linear,
mul with a SiLU activation, add, slice, concat, permute, the three collectives with their
keyword-only cluster_axis / num_links / topology, and the attention and norm ops, each written
here from its documented definition (not from llamanb's layers): the distributed RMSNorm pair,
nlp_create_qkv_heads / nlp_concat_heads, rotary_embedding (x cos + rotate_half(x) sin),
fill_cache / update_cache (in place, with upstream's signatures: fill_cache(cache_tensor,
input_tensor, batch_idx) writes from position 0, update_cache(cache, input, update_idx, *,
batch_offset); a block-float cache rounds what it stores), and the two
scaled-dot-product attentions (GQA: query head h reads K/V head h // group). Arithmetic is
float32 and a "bfloat16" tensor is not rounded, so the fake checks the dataflow and the
placement, not bf16 numerics. Tile padding and memory layouts are not modelled. It records
every call, so the tests see both what the backend asks ttnn to do and what the result would be."""
import sys
import types

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.mesh import ccl
from llamanb.mesh.bounds import eval_error, gamma, matmul_bound, silu64, swiglu_bound
from llamanb.engine.engine import Engine
from llamanb.mesh.backend import MeshBackend, TtnnMeshBackend, load_ttnn
from llamanb.mesh.config import GALAXY, MeshConfig
from llamanb.mesh.device import EmulatedMesh, MeshTensor
from llamanb.model.numerics import blockfloat_padded
from llamanb.model.ops import silu_mul
from test_mesh_model import PROMPT, f64_logits


def each(fn, *ts):
    """fn on every device's arrays of the mesh tensors ts (a local op)."""
    R, C = len(ts[0].arrays), len(ts[0].arrays[0])
    return MeshTensor(ts[0].mesh, [[fn(*(t.arrays[r][c] for t in ts)) for c in range(C)]
                                   for r in range(R)], {})


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _gqa(q, k):
    """K or V [b, nkv, T, d] repeated to the query heads of q [b, nq, S, d]."""
    return np.repeat(k, q.shape[1] // k.shape[1], axis=1)


def add_attention_ops(t, calls):
    def rec(name, fn):
        def run(*a, **kw):
            calls.append((name,))
            return fn(*a, **kw)
        return run

    def pre(x):                                                  # local sum of squares [.., 1]
        return each(lambda a: np.square(a).sum(-1, keepdims=True), x)

    def post(x, stats, epsilon, weight):                         # stats: one column per chip
        def f(a, s, w):
            ms = s.sum(-1, keepdims=True) / (a.shape[-1] * s.shape[-1])
            return a / np.sqrt(ms + epsilon) * w
        return each(f, x, stats, weight)

    def create_heads(x, num_heads, num_kv_heads, transpose_k_heads):
        assert not transpose_k_heads
        def split(a, lo, n):
            B, _, S, W = a.shape
            d = W // (num_heads + 2 * num_kv_heads)
            return a[:, 0, :, lo * d:(lo + n) * d].reshape(B, S, n, d).transpose(0, 2, 1, 3).copy()
        return (each(lambda a: split(a, 0, num_heads), x),
                each(lambda a: split(a, num_heads, num_kv_heads), x),
                each(lambda a: split(a, num_heads + num_kv_heads, num_kv_heads), x))

    def rotary(x, cos, sin):
        def f(a, c, s):
            h = a.shape[-1] // 2
            return a * c + np.concatenate([-a[..., h:], a[..., :h]], -1) * s
        return each(f, x, cos, sin)

    def _store(cache, x, where):
        for r, row in enumerate(cache.arrays):
            for c, a in enumerate(row):
                v = x.arrays[r][c]
                if cache.dtype in ("bfloat8_b", "bfloat4_b"):    # the cache holds block floats
                    v = blockfloat_padded(np.ascontiguousarray(v), cache.dtype)
                where(a, v)

    def fill_cache(cache_tensor, input_tensor, batch_idx):       # upstream: rows 0..S-1 of user
        def w(a, v):                                              # batch_idx; no start position
            a[batch_idx, :, :v.shape[2]] = v[0]
        _store(cache_tensor, input_tensor, w)

    def update_cache(cache, input, update_idx, *, batch_offset=0):   # input [1, nkv, B, d]: B users
        def w(a, v):
            for b in range(v.shape[2]):
                a[batch_offset + b, :, update_idx] = v[0, :, b]
        _store(cache, input, w)

    def sdpa(q, k, v, is_causal=True, attn_mask=None, scale=None):
        def f(qa, ka, va, m=None):
            s = qa @ _gqa(qa, ka).swapaxes(-1, -2) * scale          # [b, nq, S, T]
            if is_causal:
                s = s + np.triu(np.full(s.shape[-2:], -np.inf, np.float32), 1)
            if m is not None:
                s = s + m
            return _softmax(s) @ _gqa(qa, va)
        return each(f, q, k, v, *([attn_mask] if attn_mask is not None else []))

    def sdpa_decode(q, k, v, cur_pos, scale=None):             # q [1, b, nq, d]; reads 0..cur_pos[b]
        def f(qa, ka, va):
            out = np.zeros_like(qa)
            for b, pos in enumerate(cur_pos):
                qb = qa[0, b][None, :, None]                        # [1, nq, 1, d]
                kb, vb = ka[b:b + 1, :, :pos + 1], va[b:b + 1, :, :pos + 1]
                out[0, b] = (_softmax(qb @ _gqa(qb, kb).swapaxes(-1, -2) * scale) @ _gqa(qb, vb))[0, :, 0]
            return out
        return each(f, q, k, v)

    def concat_heads(x):                                         # [B, n, S, d] -> [B, 1, S, n d]
        return each(lambda a: a.transpose(0, 2, 1, 3).reshape(a.shape[0], 1, a.shape[2], -1), x)

    def slice_(x, starts, ends):
        return each(lambda a: a[tuple(slice(s, e) for s, e in zip(starts, ends))].copy(), x)

    t.rms_norm_pre_all_gather = rec("rms_norm_pre_all_gather", pre)
    t.rms_norm_post_all_gather = rec("rms_norm_post_all_gather", post)
    t.experimental = types.SimpleNamespace(
        nlp_create_qkv_heads=rec("nlp_create_qkv_heads", create_heads),
        nlp_concat_heads=rec("nlp_concat_heads", concat_heads),
        rotary_embedding=rec("rotary_embedding", rotary))
    t.transformer = types.SimpleNamespace(
        scaled_dot_product_attention=rec("scaled_dot_product_attention", sdpa),
        scaled_dot_product_attention_decode=rec("scaled_dot_product_attention_decode", sdpa_decode))
    t.fill_cache, t.update_cache = rec("fill_cache", fill_cache), rec("update_cache", update_cache)
    t.slice = slice_
    t.permute = lambda x, dims: each(lambda a: a.transpose(dims), x)
    t.concat = lambda xs, dim: each(lambda *a: np.concatenate(a, axis=dim), *xs)
    t.add = rec("add", lambda a, b: each(np.add, a, b))


def fake_ttnn(fail_open=False):
    calls = []
    t = types.ModuleType("ttnn")
    t.calls = calls
    t.bfloat16, t.bfloat8_b, t.bfloat4_b, t.TILE_LAYOUT = "bfloat16", "bfloat8_b", "bfloat4_b", "tile"
    t.Topology = types.SimpleNamespace(Linear="Linear", Ring="Ring")
    t.UnaryOpType = types.SimpleNamespace(SILU="SILU")
    t.MeshShape = lambda r, c: (r, c)

    def open_mesh_device(shape):
        calls.append(("open_mesh_device", shape))
        if fail_open:
            raise RuntimeError("no Tenstorrent device found\nmore detail")
        return EmulatedMesh(MeshConfig(shape))

    t.open_mesh_device = open_mesh_device
    t.ShardTensor2dMesh = lambda dev, dims, mesh_shape: ("shard", dims, mesh_shape)
    t.ReplicateTensorToMesh = lambda dev: ("replicate", (None, None), None)
    t.ConcatMesh2dToTensor = lambda dev, dims, mesh_shape: ("concat", dims, mesh_shape)

    def from_torch(x, dtype, layout, device, mesh_mapper):
        calls.append(("from_torch", tuple(x.shape), dtype, mesh_mapper))
        dims = {k: d for k, d in enumerate(mesh_mapper[1]) if d is not None}
        mt = device.shard(x.numpy(), dims)
        if dtype in ("bfloat8_b", "bfloat4_b"):      # the device holds the block-float values
            mt = mt.map(lambda a: blockfloat_padded(a, dtype))
        mt = mt.map(np.array)                       # every device its own copy (caches are written)
        mt.dtype = dtype
        return mt

    def to_torch(x, mesh_composer):
        import torch

        dims = {k: d for k, d in enumerate(mesh_composer[1]) if d is not None}
        return torch.from_numpy(x.gather(dims))

    def linear(a, b):
        calls.append(("linear",))
        return MeshTensor(a.mesh, [[x @ w for x, w in zip(ra, rb)] for ra, rb in zip(a.arrays, b.arrays)], {})

    def mul(a, b, input_tensor_a_activations=()):
        calls.append(("mul", tuple(input_tensor_a_activations)))
        assert list(input_tensor_a_activations) == ["SILU"]
        return MeshTensor(a.mesh, [[x / (1 + np.exp(-x)) * y for x, y in zip(ra, rb)]
                                   for ra, rb in zip(a.arrays, b.arrays)], a.dims)

    def collective(name):
        def run(x, *args, cluster_axis, num_links, topology):
            calls.append((name, args, cluster_axis, num_links, topology))
            x = MeshTensor(x.mesh, x.arrays, {})
            if name == "all_reduce":
                return ccl.all_reduce(x, cluster_axis)
            dim = args[0] % x[0, 0].ndim
            if name == "reduce_scatter":
                return ccl.reduce_scatter(x, dim, cluster_axis)
            return ccl.all_gather(x, dim, cluster_axis)
        return run

    t.from_torch, t.to_torch, t.linear, t.mul = from_torch, to_torch, linear, mul
    for name in ("all_reduce", "reduce_scatter", "all_gather"):
        setattr(t, name, collective(name))
    add_attention_ops(t, calls)
    return t


@pytest.mark.parametrize("shape", [(3, 4), (1, 3)])
def test_ttnn_mlp_equals_the_emulated_mlp(smollm, shape):
    """Same placement, same block-float weights (W1/W3 bfloat4_b, W2 bfloat8_b): the MLP run
    through (fake) ttnn calls equals the emulated backend's MLP to within two float32
    evaluations of the same SwiGLU (llamanb.mesh.bounds.swiglu_bound, derived from gamma_K |A||B|
    and the measured error of the elementwise silu * u; the two sides' matmuls use other memory
    layouts, so other BLAS kernels and sum orders)."""
    pytest.importorskip("torch")
    t = fake_ttnn()
    cfg = MeshConfig(shape)
    dtypes = {"w1": "bfloat4_b", "w3": "bfloat4_b", "w2": "bfloat8_b"}
    tt = TtnnMeshBackend(smollm.weights, cfg, ttnn=t, weight_dtypes=dtypes)
    emu = MeshBackend(smollm.weights, cfg, weight_formats=dtypes)
    h = np.random.default_rng(0).standard_normal((5, smollm.config.hidden)).astype(np.float32)
    xa = cfg.hidden_axis
    got = tt.to_host(tt.mlp(7, tt.to_device(h, {xa: 1})), {xa: 1})
    want = emu.tp.mlp(7, emu.tp.to_mesh(h)).gather()
    F, lw = smollm.config.ffn, emu.weights.layers[7]                 # the rounded weights, [out, in]
    w1, w3, w2 = lw.w_gate_up[:F].T, lw.w_gate_up[F:].T, lw.w_down.T
    g, u = (h @ w1)[:, :64], (h @ w3)[:, :64]                        # sample inputs for silu * u
    eps = max(eval_error(silu_mul, lambda a, b: silu64(a) * b, g, u),
              eval_error(lambda a, b: a / (1 + np.exp(-a)) * b, lambda a, b: silu64(a) * b, g, u))
    y, dy = swiglu_bound(h, w1, w3, w2, 2 * eps)                     # 2x: eps is sampled, not a sup
    assert np.all(np.abs(got - y) <= dy) and np.all(np.abs(want - y) <= dy)
    ops = [c[0] for c in t.calls if c[0] in ("linear", "reduce_scatter", "mul", "all_gather", "all_reduce")]
    assert ops == ["linear", "reduce_scatter", "linear", "reduce_scatter", "mul", "all_gather",
                   "linear", "all_reduce"]
    rs = [c for c in t.calls if c[0] == "reduce_scatter"]
    assert all(c[2] == cfg.hidden_axis and c[4] == "Linear" for c in rs)
    assert [c for c in t.calls if c[0] == "all_reduce"][0][2] == cfg.head_axis


def test_ttnn_projections_equal_the_emulated_ones(smollm):
    """QKV (all-reduced over the hidden axis) and WO (all-reduced over the head axis) through
    the fake ttnn and the emulated layers each lie within gamma_K |x| |W| of the float64 product
    with the same rounded weights (any sum order, the all-reduce's additions included), on every
    device of a 3x4 mesh."""
    pytest.importorskip("torch")
    t = fake_ttnn()
    cfg = MeshConfig((3, 4))
    fmts = {"wqkv": "bfloat8_b", "wo": "bfloat8_b"}
    tt = TtnnMeshBackend(smollm.weights, cfg, ttnn=t, weight_dtypes=fmts)
    emu = MeshBackend(smollm.weights, cfg, weight_formats=fmts).tp
    rng = np.random.default_rng(1)
    h = rng.standard_normal((4, smollm.config.hidden)).astype(np.float32)
    got = tt.qkv(3, tt.to_device(h, {1: 1}))
    want = ccl.all_reduce(emu.matmul(emu.to_mesh(h), emu._w(3, "wqkv"), {}), 1)
    for r in range(3):
        w = np.concatenate([emu._w(3, "wqkv")(r, c) for c in range(4)], axis=1).T   # [H, group p=r]
        exact, bound = h.astype(np.float64) @ w.astype(np.float64), matmul_bound(h, w)
        for c in range(4):
            assert np.all(np.abs(got[r, c] - exact) <= bound) and np.all(np.abs(want[r, c] - exact) <= bound)
    attn = rng.standard_normal((4, smollm.config.q_dim)).astype(np.float32)
    got = tt.to_host(tt.wo(3, tt.to_device(attn, {0: 1})), {1: 1})
    want = ccl.all_reduce(emu.matmul(emu.mesh.shard(attn, {0: 1}), emu._w(3, "wo"), {1: 1}), 0).gather()
    wo = emu.weights.layers[3].wo.T                                  # [q_dim, H], rounded
    exact, bound = attn.astype(np.float64) @ wo.astype(np.float64), matmul_bound(attn, wo)
    assert np.all(np.abs(got - exact) <= bound) and np.all(np.abs(want - exact) <= bound)
    assert [c[2] for c in t.calls if c[0] == "all_reduce"] == [1, 0]


def test_weights_go_up_once_sharded_in_their_formats(smollm):
    pytest.importorskip("torch")
    t = fake_ttnn()
    tt = TtnnMeshBackend(smollm.weights, MeshConfig((3, 4), topology="ring", num_links=3), ttnn=t)
    tt.mlp_weights(0)
    tt.mlp_weights(0)
    ups = [c for c in t.calls if c[0] == "from_torch"]
    H, F = smollm.config.hidden, smollm.config.ffn
    assert [(c[1], c[2], c[3][1]) for c in ups] == [((H, F), "bfloat8_b", (1, 0)), ((H, F), "bfloat8_b", (1, 0)),
                                                    ((F, H), "bfloat8_b", (0, 1))]
    tt.all_reduce(tt.to_device(np.zeros((32, 96), np.float32), {}), cluster_axis=0)
    assert t.calls[-1] == ("all_reduce", (), 0, 3, "Ring")


def test_galaxy_opens_an_8x4_mesh_device(smollm, tmp_path, make_tiny):
    import llamanb

    make_tiny(tmp_path / "tiny", n_heads=8, n_kv_heads=8, tie=True)
    model = llamanb.load_model(tmp_path / "tiny")
    t = fake_ttnn()
    tt = TtnnMeshBackend(model.weights, GALAXY, ttnn=t)
    assert t.calls[0] == ("open_mesh_device", (8, 4)) and not tt.emulated
    assert "emulated" not in tt.description


def test_ttnn_missing_or_without_device_is_one_line(smollm, monkeypatch):
    monkeypatch.setitem(sys.modules, "ttnn", None)                   # import fails
    with pytest.raises(LlamanbError, match="ttnn is not usable"):
        load_ttnn()
    with pytest.raises(LlamanbError, match="could not open a 3x1 mesh device: no Tenstorrent device found$"):
        TtnnMeshBackend(smollm.weights, MeshConfig((3, 1)), ttnn=fake_ttnn(fail_open=True))


FORMATS_OFF = {"w1": "bfloat16", "w3": "bfloat16", "w2": "bfloat16", "wqkv": "bfloat16",
               "wo": "bfloat16", "lm_head": "bfloat16"}


@pytest.fixture(scope="module")
def runs(smollm):
    """Prefill + 3 greedy decode steps through the ttnn path (fake, float32), the emulated mesh and
    the one-device numpy engine, each feeding the same tokens; E = the numpy engine's own
    float32 error against the float64 forward on the prompt."""
    pytest.importorskip("torch")
    ids = smollm.tokenizer.encode(PROMPT)
    cfg = MeshConfig((3, 2))
    t = fake_ttnn()
    engines = dict(ttnn=Engine(smollm, backend=TtnnMeshBackend(smollm.weights, cfg, ttnn=t,
                                                                weight_dtypes=FORMATS_OFF)),
                   emu=Engine(smollm, backend="galaxy-emulated", mesh=cfg), one=Engine(smollm))
    out = {}
    toks = []
    for name, eng in engines.items():
        cache = eng.new_cache(64)
        logits = [eng.prefill(ids, cache)]
        for i in range(3):
            if name == "ttnn":
                toks.append(int(np.argmax(logits[-1])))
            logits.append(eng.decode(toks[i], cache))
        out[name] = logits
    E = np.abs(out["one"][0] - f64_logits(smollm, ids)).max()
    return out, E, t, ids, toks


def test_ttnn_forward_equals_emulated_and_one_device(runs):
    """Prefill and each decode step: the ttnn path off the emulated mesh and the numpy engine by
    at most 3 E (both only reorder float32 sums), and the same greedy tokens."""
    out, E, _, _, toks = runs
    for step in range(4):
        tt, emu, one = out["ttnn"][step], out["emu"][step], out["one"][step]
        assert np.abs(tt - emu).max() <= 3 * E, step
        assert np.abs(tt - one).max() <= 3 * E, step
        assert int(np.argmax(tt)) == int(np.argmax(one))
    assert 0 < E < 1e-2


def test_every_op_of_the_forward_goes_through_ttnn(runs, smollm):
    """Counted from the recorded calls: per layer, 2 norms (pre/post each), q and k rotated,
    one fill_cache pair at prefill, one update_cache pair per decode step, one attention."""
    _, _, t, ids, _ = runs
    L, n = smollm.config.n_layers, [c[0] for c in t.calls]
    steps = 4
    assert n.count("rms_norm_pre_all_gather") == n.count("rms_norm_post_all_gather") == (2 * L + 1) * steps
    assert n.count("rotary_embedding") == 2 * L * steps
    assert n.count("fill_cache") == 2 * L and n.count("update_cache") == 2 * L * 3
    assert n.count("scaled_dot_product_attention") == L
    assert n.count("scaled_dot_product_attention_decode") == 3 * L
    assert n.count("add") == 2 * L * steps


def test_ttnn_chunked_prefill_reads_earlier_chunks(smollm):
    """Chunks of 4: the first fills the cache, the later ones write with update_cache and attend
    with a mask over the cached positions; equals the whole prefill to float32 reordering
    (within 3 E, as any two float32 orders of the same sums here)."""
    pytest.importorskip("torch")
    ids = smollm.tokenizer.encode(PROMPT)
    t = fake_ttnn()
    eng = Engine(smollm, backend=TtnnMeshBackend(smollm.weights, MeshConfig((1, 3)), ttnn=t,
                                                  weight_dtypes=FORMATS_OFF))
    whole = eng.prefill(ids, eng.new_cache(64))
    chunked = eng.prefill(ids, eng.new_cache(64), chunk=4)
    one = Engine(smollm).prefill(ids, Engine(smollm).new_cache(64))
    E = np.abs(one - f64_logits(smollm, ids)).max()
    assert np.abs(chunked - whole).max() <= 3 * E and np.argmax(chunked) == np.argmax(whole)
    sd = [c for c in t.calls if c[0] == "scaled_dot_product_attention"]
    assert len(sd) == smollm.config.n_layers * (1 + -(-len(ids) // 4))


def _layer0_kv_exact(model, ids):
    """Layer 0's K (after RoPE) and V [N_kv, S, d] in float64, and a bound delta on how far any
    float32 evaluation of them (either side's norm, projection and rotation, in any sum order) can
    be from these values, derived step by step (u = 2^-24, H = hidden):
        norm   h = h*(1 + t_h), |t_h| <= gamma_H / 2 + 8 u  (sum of squares, /H, +eps, sqrt, 1/x, 2 x)
        QKV    |fl(h W) - h* W| <= (t_h + gamma_H (1 + t_h)) |h*| |W|  =: c1 M
        RoPE   tables off by (2 S + 1) u (float32 frequencies and angle, one rounding of cos/sin);
               k1 c - k2 s adds 3 u of its terms: dk_rot <= dk1 + dk2 + (|k1|+|k2|+dk1+dk2)((2S+1)u + 3u)"""
    from llamanb.model.reference import inv_freq64

    c, lw = model.config, model.weights.layers[0]
    S, d, H, u = len(ids), c.head_dim, c.hidden, 2.0 ** -24
    x = model.weights.embed[ids].astype(np.float64)
    h = x / np.sqrt((x * x).mean(-1, keepdims=True) + c.rms_eps) * lw.attn_norm.astype(np.float64)
    w = lw.wqkv[c.q_dim:].astype(np.float64)                          # k | v rows
    kv, M = h @ w.T, np.abs(h) @ np.abs(w).T
    th = gamma(H) / 2 + 8 * u
    c1 = th + gamma(H) * (1 + th)
    k, v = kv[:, :c.kv_dim].reshape(S, -1, d), kv[:, c.kv_dim:].reshape(S, -1, d)
    dk, dv = c1 * M[:, :c.kv_dim].reshape(S, -1, d), c1 * M[:, c.kv_dim:].reshape(S, -1, d)
    ang = np.arange(S)[:, None, None] * inv_freq64(d, c.rope_theta, c.rope_scaling)
    cos, sin = np.cos(ang), np.sin(ang)
    k1, k2, e1, e2 = k[..., :d // 2], k[..., d // 2:], dk[..., :d // 2], dk[..., d // 2:]
    k = np.concatenate([k1 * cos - k2 * sin, k2 * cos + k1 * sin], -1)
    drot = e1 + e2 + (np.abs(k1) + np.abs(k2) + e1 + e2) * ((2 * S + 1) * u + 3 * u)
    dk = np.concatenate([drot, drot], -1)
    return [(a.transpose(1, 0, 2), e.transpose(1, 0, 2)) for a, e in ((k, dk), (v, dv))]


def _bfp8_rounding_if_determined(exact, delta):
    """For values known to within +-delta: what bfloat8_b stores when every value in the interval
    rounds the same way (same shared exponent for the block, no rounding boundary crossed), and
    where that holds. Blocks: 16 consecutive values of the last dim. Also the largest step."""
    blk = lambda a: a.reshape(*a.shape[:-1], -1, 16)                  # noqa: E731
    mag = np.abs(exact)
    lo, hi = blk(np.maximum(mag - delta, 0)).max(-1), blk(mag + delta).max(-1)
    e_lo, e_hi = np.floor(np.log2(np.maximum(lo, 1e-300))), np.floor(np.log2(hi))
    step = np.repeat(2.0 ** (e_hi - 6), 16, -1).reshape(exact.shape)
    same_e = np.repeat((e_lo == e_hi) & (lo >= 2.0 ** -126), 16, -1).reshape(exact.shape)
    a, b = np.maximum(mag - delta, 0) / step, np.minimum((mag + delta) / step, 127.0)
    no_boundary = np.floor(a + 0.5) == np.floor(b + 0.5)             # no k + 1/2 inside [a, b]
    q = np.minimum(np.floor(mag / step + 0.5), 127)                   # (no tie inside: determined)
    want = np.where(q == 0, 0.0, np.sign(exact) * q * step)
    return want, same_e & no_boundary, step


def test_ttnn_block_float_kv_cache_equals_the_emulated_one(smollm):
    """A bfloat8_b KV cache on the ttnn path and on the emulated mesh store the same block floats.
    Checked on layer 0, whose input (the embedding rows) both sides share, against an independent
    float64 evaluation: wherever every float32 evaluation within the derived bound (above) rounds
    to the same bfloat8_b value, both caches hold exactly that value, bit for bit; elsewhere (a
    value within delta of a rounding boundary, which a float32 reordering may push either way)
    the two differ by at most 2 delta plus one step of the block. Every layer's cache holds block
    floats. (The logits are not compared: one flipped rounding moves them by ~1e-2, and which
    values flip depends on the CPU's sum order.)"""
    pytest.importorskip("torch")
    ids = smollm.tokenizer.encode(PROMPT)[:6]
    cfg = MeshConfig((3, 1))
    be = TtnnMeshBackend(smollm.weights, cfg, ttnn=fake_ttnn(), weight_dtypes=FORMATS_OFF,
                         kv_dtype="bfloat8_b")
    tt = Engine(smollm, backend=be)
    emu = Engine(smollm, backend="galaxy-emulated", mesh=cfg, kv_format="bfloat8_b")
    tt.prefill(ids, tt.new_cache(64))
    emu_cache = emu.new_cache(64)
    emu.prefill(ids, emu_cache)
    S = len(ids)
    sides = [[be.to_host(be._kv[1][0][i], {0: 1})[0, :, :S] for i in (0, 1)],
             [emu_cache.keys(0, 0, S), emu_cache.values(0, 0, S)]]       # [N_kv, S, d] each
    n_det = n_all = 0
    for i, (exact, delta) in enumerate(_layer0_kv_exact(smollm, ids)):
        want, det, step = _bfp8_rounding_if_determined(exact, delta)
        a, b = sides[0][i].astype(np.float64), sides[1][i].astype(np.float64)
        assert np.array_equal(a[det], want[det]) and np.array_equal(b[det], want[det]), i
        assert np.all(np.abs(a - b)[~det] <= 2 * delta[~det] + step[~det]), i
        n_det, n_all = n_det + det.sum(), n_all + det.size
    assert n_det >= 0.9 * n_all                       # the exact check covers most values (power)
    k = be.to_host(be._kv[1][5][0], {0: 1})[0, :, :S]                # layer 5 keys [N_kv, S, d]
    assert np.array_equal(k, blockfloat_padded(np.ascontiguousarray(k), "bfloat8_b"))
    assert np.abs(k).max() > 0


def test_ttnn_refuses_a_paged_cache(smollm):
    pytest.importorskip("torch")
    eng = Engine(smollm, backend=TtnnMeshBackend(smollm.weights, MeshConfig((1, 1)), ttnn=fake_ttnn()))
    with pytest.raises(LlamanbError, match="contiguous KV cache"):
        eng.prefill([1, 2, 3], eng.new_cache(64, block=16, n_blocks=4))


def test_the_ttnn_path_on_tenstorrents_simulated_ttnn(smollm):
    """TtnnMeshBackend's QKV, WO and MLP calls on tt-lang-sim's ttnnsim (llamanb.mesh.ttnnsim_mesh:
    its mesh device, from_torch/to_torch with ShardTensor2dMesh, matmul, add, multiply, all_reduce
    and all_gather with cluster_axis; reduce_scatter composed from its all_reduce). Each result
    within the derived float32 bound of float64 on the same weights (gamma_K |x||W|, and its
    propagation through SwiGLU with the measured error of torch's sigmoid)."""
    from llamanb.mesh.ttlang import ttlang_available

    if not ttlang_available():                 # imports ttl through llamanb (see load_ttlang)
        pytest.skip("tt-lang-sim is not installed (the ttlang extra)")
    import torch

    from llamanb.mesh.ttnnsim_mesh import simulated_ttnn

    t = simulated_ttnn()
    cfg, c = MeshConfig((3, 2)), smollm.config
    tt = TtnnMeshBackend(smollm.weights, cfg, ttnn=t, weight_dtypes=FORMATS_OFF)
    rng = np.random.default_rng(2)
    h = rng.standard_normal((5, c.hidden)).astype(np.float32)
    got = tt.to_host(tt.mlp(7, tt.to_device(h, {1: 1})), {1: 1})
    lw = smollm.weights.layers[7]
    w1, w3, w2 = lw.w_gate_up[:c.ffn].T, lw.w_gate_up[c.ffn:].T, lw.w_down.T
    g, u = (h @ w1)[:, :64], (h @ w3)[:, :64]
    silu_torch = lambda a, b: (torch.from_numpy(a) * torch.sigmoid(torch.from_numpy(a)) * torch.from_numpy(b)).numpy()  # noqa: E731
    y, dy = swiglu_bound(h, w1, w3, w2, 2 * eval_error(silu_torch, lambda a, b: silu64(a) * b, g, u))
    assert np.all(np.abs(got - y) <= dy)
    assert [c_[0] for c_ in t.calls if c_[0] != "from_torch"] == [
        "matmul", "reduce_scatter", "matmul", "reduce_scatter", "multiply", "all_gather", "matmul", "all_reduce"]
    q = tt.to_host(tt.qkv(3, tt.to_device(h, {1: 1})), {0: 1})        # the P head groups side by side
    w = tt.to_host(tt.attn_weights(3)["wqkv"], {0: 1, 1: 0})          # [H, P group columns]
    assert np.all(np.abs(q - h.astype(np.float64) @ w.astype(np.float64)) <= matmul_bound(h, w))
    attn = rng.standard_normal((5, c.q_dim)).astype(np.float32)
    o = tt.to_host(tt.wo(3, tt.to_device(attn, {0: 1})), {1: 1})
    wo = smollm.weights.layers[3].wo.T
    assert np.all(np.abs(o - attn.astype(np.float64) @ wo.astype(np.float64)) <= matmul_bound(attn, wo))
    assert [c_[1] for c_ in t.calls if c_[0] == "all_reduce"][-2:] == [1, 0]

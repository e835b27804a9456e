"""The cuda backend on a real NVIDIA GPU, in one run of under 5 minutes; run it through
scripts/gpu_check.sh (interpreter, one timeout, $OUT). NOT yet run on hardware: no GPU was lent to
the sessions that wrote it. Nothing is stored in the project by this script: a person copies what
it measured, with the card's name and the date, into the course.

    versions     python, numpy, numba, numba-cuda, CuPy, torch, transformers, the device (first)
    launch       one kernel launch (silu_mul) against numpy                   (all --probe does)
    cpp          the CUDA C++ form (kernels/cuda/llama_kernels.cu) through CuPy's RawModule beside
                 the numba-cuda kernels: gemm_nt, softmax_rows, argmax_decode (incl. NaN rows)
    gemm         the course's gemm_nt against cuBLAS (CuPy) at the models' projection shapes:
                 both within gamma_K sum|a w| of float64, and each one's time
    agree        teacher-forced agreement with transformers, fp32, TF32 off, same GPU, same
                 random weights: a prompt of P tokens, then D decode steps each fed the next token
                 of a fixed random sequence (not the model's choice); at every one of the D + 1
                 steps the max relative logit error (max |l - l_hf| / max |l_hf|) and whether
                 the argmax agrees; for projections through cuBLAS and through gemm_nt
    batch        a mixed continuous-batching step (prompts of different lengths prefilled in ONE
                 step), then decode steps of all of them together, against each sequence alone
    speed        decode at batch 1 beside transformers' eager decode on the same card; batch 8
                 and 32 decode throughput beside the card's memory roofline (bytes a decode step
                 must read over a measured device-to-device copy bandwidth)

Random weights are drawn on the device (torch's CUDA generator) at SmolLM2-135M and Llama-3.2-1B
shapes: the real checkpoints cannot travel to a GPU machine without a registry.

`--dry-run` runs every check's code with no GPU: backend cuda-simulated (numba-cuda's
simulator), tiny configs, torch on the CPU; numpy stands in for cuBLAS and for the device copy.
Its agreement numbers are real (the same weights through different code); its timings and
roofline mean nothing and are labelled so. Exit status: 0 every check ok, 1 a check failed,
2 bad arguments (one line).
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

USAGE = "gpu_check.py [--probe] [--dry-run] [--out DIR] [--budget SECONDS]"


class Args:
    def __init__(self, argv):
        self.probe = self.dry = False
        self.out = os.environ.get("OUT") or None
        self.budget = None
        it = iter(argv)
        for a in it:
            if a == "--probe":
                self.probe = True
            elif a == "--dry-run":
                self.dry = True
            elif a in ("--out", "--budget"):
                v = next(it, None)
                if v is None:
                    raise SystemExit(_bad(f"{a} needs a value"))
                if a == "--out":
                    self.out = v
                else:
                    try:
                        self.budget = float(v)
                    except ValueError:
                        raise SystemExit(_bad(f"--budget needs seconds, got {v!r}")) from None
                    if not self.budget > 0:
                        raise SystemExit(_bad(f"--budget needs seconds > 0, got {v!r}"))
            elif a in ("-h", "--help"):
                print(USAGE)
                raise SystemExit(0)
            else:
                raise SystemExit(_bad(f"unknown argument {a!r}"))
        if self.budget is None:
            self.budget = 50.0 if self.probe else 280.0


def _bad(msg: str) -> int:
    print(f"gpu_check: {msg} (usage: {USAGE})", file=sys.stderr)
    return 2


class Report:
    """Records, printed as JSON lines and rewritten whole to OUT/gpu_check.json after each one
    (a temporary file renamed over it), so a run cut short by the timeout leaves every finished
    record and never a half-written file."""

    def __init__(self, out: str | None, dry: bool):
        self.rows, self.dry = [], dry
        self.path = None
        if out:
            os.makedirs(out, exist_ok=True)
            self.path = os.path.join(out, "gpu_check.json")

    def __call__(self, **kw):
        if self.dry:
            kw["dry_run"] = True
        self.rows.append(kw)
        print(json.dumps(kw), flush=True)
        if self.path:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(self.rows, f, indent=1)
            os.replace(tmp, self.path)

    @property
    def ok(self) -> bool:
        return all(r.get("ok", True) for r in self.rows)


# --- environment ---------------------------------------------------------------------------------
def versions(rep, dry):
    from importlib import metadata

    def ver(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None
    v = {d: ver(d) for d in ("numpy", "numba", "numba-cuda", "cupy-cuda12x", "cupy-cuda13x",
                              "cupy", "torch", "transformers")}
    import torch

    if dry:
        from llamanb.cuda import runtime

        runtime.load(simulated=True)
        device = "none: --dry-run (numba-cuda's simulator on the CPU)"
    else:
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    rep(check="versions", python=platform.python_version(), executable=sys.executable,
        device=device, torch_cuda=getattr(torch.version, "cuda", None),
        **{k: x for k, x in v.items() if x is not None},
        ok=device is not None)
    if device is None:
        raise SystemExit(1)
    if not dry:
        # fp32 everywhere: no TF32 in torch's matmuls or convolutions (CuPy uses TF32 only
        # when CUPY_TF32=1 is set; the check unsets it in gpu_check.sh)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def kernels_and_cuda(dry):
    from llamanb.cuda import kernels, runtime

    cuda = runtime.load(simulated=dry)
    return cuda, kernels.build(kernels.SIM_TILE if dry else kernels.GPU_TILE)


def launch_probe(rep, dry):
    from llamanb.cuda import launch

    cuda, k = kernels_and_cuda(dry)
    rng = np.random.default_rng(0)
    R, F = 3, 50
    gu = rng.standard_normal((R, 2 * F)).astype(np.float32)
    out = cuda.device_array((R, F), np.float32)
    t = time.perf_counter()
    k.silu_mul[launch.elementwise(R * F, k.tile)](cuda.to_device(gu), out)
    got = out.copy_to_host()
    g = gu[:, :F].astype(np.float64)
    want = g / (1 + np.exp(-g)) * gu[:, F:]
    err = float(np.abs(got - want).max())
    rep(check="one kernel launch (silu_mul vs numpy)", max_abs_err=err, ok=err <= 1e-5,
        first_launch_s=round(time.perf_counter() - t, 3))


# --- CUDA C++ beside numba -----------------------------------------------------------------------
def _dims(launch_cfg):
    """(grid, block) from llamanb.cuda.launch as the tuples CuPy's RawKernel call takes."""
    return tuple(x if isinstance(x, tuple) else (x,) for x in launch_cfg)


def cuda_cpp_vs_numba(rep):
    import cupy as cp

    from llamanb.cuda import launch
    from llamanb.cuda.compile import SOURCE

    cuda, k = kernels_and_cuda(False)
    mod = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",))
    rng = np.random.default_rng(0)
    M, K, N, T = 37, 200, 129, k.tile
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    c_nb = cuda.device_array((M, N), np.float32)
    k.gemm_nt[launch.gemm_nt(M, N, T)](cuda.to_device(a), cuda.to_device(w), c_nb, 0)
    c_cp = cp.zeros((M, N), cp.float32)
    mod.get_function("gemm_nt")(*_dims(launch.gemm_nt(M, N, T)), (cp.asarray(a), cp.asarray(w), c_cp,
                                np.int32(M), np.int32(N), np.int32(K), np.int32(0)))
    exact, mag = a.astype(np.float64) @ w.astype(np.float64).T, np.abs(a) @ np.abs(w).T
    gam = K * 2.0 ** -24 / (1 - K * 2.0 ** -24)
    e_nb = float((np.abs(c_nb.copy_to_host() - exact) / mag).max())
    e_cp = float((np.abs(cp.asnumpy(c_cp) - exact) / mag).max())
    rep(check="gemm_nt numba vs CUDA C++", err_over_sum_abs_numba=e_nb, err_over_sum_abs_cpp=e_cp,
        gamma_K=gam, ok=bool(e_nb <= gam and e_cp <= gam))
    rows, L = 24, 300
    s = rng.standard_normal((rows, L)).astype(np.float32)
    lens = rng.integers(0, L + 1, rows).astype(np.int32)
    s_nb = cuda.to_device(s)
    k.softmax_rows[launch.row_warps(rows, T)](s_nb, cuda.to_device(lens), 1)
    s_cp = cp.asarray(s)
    mod.get_function("softmax_rows")(*_dims(launch.row_warps(rows, T)), (s_cp, cp.asarray(lens),
                                     np.int32(rows), np.int32(1), np.int32(L)))
    a_nb, a_cp = s_nb.copy_to_host(), cp.asnumpy(s_cp)
    diff = max(float(np.abs(a_nb[r, :n] - a_cp[r, :n]).max()) if n else 0.0
               for r, n in enumerate(lens))
    rep(check="softmax_rows numba vs CUDA C++", max_abs_diff=diff, ok=diff <= 1e-5)
    # argmax_decode, both forms, on rows with NaN and -inf (the emb[V] bug) and ordinary ones
    V, H = 300, 8
    lg = rng.standard_normal((6, V)).astype(np.float32)
    lg[0], lg[1], lg[2, 29], lg[3, [30, 4]] = np.nan, -np.inf, np.nan, np.inf
    emb = rng.standard_normal((V, H)).astype(np.float32)
    want = [int(np.argmax(r)) for r in lg]
    lens = np.full(6, 3, np.int32)
    tok_nb, x_nb, len_nb = cuda.to_device(np.full(6, -2, np.int32)), cuda.to_device(
        np.zeros((6, H), np.float32)), cuda.to_device(lens)
    k.argmax_decode[launch.argmax_decode(6, T)](cuda.to_device(lg), len_nb, tok_nb, 2, 64,
                                                cuda.to_device(emb), x_nb)
    tok_cp, x_cp, len_cp = cp.full(6, -2, cp.int32), cp.zeros((6, H), cp.float32), cp.asarray(lens)
    mod.get_function("argmax_decode")(*_dims(launch.argmax_decode(6, T)), (
        cp.asarray(lg), len_cp, tok_cp, np.int32(V), np.int32(2), np.int32(64), cp.asarray(emb),
        x_cp, np.int32(H)))
    got_nb, got_cp = tok_nb.copy_to_host().tolist(), cp.asnumpy(tok_cp).tolist()
    rep(check="argmax_decode numba and CUDA C++ vs np.argmax (NaN, -inf, +inf rows)",
        numpy=want, numba=got_nb, cpp=got_cp,
        ok=got_nb == want == got_cp and np.array_equal(x_nb.copy_to_host(), emb[want])
        and np.array_equal(cp.asnumpy(x_cp), emb[want]))


# --- gemm_nt vs cuBLAS ---------------------------------------------------------------------------
def gemm_vs_cublas(rep, dry, cfgs, Ms):
    """Each projection shape of each config, for M rows: gemm_nt and cuBLAS (CuPy's matmul; numpy
    in a dry run) both within gamma_K sum|a||w| of the float64 product, and their times."""
    from llamanb.cuda import launch

    cuda, k = kernels_and_cuda(dry)
    rng = np.random.default_rng(2)
    for name, c in cfgs:
        shapes = {"qkv": ((c.n_heads + 2 * c.n_kv_heads) * c.head_dim, c.hidden),
                  "o": (c.hidden, c.n_heads * c.head_dim), "gate_up": (2 * c.ffn, c.hidden),
                  "down": (c.hidden, c.ffn)}
        for M in Ms:
            worst_k = worst_b = 0.0
            t_k = t_b = 0.0
            gam_max = 0.0
            for N, K in shapes.values():
                a = rng.standard_normal((M, K)).astype(np.float32)
                w = rng.standard_normal((N, K)).astype(np.float32)
                exact = a.astype(np.float64) @ w.astype(np.float64).T
                mag = np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
                gam = K * 2.0 ** -24 / (1 - K * 2.0 ** -24)
                gam_max = max(gam_max, gam)
                ad, wd, cd = cuda.to_device(a), cuda.to_device(w), cuda.device_array((M, N), np.float32)
                grid = launch.gemm_nt(M, N, k.tile)
                if not dry:                                        # compile / warm
                    k.gemm_nt[grid](ad, wd, cd, 0)
                reps = 1 if dry else 20
                _sync(dry)
                t0 = time.perf_counter()
                for _ in range(reps):
                    k.gemm_nt[grid](ad, wd, cd, 0)
                _sync(dry)
                t_k += (time.perf_counter() - t0) / reps
                got_k = cd.copy_to_host()
                if dry:
                    t0 = time.perf_counter()
                    got_b = a @ w.T
                    t_b += time.perf_counter() - t0
                else:
                    import cupy as cp

                    A, W = cp.asarray(a), cp.asarray(w)
                    C = A @ W.T
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        C = A @ W.T
                    cp.cuda.Device().synchronize()
                    t_b += (time.perf_counter() - t0) / reps
                    got_b = cp.asnumpy(C)
                worst_k = max(worst_k, float((np.abs(got_k - exact) / gam / mag).max()))
                worst_b = max(worst_b, float((np.abs(got_b - exact) / gam / mag).max()))
            rep(check=f"{name}: gemm_nt vs {'numpy (dry run)' if dry else 'cuBLAS'}, M={M}",
                err_over_gamma_sum_abs_gemm_nt=worst_k, err_over_gamma_sum_abs_blas=worst_b,
                ms_per_layer_gemm_nt=round(1e3 * t_k, 4), ms_per_layer_blas=round(1e3 * t_b, 4),
                timings_meaningful=not dry, ok=worst_k <= 1 and worst_b <= 1)


# --- models --------------------------------------------------------------------------------------
def device_model(cfg, seed, device):
    """Random weights drawn by torch's generator on `device` (the GPU: no host RNG time at 1B)."""
    import torch

    from llamanb.cuda.random_model import random_model

    gen = torch.Generator(device=device).manual_seed(seed)

    def draw(shape, kind):
        if kind == "norm":
            t = torch.rand(shape, generator=gen, device=device) + 0.5
        else:
            t = torch.randn(shape, generator=gen, device=device) * 0.02
        return t.float().cpu().numpy()
    return random_model(cfg, seed, draw=draw)


def hf_model(model, device):
    """transformers' LlamaForCausalLM, fp32, eager attention, holding exactly `model`'s weights."""
    import torch
    from transformers import LlamaConfig as HFConfig, LlamaForCausalLM

    c, w = model.config, model.weights
    hc = HFConfig(**c.to_hf())
    hc._attn_implementation = "eager"
    with torch.device(device):
        hf = LlamaForCausalLM(hc).to(torch.float32)
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    sd = {"model.embed_tokens.weight": w.embed, "model.norm.weight": w.final_norm}
    if not c.tie_embeddings:
        sd["lm_head.weight"] = w.lm_head
    for i, lw in enumerate(w.layers):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": lw.attn_norm,
                   p + "post_attention_layernorm.weight": lw.ffn_norm,
                   p + "self_attn.q_proj.weight": lw.wqkv[:q],
                   p + "self_attn.k_proj.weight": lw.wqkv[q:q + kv],
                   p + "self_attn.v_proj.weight": lw.wqkv[q + kv:],
                   p + "self_attn.o_proj.weight": lw.wo,
                   p + "mlp.gate_proj.weight": lw.w_gate_up[:c.ffn],
                   p + "mlp.up_proj.weight": lw.w_gate_up[c.ffn:],
                   p + "mlp.down_proj.weight": lw.w_down})
    missing, unexpected = hf.load_state_dict(
        {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
    left = [m for m in missing if not (c.tie_embeddings and m == "lm_head.weight")]
    if left or unexpected:
        raise RuntimeError(f"weights not mapped onto transformers' Llama: missing {left}, "
                           f"unexpected {unexpected}")
    if c.tie_embeddings:
        hf.tie_weights()
    return hf.eval()


def _sync(dry):
    if not dry:
        import torch
        from numba import cuda

        cuda.synchronize()
        torch.cuda.synchronize()


def _argmax_ok(got, ref, err_abs):
    """The argmax agrees, or the reference's top two are within twice the measured error of
    each other (a near tie that float32 rounding may flip: reported, not failed)."""
    a, b = int(np.argmax(got)), int(np.argmax(ref))
    if a == b:
        return True, False
    return False, bool(ref[b] - ref[a] <= 2 * err_abs)


def teacher_forced(rep, name, model, hf, backend, device, P, D, gemm, tol):
    import torch

    from llamanb import Engine

    rng = np.random.default_rng(11)
    seq = [int(t) for t in rng.integers(3, model.config.vocab, P + D)]
    with torch.no_grad():
        ref = hf(torch.tensor([seq], device=device)).logits[0, P - 1:].float().cpu().numpy()
    eng = Engine(model, backend, gemm=gemm, write_host_cache=False)
    cache = eng.new_cache(P + D + 1)
    got = [eng.prefill(seq[:P], cache)]
    for i in range(D):
        got.append(eng.decode(seq[P + i], cache))
    rel, agree, ties = [], [], []
    for g, r in zip(got, ref):
        e = float(np.abs(g - r).max())
        rel.append(e / float(np.abs(r).max()))
        same, tie = _argmax_ok(g, r, e)
        agree.append(same)
        ties.append(tie)
    rep(check=f"{name}: teacher-forced vs transformers (fp32, TF32 off), gemm={gemm}",
        prompt=P, decode_steps=D, max_rel_logit_err=max(rel), rel_logit_err_per_step=rel,
        argmax_agree_steps=int(sum(agree)), steps=len(agree), near_tie_flips=int(sum(ties)),
        tolerance=tol, ok=max(rel) <= tol and all(a or t for a, t in zip(agree, ties)))


def mixed_batch(rep, name, model, backend, lengths, D, tol):
    """Prompts of `lengths` prefilled in ONE step (one segment each), then D steps decoding all
    of them together; every logit row against the same sequence run alone on the same backend."""
    from llamanb import Engine
    from llamanb.engine.step import Step

    rng = np.random.default_rng(12)
    n = len(lengths)
    seqs = [[int(t) for t in rng.integers(3, model.config.vocab, L + D)] for L in lengths]
    eng = Engine(model, backend, write_host_cache=False)
    cap = max(lengths) + D + 1
    cache = eng.new_cache(cap, slots=n)
    got = [eng.step(Step.build([(s, 0, seqs[s][:L]) for s, L in enumerate(lengths)]), cache)]
    for i in range(D):
        got.append(eng.step(Step.build([(s, L + i, [seqs[s][L + i]])
                                        for s, L in enumerate(lengths)]), cache))
    rel, agree, ties = 0.0, 0, 0
    for s, L in enumerate(lengths):
        c1 = eng.new_cache(cap)
        alone = [eng.prefill(seqs[s][:L], c1)]
        alone += [eng.decode(seqs[s][L + i], c1) for i in range(D)]
        for t in range(D + 1):
            g, r = got[t][s], alone[t]
            e = float(np.abs(g - r).max())
            rel = max(rel, e / float(np.abs(r).max()))
            same, tie = _argmax_ok(g, r, e)
            agree += same
            ties += tie
    total = n * (D + 1)
    rep(check=f"{name}: mixed batch ({n} prompts of {list(lengths)} in one step, then {D} joint "
              f"decode steps) vs each alone", max_rel_logit_err=rel, argmax_agree=agree,
        rows=total, near_tie_flips=ties, tolerance=tol, ok=rel <= tol and agree + ties == total)


def copy_bandwidth(dry):
    """Bytes per second of a device-to-device copy (read + write counted), 1 GiB; numpy on the
    host in a dry run (meaningless there)."""
    if dry:
        a = np.ones(1 << 22, np.float32)
        b = np.empty_like(a)
        t = time.perf_counter()
        np.copyto(b, a)
        return 2 * a.nbytes / (time.perf_counter() - t)
    import torch

    a = torch.ones(1 << 28, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize()
        best = max(best, 2 * a.numel() * 4 / (time.perf_counter() - t))
    return best


def speed(rep, name, model, hf, backend, device, dry, ctx_len, steps, batches, bw):
    import torch

    from llamanb import Engine
    from llamanb.engine.step import Step

    c = model.config
    rng = np.random.default_rng(13)
    prompt = [int(t) for t in rng.integers(3, c.vocab, ctx_len)]
    eng = Engine(model, backend, write_host_cache=False)
    cache = eng.new_cache(ctx_len + steps + 2)
    eng.prefill(prompt, cache)
    eng.decode(5, cache)                                              # warm
    _sync(dry)
    t = time.perf_counter()
    for _ in range(steps):
        eng.decode(5, cache)
    _sync(dry)
    ours = steps / (time.perf_counter() - t)
    with torch.no_grad():
        out = hf(torch.tensor([prompt], device=device), use_cache=True)
        past, nxt = out.past_key_values, torch.tensor([[5]], device=device)
        past = hf(nxt, past_key_values=past, use_cache=True).past_key_values     # warm
        _sync(dry)
        t = time.perf_counter()
        for _ in range(steps):
            past = hf(nxt, past_key_values=past, use_cache=True).past_key_values
        _sync(dry)
        theirs = steps / (time.perf_counter() - t)
    n_params = sum(a.size for lw in model.weights.layers for a in
                   (lw.wqkv, lw.wo, lw.w_gate_up, lw.w_down, lw.attn_norm, lw.ffn_norm))
    weight_bytes = 4 * (n_params + c.vocab * c.hidden + c.hidden)     # + lm_head, final norm
    kv_bytes_per_pos = 4 * 2 * c.n_layers * c.n_kv_heads * c.head_dim
    label = " DRY RUN: timings meaningless" if dry else ""
    rep(check=f"{name}: decode at batch 1, tokens/s{label}", context=ctx_len, steps=steps,
        cuda_backend=round(ours, 2), transformers_eager=round(theirs, 2),
        ratio=round(ours / theirs, 3), gemm=eng.backend.gemm_mode,
        roofline_tok_s=round(bw / (weight_bytes + kv_bytes_per_pos * ctx_len), 1),
        timings_meaningful=not dry)
    for B in batches:
        cb = eng.new_cache(ctx_len + steps + 2, slots=B)
        for s in range(B):            # one prefill per slot: qkt's grid y is rows x heads,
            eng.prefill(prompt, cb, slot=s)          # at most 65535 (CUDA's gridDim.y limit)
        eng.step(Step.build([(s, ctx_len, [5]) for s in range(B)]), cb)    # warm
        _sync(dry)
        t = time.perf_counter()
        for i in range(steps):
            eng.step(Step.build([(s, ctx_len + 1 + i, [5]) for s in range(B)]), cb)
        _sync(dry)
        tput = B * steps / (time.perf_counter() - t)
        step_bytes = weight_bytes + B * kv_bytes_per_pos * (ctx_len + 1 + steps // 2)
        rep(check=f"{name}: decode throughput at batch {B}, tokens/s{label}", batch=B,
            context=ctx_len, cuda_backend=round(tput, 2), bytes_per_step=int(step_bytes),
            copy_bandwidth_GBps=round(bw / 1e9, 1),
            roofline_tok_s=round(B * bw / step_bytes, 1),
            fraction_of_roofline=round(tput / (B * bw / step_bytes), 4),
            timings_meaningful=not dry)


def tiny_configs():
    from llamanb.model.config import LlamaConfig

    base = dict(n_layers=2, hidden=32, n_heads=2, n_kv_heads=1, head_dim=16, ffn=32, vocab=48,
                rope_theta=1e4, max_seq=64, eos_ids=(2,))
    return [("tiny tied (dry run for smollm2-135m)", LlamaConfig(name="dry-tied",
                                                               tie_embeddings=True, **base)),
            ("tiny untied (dry run for llama3.2-1b)", LlamaConfig(name="dry-untied",
                                                                tie_embeddings=False, **base))]


def main(argv=None) -> int:
    args = Args(sys.argv[1:] if argv is None else argv)
    from llamanb.cuda.backend import simulator_pace

    with simulator_pace(args.dry):          # every launch, the backend's and the checks' own
        return checks(args)


def checks(args) -> int:
    deadline = time.time() + args.budget
    rep = Report(args.out, args.dry)
    dry = args.dry
    versions(rep, dry)
    launch_probe(rep, dry)
    if args.probe:
        return 0 if rep.ok else 1
    from llamanb.model.config import PRESETS

    backend, device = ("cuda-simulated", "cpu") if dry else ("cuda", "cuda")
    cfgs = tiny_configs() if dry else [(p, PRESETS[p]) for p in ("smollm2-135m", "llama3.2-1b")]
    if not dry:
        cuda_cpp_vs_numba(rep)
    # the simulator runs a gemm_nt launch in seconds: one config, one M there
    gemm_vs_cublas(rep, dry, cfgs[:1] if dry else cfgs, Ms=(3,) if dry else (1, 32))
    # sizes: (prompt P, decode steps D, mixed-batch prompt lengths, decode context, timed steps)
    P, D, lens, ctx, steps = (10, 3, (5, 2, 7), 6, 2) if dry else (384, 32, (200, 37, 91, 5), 256, 32)
    batches = (2,) if dry else (8, 32)
    tol = 1e-4          # max |logit error| / max |logit|: float32 through different sum orders
    bw = copy_bandwidth(dry)
    for i, (name, cfg) in enumerate(cfgs):
        if time.time() > deadline - (20 if dry else 90):
            rep(check=f"{name}: skipped, out of the time budget", ok=False)
            continue
        t0 = time.time()
        model = device_model(cfg, seed=i, device=device)
        hf = hf_model(model, device)
        rep(check=f"{name}: random weights drawn on the {device}", setup_s=round(time.time() - t0, 1))
        teacher_forced(rep, name, model, hf, backend, device, P, D, "auto", tol)
        if i == 0:
            # the course's own gemm_nt for every projection (the simulator: a shorter run)
            teacher_forced(rep, name, model, hf, backend, device, *((2, 1) if dry else (P, D)),
                           "kernel", tol)
            mixed_batch(rep, name, model, backend, lens, 2 if dry else 8, tol)
        speed(rep, name, model, hf, backend, device, dry, ctx, steps, batches, bw)
        del model, hf
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())

"""The cuda backend on a real NVIDIA GPU, in one run of under 5 minutes (an H100: planned, NOT yet
run -- no GPU was lent to the session that wrote it). Prints one JSON record per check and a
summary; writes them to $OUT/gpu_check.json when OUT is set. Nothing is stored in the project by
this script: a person copies what it measured, with the card's name, into the README.

    1. the CUDA C++ form (kernels/cuda/llama_kernels.cu) through CuPy's RawModule beside the
       numba-cuda kernels on the same inputs: gemm_nt, softmax_rows (they must agree)
    2. random weights from a seed, drawn ON THE DEVICE (torch's CUDA generator), at SmolLM2-135M
       and Llama-3.2-1B shapes (the 98 MB GGUF cannot travel to the GPU machine)
    3. per shape: the cuda backend vs the numpy engine (host) and vs transformers on the same GPU
       with the same weights: max |logit difference| and greedy agreement over a few steps
    4. per shape: prefill and decode tokens/s of the cuda backend and of transformers (torch),
       and the batching speed-up (8 sequences decoding in one step vs one)

`--dry-run` runs the same code with no GPU: backend cuda-simulated, a tiny config, torch on the
CPU, no CuPy -- it checks the script itself, and its numbers mean nothing (labelled so).
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def record(rows, **kw):
    rows.append(kw)
    print(json.dumps(kw), flush=True)


def cuda_cpp_vs_numba(rows):
    import cupy as cp
    from numba import cuda

    from llamanb.cuda import kernels
    from llamanb.cuda.compile import SOURCE

    mod = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",))
    k = kernels.build(kernels.GPU_TILE)
    rng = np.random.default_rng(0)
    M, K, N = 37, 200, 129
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    c_nb = cuda.device_array((M, N), np.float32)
    T = k.tile
    k.gemm_nt[(-(-N // T), -(-M // T)), (T, T)](cuda.to_device(a), cuda.to_device(w), c_nb, 0)
    c_cp = cp.zeros((M, N), cp.float32)
    mod.get_function("gemm_nt")((-(-N // T), -(-M // T)), (T, T),
                                (cp.asarray(a), cp.asarray(w), c_cp, np.int32(M), np.int32(N),
                                 np.int32(K), np.int32(0)))
    g = np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    gam = K * 2.0 ** -24 / (1 - K * 2.0 ** -24)
    exact = a.astype(np.float64) @ w.astype(np.float64).T
    e_nb = float((np.abs(c_nb.copy_to_host() - exact) / g).max())
    e_cp = float((np.abs(cp.asnumpy(c_cp) - exact) / g).max())
    record(rows, check="gemm_nt numba vs CUDA C++", err_over_sum_abs_numba=e_nb,
           err_over_sum_abs_cpp=e_cp, gamma_K=gam, ok=bool(e_nb <= gam and e_cp <= gam))
    rows_, L = 24, 300
    s = rng.standard_normal((rows_, L)).astype(np.float32)
    lens = rng.integers(0, L + 1, rows_).astype(np.int32)
    s_nb = cuda.to_device(s)
    k.softmax_rows[-(-rows_ // k.warps_per_block), 32 * k.warps_per_block](s_nb, cuda.to_device(lens), 1)
    s_cp = cp.asarray(s)
    mod.get_function("softmax_rows")((-(-rows_ // k.warps_per_block),), (k.block,),
                                     (s_cp, cp.asarray(lens), np.int32(rows_), np.int32(1), np.int32(L)))
    a_nb, a_cp = s_nb.copy_to_host(), cp.asnumpy(s_cp)
    diff = max(float(np.abs(a_nb[r, :n] - a_cp[r, :n]).max()) if n else 0.0 for r, n in enumerate(lens))
    record(rows, check="softmax_rows numba vs CUDA C++", max_abs_diff=diff, ok=diff <= 1e-5)


DRY = "--dry-run" in sys.argv
BACKEND = "cuda-simulated" if DRY else "cuda"
DEVICE = "cpu" if DRY else "cuda"


def device_weights(cfg, seed):
    import torch

    from llamanb.cuda.random_model import random_model

    gen = torch.Generator(device=DEVICE).manual_seed(seed)

    def draw(shape, kind):
        if kind == "norm":
            t = torch.rand(shape, generator=gen, device=DEVICE) + 0.5
        else:
            t = torch.randn(shape, generator=gen, device=DEVICE) * 0.02
        return t.float().cpu().numpy()
    return random_model(cfg, seed, draw=draw)


def hf_model(model):
    import torch
    from transformers import LlamaConfig as HFConfig, LlamaForCausalLM

    c, w = model.config, model.weights
    hf = LlamaForCausalLM(HFConfig(**c.to_hf())).to(torch.float32)
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    sd = {"model.embed_tokens.weight": w.embed, "model.norm.weight": w.final_norm,
          "lm_head.weight": w.lm_head}
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
    hf.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()},
                       strict=False)
    return hf.to(DEVICE).eval()


def sync():
    import torch
    from numba import cuda

    if not DRY:
        cuda.synchronize()
        torch.cuda.synchronize()


def one_shape(rows, preset, prompt_len=64, decode_steps=16, batch=8):
    import torch

    from llamanb import Engine
    from llamanb.model.config import PRESETS, LlamaConfig
    from llamanb.engine.step import Step

    if DRY:
        cfg = LlamaConfig(name="dry-run", n_layers=1, hidden=32, n_heads=2, n_kv_heads=1,
                          head_dim=16, ffn=32, vocab=48, rope_theta=1e4, max_seq=64,
                          tie_embeddings=preset.startswith("smollm"), eos_ids=(2,))
        prompt_len, decode_steps, batch = 4, 2, 2
    else:
        cfg = PRESETS[preset]
    t0 = time.time()
    model = device_weights(cfg, seed=0)
    ec, en = Engine(model, BACKEND), Engine(model)
    hf = hf_model(model)
    rng = np.random.default_rng(1)
    ids = [int(t) for t in rng.integers(3, cfg.vocab, prompt_len)]
    # --- agreement: prefill + greedy steps on all three
    cc, cn = ec.new_cache(prompt_len + decode_steps + 1), en.new_cache(prompt_len + decode_steps + 1)
    lc, ln = ec.prefill(ids, cc), en.prefill(ids, cn)
    with torch.no_grad():
        lh = hf(torch.tensor([ids], device=DEVICE)).logits[0, -1].float().cpu().numpy()
    toks_c, toks_n, worst_n, worst_h = [], [], 0.0, float(np.abs(lc - lh).max())
    scale = float(np.abs(ln).max())
    for _ in range(min(4, decode_steps)):
        worst_n = max(worst_n, float(np.abs(lc - ln).max()))
        t = int(np.argmax(lc))
        toks_c.append(t)
        toks_n.append(int(np.argmax(ln)))
        lc, ln = ec.decode(t, cc), en.decode(t, cn)
    record(rows, check=f"{preset}: cuda vs numpy engine / transformers (same GPU, same weights)",
           max_abs_logit_diff_numpy=worst_n, max_abs_logit_diff_hf_prefill=worst_h,
           greedy_equal_numpy=toks_c == toks_n, logit_scale=scale,
           setup_s=round(time.time() - t0, 1))
    # --- speed: prefill and decode tokens/s, cuda backend vs transformers. The timed backend
    # keeps K/V on the device only (write_host_cache=False: no copy back to the host store per
    # layer), as a serving engine would.
    ec = Engine(model, BACKEND, write_host_cache=False)
    cc = ec.new_cache(prompt_len + decode_steps + 1)
    sync(); t = time.perf_counter(); ec.prefill(ids, cc); sync()
    pre_c = prompt_len / (time.perf_counter() - t)
    tok = 5
    t = time.perf_counter()
    for _ in range(decode_steps):
        ec.decode(tok, cc)
    sync(); dec_c = decode_steps / (time.perf_counter() - t)
    with torch.no_grad():
        x = torch.tensor([ids], device=DEVICE)
        sync(); t = time.perf_counter()
        out = hf(x, use_cache=True); sync()
        pre_h = prompt_len / (time.perf_counter() - t)
        past, nxt = out.past_key_values, torch.tensor([[tok]], device=DEVICE)
        t = time.perf_counter()
        for _ in range(decode_steps):
            past = hf(nxt, past_key_values=past, use_cache=True).past_key_values
        sync(); dec_h = decode_steps / (time.perf_counter() - t)
    # --- batching: `batch` sequences decoding in one step vs one sequence
    cb = ec.new_cache(prompt_len + decode_steps + 1, slots=batch)
    n0 = min(8, prompt_len)
    for s in range(batch):
        ec.prefill(ids[:n0], cb, slot=s)
    sync(); t = time.perf_counter()
    for i in range(decode_steps):
        ec.step(Step.build([(s, n0 + i, [tok]) for s in range(batch)]), cb)
    sync(); dec_b = batch * decode_steps / (time.perf_counter() - t)
    record(rows, check=f"{preset}: speed (tokens/s)" + (" DRY RUN, meaningless" if DRY else ""),
           device="CUDA simulator on the CPU" if DRY else torch.cuda.get_device_name(),
           prefill_cuda=round(pre_c, 1), prefill_torch=round(pre_h, 1),
           decode_cuda=round(dec_c, 1), decode_torch=round(dec_h, 1),
           decode_cuda_batch=round(dec_b, 1), batch=batch, batching_speedup=round(dec_b / dec_c, 2),
           gemm=ec.backend.gemm_mode)


def main():
    rows = []
    deadline = time.time() + 270
    import torch

    if DRY:
        from llamanb.cuda import runtime

        runtime.load(simulated=True)
        record(rows, check="device", name="none: --dry-run (CUDA simulator)", torch=torch.__version__)
    else:
        record(rows, check="device", name=torch.cuda.get_device_name(), torch=torch.__version__)
        cuda_cpp_vs_numba(rows)
    for preset in ("smollm2-135m", "llama3.2-1b"):
        if time.time() > deadline - 60:
            record(rows, check=f"{preset}: skipped, out of the 5-minute budget")
            continue
        one_shape(rows, preset)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_check.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: llamanb
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
#   llamanb:
#     builds: the parameters and bytes of three Llamas, and the FLOPs of a prefill and
#       a decode step, against transformers and torch's counter
#     modules:
#     - llamanb.model.config
#     - llamanb.model.flops
#     part: I
# ---

# %% [markdown]
# # 01b · What a Llama costs: parameters, bytes and FLOPs
#
# **What you will build.** Notebook 01 ran the model; here you count what it costs, which is what
# decides where it can run and how fast. First the parameters and bytes: every weight of a block by
# hand, for the 135 M model on this laptop, for Llama-3.2-1B and for Llama 3 70B, then the weights
# and KV cache in bytes, checked against the tensors loaded and against transformers' own model.
# Then the floating-point work of a 2048-token prefill of Llama-3.2-1B, op by op by hand, against
# `llamanb.model.flops` and against torch's own `FlopCounterMode` running transformers'
# `LlamaForCausalLM` on the *meta* device. You will see which ops dominate (the MLP), what the
# causal triangle and a one-row LM head save, and why decode, the same weights on one row, does
# about one FLOP per byte of weight it reads.
#
# Every count below is an `assert`: against the published config, against torch and transformers,
# against `llamanb.model.flops`, or against closed-form arithmetic.

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch

from IPython.display import Markdown, display

from llamanb import LLAMA3_70B, LLAMA32_1B, SMOLLM2_135M, Engine, LlamaConfig, load_model
from llamanb.model import flops

warnings.filterwarnings("ignore")

MODELS = [SMOLLM2_135M, LLAMA32_1B, LLAMA3_70B]       # the symbols: chapter 01, section 1

# %% [markdown]
# ## 1. Parameters and memory
#
# ### 1.1 Per component, by hand
#
# A projection from width `a` to width `b` is an `[b, a]` matrix (HF stores weights as
# `[out, in]` and computes `x @ W.T`), so it has `a·b` parameters and no bias. One block holds:
#
# | component | shape `[out, in]` | parameters |
# |---|---|---|
# | input RMSNorm weight | `[H]` | H |
# | q_proj | `[N_h·d_h, H]` | H·N_h·d_h |
# | k_proj, v_proj | `[N_kv·d_h, H]` each | H·N_kv·d_h each |
# | o_proj | `[H, N_h·d_h]` | N_h·d_h·H |
# | post-attention RMSNorm weight | `[H]` | H |
# | gate_proj, up_proj | `[D_ff, H]` each | H·D_ff each |
# | down_proj | `[H, D_ff]` | D_ff·H |
#
# Outside the blocks: the embedding table `[V, H]`, the final RMSNorm `[H]`, and an LM head
# `[V, H]`, which is a parameter of its own only when the embeddings are *untied*. Tied models
# reuse the embedding table as the LM head.

# %%
def params_by_hand(c: LlamaConfig) -> dict[str, int]:
    H, L, V, F = c.hidden, c.n_layers, c.vocab, c.ffn
    q_width, kv_width = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    per_layer = {
        "attn_norm": H,
        "q_proj": H * q_width,
        "k_proj": H * kv_width,
        "v_proj": H * kv_width,
        "o_proj": q_width * H,
        "ffn_norm": H,
        "gate_proj": H * F,
        "up_proj": H * F,
        "down_proj": F * H,
    }
    whole = {"embedding": V * H}
    whole.update({k: L * n for k, n in per_layer.items()})
    whole["final_norm"] = H
    whole["lm_head"] = 0 if c.tie_embeddings else V * H
    return whole

ours = {c.name: params_by_hand(c) for c in MODELS}
table = "| component (whole model) | " + " | ".join(ours) + " |\n|---|" + "---:|" * len(ours) + "\n"
for k in ours[MODELS[0].name]:
    table += f"| {k} | " + " | ".join(f"{p[k]:,}" for p in ours.values()) + " |\n"
table += "| **one block** | " + " | ".join(f"{c.layer_params():,}" for c in MODELS) + " |\n"
table += "| **total** | " + " | ".join(f"{sum(p.values()):,}" for p in ours.values()) + " |\n"
display(Markdown(table))

# %% [markdown]
# `llamanb.model.config` has the same accounting (`param_breakdown`, `layer_params`, `n_params`). It must
# agree with the formulas above, component by component:

# %%
for c in MODELS:
    mine = ours[c.name]
    assert mine == c.param_breakdown(), c.name
    assert sum(mine.values()) == c.n_params()
    layer_keys = ["attn_norm", "q_proj", "k_proj", "v_proj", "o_proj", "ffn_norm",
                  "gate_proj", "up_proj", "down_proj"]
    assert sum(mine[k] for k in layer_keys) == c.n_layers * c.layer_params()
    print(f"{c.name:22s} by hand {sum(mine.values()):>15,}   LlamaConfig {c.n_params():>15,}")

# %% [markdown]
# ### 1.2 Llama-3.2-1B is tied
#
# Its published `config.json` (`meta-llama/Llama-3.2-1B-Instruct`) says `"tie_word_embeddings":
# true`: the logits are computed with the embedding table itself, so the LM head adds no parameter.
# The fields that fix the count, as published, and the count with and without the tie:

# %%
published_llama32_1b = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                        "vocab_size": 128256, "tie_word_embeddings": True}
pc = published_llama32_1b
assert (LLAMA32_1B.hidden, LLAMA32_1B.ffn, LLAMA32_1B.n_layers, LLAMA32_1B.n_heads, LLAMA32_1B.n_kv_heads,
        LLAMA32_1B.head_dim, LLAMA32_1B.vocab, LLAMA32_1B.tie_embeddings) == tuple(pc.values())
H, F, V, L = pc["hidden_size"], pc["intermediate_size"], pc["vocab_size"], pc["num_hidden_layers"]
q_w = pc["num_attention_heads"] * pc["head_dim"]          # N_h d_h  = 32 * 64 = 2048
kv_w = pc["num_key_value_heads"] * pc["head_dim"]         # N_kv d_h =  8 * 64 =  512
block = 2 * H + H * q_w + 2 * H * kv_w + q_w * H + 3 * H * F
tied_total = V * H + L * block + H                        # embedding, 16 blocks, final norm
untied_total = tied_total + V * H                         # a second [V, H] matrix for the head
assert tied_total == 1_235_814_400 == LLAMA32_1B.n_params()
assert LLAMA32_1B.weight_bytes("bf16") == 2 * tied_total == 2_471_628_800
assert untied_total == LLAMA32_1B.replace(tie_embeddings=False).n_params()
print(f"tied (as published): {tied_total:,} = {tied_total / 1e9:.2f} B, {2 * tied_total / 1e9:.2f} GB bf16;"
      f"  counted untied: {untied_total / 1e9:.2f} B")

# %% [markdown]
# A runtime may still keep a *second copy* of the embedding in another layout for its LM-head
# kernel (`llamanb`'s numpy backend keeps a transposed `[H, V]` one, `lm_head_t`, because OpenBLAS
# streams it faster in decode): memory, not parameters. The embedded model, for section 1.4:

# %%
model = load_model()                      # SmolLM2-135M-Instruct, memory-mapped from the cache
engine = Engine(model)
W = model.weights
assert np.array_equal(engine.backend.lm_head_t, W.embed.T)      # the same numbers, another array

# %% [markdown]
# ### 1.3 Bytes: weights and KV cache
#
# Weights take `n_params × bytes per parameter`. The KV cache holds one key and one value vector
# per KV head, per layer, per position: `2 · L · N_kv · d_h` numbers per token. GQA is what keeps
# it small: with N_kv = N_h it would be G times larger.

# %%
print(f"{'model':22s} {'params':>14s} {'bf16 GB':>8s} {'fp32 GB':>8s} {'KV/token bf16':>14s} "
      f"{'KV @2048 MiB':>13s} {'without GQA':>12s}")
for c in MODELS:
    per_tok = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 2           # bytes, bf16
    assert per_tok == c.kv_bytes_per_token("bf16")
    no_gqa = c.replace(n_kv_heads=c.n_heads).kv_bytes(2048, "bf16")
    assert no_gqa == c.group * c.kv_bytes(2048, "bf16")
    print(f"{c.name:22s} {c.n_params():>14,} {c.weight_bytes('bf16') / 1e9:>8.2f} "
          f"{c.weight_bytes('fp32') / 1e9:>8.2f} {per_tok:>12,} B {per_tok * 2048 / 2**20:>13.0f} "
          f"{no_gqa / 2**20:>12.0f}")

# %% [markdown]
# Llama-3.2-1B's bf16 cache at 2048 positions, keys and values together:

# %%
kv_2048 = 2 * 16 * 8 * 2048 * 64 * 2
assert kv_2048 == LLAMA32_1B.kv_bytes(2048, "bf16") == 64 * 2**20
print(f"K+V, 2048 positions, bf16: {kv_2048:,} bytes = {kv_2048 // 2**20} MiB "
      f"(keys alone: {kv_2048 // 2 // 2**20} MiB)")

# %% [markdown]
# ### 1.4 SmolLM2-135M: the formula against the weights on disk and against transformers
#
# The formula is only as good as the model it describes. Count the numbers the loaded model really
# holds (`model.weights`, in HF names; a tied model stores no separate LM head), and count the
# parameters of transformers' own `LlamaForCausalLM` for the same checkpoint.
#
# About that HF model: `load_hf(model, via="converted")` has transformers read the `config.json`
# and `model.safetensors` that `llamanb` converted from the GGUF, with its own loader and its own
# forward pass (`tests/io/test_gguf.py` checks the conversion tensor by tensor against transformers'
# own GGUF loader).

# %%
import torch

from llamanb.check.hf_reference import load_hf

torch.manual_seed(0)
hf = load_hf(model, via="converted")
hf.config._attn_implementation = "eager"  # plain matmul attention

stored = W.hf_state()                                   # HF name -> array
n_stored = sum(a.size for a in stored.values())
n_hf = sum(p.numel() for p in hf.parameters())          # a tied matrix is counted once
print("tensors stored:", len(stored), " lm_head stored separately:", "lm_head.weight" in stored)
print(f"formula (SMOLLM2_135M)   {SMOLLM2_135M.n_params():,}")
print(f"loaded weights           {n_stored:,}")
print(f"transformers parameters  {n_hf:,}")
assert SMOLLM2_135M.n_params() == model.config.n_params() == n_stored == n_hf == 134_515_008
assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()   # tied in HF too

# %% [markdown]
# > **Going deeper: two counts the MLIR-AIR Llama-3.2-1B guide prints.** The guide gives
# > Llama-3.2-1B 1.50 B parameters: the untied count of section 1.2, the LM head counted a second
# > time although the published config ties it. It gives the bf16 KV cache at 2048 positions as
# > 32 MiB: the keys alone, half of section 1.3's keys and values. Both are listed, with their
# > sources, in `docs/corrections.md`.

# %% [markdown]
# ## 2. The counting rule
#
# A matrix product `[m, k] @ [k, n]` does `m·n·k` multiply-adds; a multiply-add counts as 2
# floating-point operations, so it costs `2·m·n·k` FLOPs. Only matrix products are counted here:
# the norms, RoPE, softmax, SiLU and residual adds do a handful of operations per element of
# `[S, H]` or `[S, D_ff]`, a small fraction of the matrix products' work. torch's `FlopCounterMode` uses the same rule,
# which makes it an independent referee:

# %%
from torch.utils.flop_counter import FlopCounterMode

counter = FlopCounterMode(display=False)
with counter:
    torch.ones(3, 5) @ torch.ones(5, 7)
assert counter.get_total_flops() == 2 * 3 * 5 * 7
print("[3, 5] @ [5, 7]:", counter.get_total_flops(), "FLOPs = 2 * 3 * 5 * 7")

# %% [markdown]
# ## 3. Llama-3.2-1B, S = 2048, by hand
#
# Per block, with S rows going in:
#
# - q_proj `2·S·H·N_h·d_h`, k_proj and v_proj `2·S·H·N_kv·d_h` each, o_proj `2·S·N_h·d_h·H`;
# - attention scores `Q·Kᵀ`: one `d_h`-long dot product per (query, key) pair per query head,
#   `2·N_h·d_h·pairs`, and the same again for `P·V`;
# - gate_proj, up_proj, down_proj `2·S·H·D_ff` each.
#
# How many pairs? A causal mask lets query p see keys 0 .. p, so the work that matters is the
# triangle, `S(S+1)/2` pairs. A plain implementation computes all `S²` scores and masks half of them
# away; both counts are given. After the blocks, the LM head `2·rows·H·V`: generation needs the
# logits of the last row only (rows = 1), a naive implementation computes all S rows.

# %%
S_pf = 2048
H, F, V, L, Nh, Nkv, dh = 2048, 8192, 128256, 16, 32, 8, 64
pairs_causal = S_pf * (S_pf + 1) // 2                 # 2,098,176
pairs_full = S_pf * S_pf                              # 4,194,304
per_block = {
    "q_proj": 2 * S_pf * H * Nh * dh,
    "k_proj": 2 * S_pf * H * Nkv * dh,
    "v_proj": 2 * S_pf * H * Nkv * dh,
    "attn_scores": 2 * Nh * dh * pairs_causal,
    "attn_values": 2 * Nh * dh * pairs_causal,
    "o_proj": 2 * S_pf * Nh * dh * H,
    "gate_proj": 2 * S_pf * H * F,
    "up_proj": 2 * S_pf * H * F,
    "down_proj": 2 * S_pf * F * H,
}
by_hand = {op: L * n for op, n in per_block.items()}
by_hand["lm_head"] = 2 * 1 * H * V                     # last row only
by_hand_full = dict(by_hand, attn_scores=L * 2 * Nh * dh * pairs_full,
                    attn_values=L * 2 * Nh * dh * pairs_full, lm_head=2 * S_pf * H * V)
for op, n in by_hand.items():
    print(f"{op:12s} {n / 1e9:9.1f} GFLOP   (full S x S / all rows: "
          f"{by_hand_full[op] / 1e9:7.1f})")
print(f"{'total':12s} {sum(by_hand.values()) / 1e12:9.2f} TFLOP   (full S x S / all rows: "
      f"{sum(by_hand_full.values()) / 1e12:.2f})")

# %% [markdown]
# `llamanb.model.flops` holds the same counting as functions of any config. It must give the same
# numbers:

# %%
assert flops.prefill_flops(LLAMA32_1B, S_pf) == by_hand              # causal, last row
assert flops.prefill_flops(LLAMA32_1B, S_pf, lm_head_rows="all", attention="full") == by_hand_full
assert flops.total(by_hand) == 4_261_267_111_936
print(f"llamanb.model.flops.prefill_flops: {flops.total(flops.prefill_flops(LLAMA32_1B, S_pf)):,} FLOPs "
      f"(causal, last row), hand count {flops.total(by_hand):,}")

# %% [markdown]
# ## 4. The independent check: torch counts the same model
#
# `FlopCounterMode` intercepts every matmul torch executes. Build transformers' `LlamaForCausalLM`
# from the published config on the *meta* device (shapes only, no memory, no arithmetic), run a
# 2048-token forward pass with eager attention, and read the counts per module. Eager attention
# computes the full S × S scores and HF computes logits for every row, so this is the
# "full / all rows" column.

# %%
from transformers import LlamaConfig as HFLlamaConfig
from transformers import LlamaForCausalLM

# the fields of the published config.json (meta-llama/Llama-3.2-1B-Instruct) that fix the shapes
published_llama32_1b = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                        "vocab_size": 128256, "tie_word_embeddings": True,
                        "max_position_embeddings": 131072}
hf_cfg = HFLlamaConfig(**published_llama32_1b)
hf_cfg._attn_implementation = "eager"
with torch.device("meta"):
    meta_1b = LlamaForCausalLM(hf_cfg)
counter = FlopCounterMode(display=False)
with torch.no_grad(), counter:
    meta_1b(torch.zeros((1, S_pf), dtype=torch.long, device="meta"),
            attention_mask=torch.ones((1, S_pf), dtype=torch.long, device="meta"), use_cache=False)
per_module = {name: sum(n.values()) for name, n in counter.get_flop_counts().items()}

torch_ops = {op: 0 for op in ("q_proj", "k_proj", "v_proj", "o_proj")}
torch_ops.update({op: 0 for op in ("gate_proj", "up_proj", "down_proj")})
torch_attention = 0
for i in range(L):
    pre = f"LlamaForCausalLM.model.layers.{i}."
    for op in ("q_proj", "k_proj", "v_proj", "o_proj"):
        torch_ops[op] += per_module[pre + "self_attn." + op]
    for op in ("gate_proj", "up_proj", "down_proj"):
        torch_ops[op] += per_module[pre + "mlp." + op]
    # what self_attn does besides its four projections: Q K^T and P V
    torch_attention += per_module[pre + "self_attn"] - sum(
        per_module[pre + "self_attn." + op] for op in ("q_proj", "k_proj", "v_proj", "o_proj"))
torch_ops["lm_head"] = per_module["LlamaForCausalLM.lm_head"]

for op, n in torch_ops.items():
    assert n == by_hand_full[op], op
assert torch_attention == by_hand_full["attn_scores"] + by_hand_full["attn_values"]
assert per_module["Global"] == flops.total(by_hand_full) == 5_611_374_772_224
print(f"torch FlopCounterMode, Llama-3.2-1B, S=2048: {per_module['Global']:,} FLOPs;  "
      f"our count: {flops.total(by_hand_full):,} (equal op by op)")

# %% [markdown]
# ## 5. Which ops dominate

# %%
labels = list(by_hand)
fig, ax = plt.subplots(figsize=(7.5, 3.8))
y = np.arange(len(labels))
ax.barh(y, [by_hand_full[k] / 1e9 for k in labels], color="none", edgecolor="tab:gray",
        hatch="//", label="full S×S attention / LM head on all 2048 rows")
ax.barh(y, [by_hand[k] / 1e9 for k in labels], color="tab:blue",
        label="causal triangle / LM head on the last row")
ax.set_yticks(y, labels)
ax.invert_yaxis()
ax.set_xlabel("GFLOP (whole model, 16 blocks)")
ax.set_title("Llama-3.2-1B prefill, S = 2048: FLOPs per op")
ax.legend(loc="upper right", fontsize=8)
fig.tight_layout()
plt.show()

# %%
tot = flops.total(by_hand)
mlp = by_hand["gate_proj"] + by_hand["up_proj"] + by_hand["down_proj"]
qo = by_hand["q_proj"] + by_hand["o_proj"]
kv = by_hand["k_proj"] + by_hand["v_proj"]
att = by_hand["attn_scores"] + by_hand["attn_values"]
print(f"MLP gate/up/down   {100 * mlp / tot:5.1f} %")
print(f"q_proj + o_proj    {100 * qo / tot:5.1f} %")
print(f"attention QK, PV   {100 * att / tot:5.1f} %   (causal triangle)")
print(f"k_proj + v_proj    {100 * kv / tot:5.1f} %")
print(f"LM head, last row  {100 * by_hand['lm_head'] / tot:5.2f} %")
print(f"LM head on all 2048 rows would cost {by_hand_full['lm_head'] / 1e12:.2f} TFLOP "
      f"({by_hand_full['lm_head'] // by_hand['lm_head']}x the last row)")
assert mlp > qo > att > kv > by_hand["lm_head"]
assert by_hand_full["lm_head"] > qo                       # all-rows head: second only to the MLP

# %% [markdown]
# The MLP's three GEMMs are the largest share (the cell above prints it), because D_ff = 4·H and
# there are three of them. q_proj and o_proj come next. The attention products grow as S²: at
# S = 2048 each is exactly as large as q_proj when the whole square is computed (`2·N_h·d_h·S²` vs
# `2·S·H·N_h·d_h`, and S = H here), half that with the triangle. An LM head over all rows would be
# the second-largest item, S times the single row generation needs.

# %% [markdown]
# > **Going deeper: the guide's "≈ 60 %" and 2.6 TFLOP/s.** Per block, too, the MLP is the bulk of
# > the matmul FLOPs, with either attention count. The MLIR-AIR Llama-3.2-1B guide prints a
# > per-block share of "≈ 60 %", and a rate that divides the MLP's FLOPs alone by the time of a
# > whole prefill (its measured 1.27 s on the NPU2); both are checked in `docs/corrections.md`. The
# > shares, and the rate all of the prefill's matmuls reach in those 1.27 s:

# %%
blk_full = flops.layer_flops(LLAMA32_1B, S_pf, attention="full")
blk_causal = flops.layer_flops(LLAMA32_1B, S_pf, attention="causal")
mlp_blk = blk_full["gate_proj"] + blk_full["up_proj"] + blk_full["down_proj"]
assert mlp_blk == 206_158_430_208 and round(mlp_blk / 1e9) == 206
share_full = 100 * mlp_blk / flops.total(blk_full)
share_causal = 100 * mlp_blk / flops.total(blk_causal)
print(f"MLP per block: {mlp_blk / 1e9:.1f} GFLOP;  share of the block: {share_full:.1f} % (full), "
      f"{share_causal:.1f} % (causal);  guide: ~60 %")
assert share_full > 70 and share_causal > 75
guide_seconds = 1.27                                          # the guide's measured NPU prefill
print(f"MLP only / 1.27 s: {16 * mlp_blk / guide_seconds / 1e12:.1f} TFLOP/s (the guide's 2.6);  "
      f"all matmuls / 1.27 s: {tot / guide_seconds / 1e12:.2f} TFLOP/s")

# %% [markdown]
# ## 6. Decode: the same weights, one row
#
# A decode step runs every matrix on a single row, plus attention of one query over the cache.
# `flops.decode_flops(cfg, context)` counts it (the new token attends to `context + 1` keys). Per
# byte of bf16 weight read, the cell prints what prefill and decode do: thousands of FLOPs against
# about one. That is why decode is limited by memory bandwidth and prefill by arithmetic.

# %%
for ctx in (0, 2047):
    dec = flops.decode_flops(LLAMA32_1B, ctx)
    assert dec == flops.prefill_flops(LLAMA32_1B, 1, start=ctx)
    print(f"decode after {ctx:4d} tokens: {flops.total(dec) / 1e9:.2f} GFLOP/token, "
          f"{flops.total(dec) / LLAMA32_1B.weight_bytes('bf16'):.2f} FLOP per weight byte")
print(f"prefill of 2048 tokens:     {tot / LLAMA32_1B.weight_bytes('bf16'):,.0f} FLOP per weight byte")
# tied model: the LM head is the embedding matrix, so every parameter but the norms does one
# multiply-add per decoded token
dec0 = flops.decode_flops(LLAMA32_1B, 0)
assert flops.total(dec0) - dec0["attn_scores"] - dec0["attn_values"] == 2 * (
    LLAMA32_1B.n_params() - 2 * 16 * 2048 - 2048)

# %% [markdown]
# ## Summary
#
# - **Parameters and bytes** live in `llamanb.model.config.LlamaConfig`: `param_breakdown()`,
#   `layer_params()`, `n_params()`, `weight_bytes(fmt)`, `kv_bytes_per_token(fmt)`, `kv_bytes(seq)`,
#   checked here against the published config, the loaded tensors and transformers' own model.
#   Llama-3.2-1B is tied: its LM head is its embedding table. GQA keeps the KV cache G times smaller.
# - **The rule:** a matrix product `[m, k] @ [k, n]` is `2·m·n·k` FLOPs; only matrix products count,
#   the rule torch's `FlopCounterMode` uses too.
# - **FLOPs** live in `llamanb.model.flops`: `prefill_flops(cfg, S, lm_head_rows="last"|"all",
#   attention="causal"|"full", start=0, batch=1)`, `decode_flops(cfg, context)`, `layer_flops`,
#   `attention_pairs`, checked here and in `tests/test_flops.py` against torch's `FlopCounterMode`
#   on transformers' own model. Most of a prefill's work is the MLP; the full square and an
#   all-rows head (what a plain implementation computes) add to it (section 3 prints both totals).
# - **Decode** is the same weights on one row: about 2 FLOPs per parameter, one per bf16 weight
#   byte, against thousands per byte for the prefill. Decode waits for memory, prefill for
#   arithmetic.
#
# **Next**, notebook 02 takes RoPE apart: the frequencies (with Llama 3's scaling), the 2×2 rotation
# tables of Furiosa's TCP book, and the two ways of pairing a head's dimensions.

# %% [markdown]
# ## Exercises
#
# Two functions to write; each is checked against the finished code in `llamanb`. Replace
# `raise NotImplementedError` with your code and run the cell, then run the check below it: one
# line, `passed`, the first case that differs (expected, got) with a hint, or `not attempted yet`.
# One way to solve each, with a sentence on why: `solutions/01b_prefill_flops.py`.

# %%
from llamanb import LlamaConfig
from llamanb.course.exercises import ch01b

# %% [markdown]
# ### 01b.1 FLOPs of a prefill
#
# Write `prefill_flops(c, S)`: the total FLOPs of a prefill of `S` tokens through the whole model,
# causal attention, the LM head on the last row only (what generation needs) -- the number
# `flops.total(flops.prefill_flops(c, S))` gives. *Hint:* section 3: 2 FLOPs per multiply-add;
# count the (query, key) pairs of the causal triangle.

# %%
def prefill_flops(c: LlamaConfig, S: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch01b.prefill_flops(prefill_flops)

# %% [markdown]
# ### 01b.2 FLOPs of a decode step
#
# Write `decode_flops(c, context)`: the total FLOPs of one decode step after `context` tokens are
# in the cache -- every projection on one row, attention of one query, the LM head once -- the
# number `flops.total(flops.decode_flops(c, context))` gives. *Hint:* section 6; how many keys does
# the new token attend to?

# %%
def decode_flops(c: LlamaConfig, context: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch01b.decode_flops(decode_flops)

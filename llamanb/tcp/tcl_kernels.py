"""The Llama block as TCL kernels (Furiosa's Tensor Contraction Language), one kernel per op.

Needs furiosa-kernels (PyPI, proprietary; `pip install furiosa-kernels`), which ships the
`furiosa.tcl` eDSL and Furiosa's own kernels. Import this module only through
`llamanb.tcp.compiler`, which checks that the package is there and says so in one line if not.

Where furiosa-kernels has the op, the kernel below is Furiosa's (named in KERNELS' `source`):
  * RoPE: `furiosa.kernels.common.naive.einsum_rope.einsum_rope_naive`, used as is: a 2 x 2
    rotation einsum per pair, the same mapping chapter 08 derives;
  * RMSNorm, softmax, SiLU, the elementwise multiply and add: tensor operations from
    `furiosa.kernels.common.rms_norm`, `.softmax`, `.activation`, `.math`, wrapped in a
    one-line kernel of ours that fixes the axes;
  * every projection and the two attention einsums: `furiosa.kernels.common.contract.einsum_dpe`
    (a contraction on the Contraction Engine, "DPE"), wrapped the same way.
The wrappers are the course's own: they give each op the chapter's named axes. Axis letters:
T tokens (B x s_in), D hidden, H heads, E head dim, K kv heads, G = H / K, I new rows per
sequence, S keys, F FFN width, V vocabulary, P RoPE pairs (E / 2), X/Y the pair member in/out.
"""
from __future__ import annotations

# ruff: noqa: F821  (axis names are parsed by the eDSL from the annotations' text)
import furiosa.tcl as tcl
from furiosa.kernels.common.activation import silu
from furiosa.kernels.common.contract import einsum_dpe, einsum_dpe_typed
from furiosa.kernels.common.math import binary_add, binary_mul
from furiosa.kernels.common.naive.einsum_rope import einsum_rope_naive
from furiosa.kernels.common.rms_norm import rms_norm_bf16_naive
from furiosa.kernels.common.softmax import softmax
from furiosa.tcl import bf16, f8_e4


@tcl.kernel
def rms_norm(x: bf16[T, D], w: bf16[D]) -> bf16[T, D]:
    y: bf16[T, D] = rms_norm_bf16_naive(x, w, [D], 1e-5, float(D.size))
    return y


@tcl.kernel
def head_proj(x: bf16[T, D], w: bf16[D, H, E]) -> bf16[T, H, E]:
    y: bf16[T, H, E] = einsum_dpe(x, w, [T, H, E])
    return y


@tcl.kernel
def out_proj(x: bf16[T, H, E], w: bf16[H, E, D]) -> bf16[T, D]:
    y: bf16[T, D] = einsum_dpe(x, w, [T, D])
    return y


@tcl.kernel
def ffn_proj(x: bf16[T, D], w: bf16[D, F]) -> bf16[T, F]:
    y: bf16[T, F] = einsum_dpe(x, w, [T, F])
    return y


@tcl.kernel
def down_proj(x: bf16[T, F], w: bf16[F, D]) -> bf16[T, D]:
    y: bf16[T, D] = einsum_dpe(x, w, [T, D])
    return y


@tcl.kernel
def attn_scores(q: bf16[B, K, G, I, E], k: bf16[B, K, S, E]) -> bf16[B, K, G, I, S]:
    y: bf16[B, K, G, I, S] = einsum_dpe(q, k, [B, K, G, I, S])
    return y


@tcl.kernel
def attn_softmax(x: bf16[B, K, G, I, S]) -> bf16[B, K, G, I, S]:
    y: bf16[B, K, G, I, S] = softmax(x, [S], bf16)
    return y


@tcl.kernel
def attn_values(p: bf16[B, K, G, I, S], v: bf16[B, K, S, E]) -> bf16[B, K, G, I, E]:
    y: bf16[B, K, G, I, E] = einsum_dpe(p, v, [B, K, G, I, E])
    return y


@tcl.kernel
def swiglu(g: bf16[T, F], u: bf16[T, F]) -> bf16[T, F]:
    a: bf16[T, F] = silu(g, bf16)
    y: bf16[T, F] = binary_mul(a, u, bf16)
    return y


@tcl.kernel
def residual(x: bf16[T, D], r: bf16[T, D]) -> bf16[T, D]:
    y: bf16[T, D] = binary_add(x, r, bf16)
    return y


@tcl.kernel
def lm_head(x: bf16[T, D], w: bf16[V, D]) -> bf16[T, V]:
    y: bf16[T, V] = einsum_dpe(x, w, [T, V])
    return y


@tcl.kernel
def head_proj_fp8(x: f8_e4[T, D], w: f8_e4[D, H, E]) -> bf16[T, H, E]:
    y: bf16[T, H, E] = einsum_dpe_typed(x, w, [T, H, E], bf16)
    return y


@tcl.kernel
def out_proj_fp8(x: f8_e4[T, H, E], w: f8_e4[H, E, D]) -> bf16[T, D]:
    y: bf16[T, D] = einsum_dpe_typed(x, w, [T, D], bf16)
    return y


@tcl.kernel
def ffn_proj_fp8(x: f8_e4[T, D], w: f8_e4[D, F]) -> bf16[T, F]:
    y: bf16[T, F] = einsum_dpe_typed(x, w, [T, F], bf16)
    return y


@tcl.kernel
def down_proj_fp8(x: f8_e4[T, F], w: f8_e4[F, D]) -> bf16[T, D]:
    y: bf16[T, D] = einsum_dpe_typed(x, w, [T, D], bf16)
    return y


@tcl.kernel
def lm_head_fp8(x: f8_e4[T, D], w: f8_e4[V, D]) -> bf16[T, V]:
    y: bf16[T, V] = einsum_dpe_typed(x, w, [T, V], bf16)
    return y


# name -> the eDSL kernel (rope_q / rope_k use Furiosa's kernel unchanged)
FUNCTIONS = {
    "rms_norm": rms_norm, "head_proj": head_proj, "out_proj": out_proj, "ffn_proj": ffn_proj,
    "down_proj": down_proj, "attn_scores": attn_scores, "attn_softmax": attn_softmax,
    "attn_values": attn_values, "swiglu": swiglu, "residual": residual, "lm_head": lm_head,
    "einsum_rope_naive": einsum_rope_naive, "head_proj_fp8": head_proj_fp8, "out_proj_fp8": out_proj_fp8,
    "ffn_proj_fp8": ffn_proj_fp8, "down_proj_fp8": down_proj_fp8, "lm_head_fp8": lm_head_fp8,
}


def tcl_source(function: str, bindings: dict[str, int]) -> str:
    """The TCL text of one kernel with every axis bound to a size (what furiosa-tcc reads)."""
    return tcl.specialize_kernel(FUNCTIONS[function], dict(bindings)).dsl

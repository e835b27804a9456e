"""Solutions to the exercises of notebook 08 (Llama as an einsum program on the TCP)."""
import math

import numpy as np

from llamanb.tcp.ops import AXES


def subscripts(arg_axes, out_axes):
    """numpy subscripts from named axes, e.g. [[B, s_in, D], [D, h_q, d_k]], [B, s_in, h_q, d_k]
    -> "bim,mqe->biqe".
    Why: the names are the program; the letters are only numpy's spelling of them, and two names
    may start with the same letter (s and s_in), so the letters come from one fixed table."""
    ins = ",".join("".join(AXES[a] for a in axes) for axes in arg_axes)
    return ins + "->" + "".join(AXES[a] for a in out_axes)


def einsum_flops(arg_axes, out_axes, dims):
    """2 FLOPs per point of the einsum's whole index space.
    Why: broadcast-multiply touches every combination of every axis once (a multiply), and the
    reducers add each product once (an add); axes shared by operands are one axis."""
    every = dict.fromkeys(a for axes in (*arg_axes, out_axes) for a in axes)
    return 2 * math.prod(dims[a] for a in every)


def rope_q(Q2, t_rope):
    """Q2 [B, s_in, h_q, d_k', f] x t_rope [s_in, d_k', f, r] -> [B, h_q, s_in, d_k', r].
    Why: f (the member of a pair) is contracted; s_in and d_k' pair each row with its own
    position and frequency; writing h_q before s_in is free, and it is the layout attention wants."""
    return np.einsum("bihpf,ipfr->bhipr", Q2, t_rope)

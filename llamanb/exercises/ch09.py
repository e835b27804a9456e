"""Chapter 09 exercises: collective traffic on a line and a ring, and one bfloat8_b block.

    collective_traffic(op, topology, n, nbytes) -> (steps, busiest_link_bytes)
        counted by llamanb.mesh.ccl on an emulated 1 x n mesh (float32 values)
    bfloat8_block(v [16] float32) -> [16] float32     against llamanb.numerics.bfloat8_b
"""
from __future__ import annotations

import numpy as np

from ..mesh import ccl
from ..mesh.config import MeshConfig
from ..mesh.device import EmulatedMesh, MeshTensor
from ..numerics import bfloat8_b
from .check import Case, Exercise

OPS = ("reduce_scatter", "all_gather", "all_reduce")


def _counted(op: str, topology: str, n: int) -> tuple[int, tuple[int, float]]:
    """(nbytes, (steps, busiest)) for one collective on a 1 x n mesh. nbytes is the size of the
    whole tensor: what each chip holds before a reduce_scatter or all_reduce, after an all_gather."""
    mesh = EmulatedMesh(MeshConfig((1, n), topology=topology))
    rows, cols = 2, 8 * n                                 # columns split into n chunks, then halves
    if op == "all_gather":
        t = MeshTensor(mesh, [[np.zeros((rows, cols // n), np.float32) for _ in range(n)]], {})
        ccl.all_gather(t, 1, 1)
    else:
        t = MeshTensor(mesh, [[np.zeros((rows, cols), np.float32) for _ in range(n)]], {})
        ccl.reduce_scatter(t, 1, 1) if op == "reduce_scatter" else ccl.all_reduce(t, 1)
    rec = mesh.ledger[-1]
    busiest = rec.busiest
    return rows * cols * 4, (int(rec.steps), int(busiest) if float(busiest).is_integer() else busiest)


def _traffic_cases() -> list[Case]:
    cases = []
    for topology, ns in (("line", (2, 4, 8)), ("ring", (3, 4, 8))):
        for n in ns:
            for op in OPS:
                nbytes, want = _counted(op, topology, n)
                cases.append(Case(f"{op} on a {topology} of {n} chips, {nbytes} bytes",
                                  (op, topology, n, nbytes), want))
    return cases


collective_traffic = Exercise(
    "09.1", "collective_traffic", _traffic_cases,
    hint="reduce_scatter and all_gather take n-1 steps each, all_reduce both (2(n-1)); a line's end "
         "link carries n-1 chunks of nbytes/n one way; a ring halves each chunk and sends the halves "
         "round in opposite directions; a line all_reduce puts the whole nbytes on every link direction")


def _block_reference(v: np.ndarray) -> np.ndarray:
    tile = np.zeros((32, 32), np.float32)
    tile[0, :16] = v
    return bfloat8_b(tile)[0, :16].copy()


def _block_cases() -> list[Case]:
    rng = np.random.default_rng(15)
    blocks = {
        "notebook 09's block (ties, saturation at 255, a subnormal)": np.array(
            [1.0, 1.0078125, 3.0, -3.0, 0.5, 255.0, 7.75, -7.875, 0.998, 1e-39, -0.0, 0.0, 12.5,
             100.0, -64.0, 2.0], np.float32),
        "all zeros": np.zeros(16, np.float32),
        "one large value among small ones": np.array([1000.0] + [0.01 * i for i in range(15)], np.float32),
        "powers of two": (2.0 ** np.arange(-8, 8)).astype(np.float32),
        "halfway ties": np.array([64.0, 0.5, 1.5, 2.5, -0.5, -1.5, 3.5, 4.5] * 2, np.float32),
    }
    for i, scale in enumerate((1.0, 1e-3, 37.0, 1e4)):
        blocks[f"random normal x {scale:g}"] = (rng.standard_normal(16) * scale).astype(np.float32)
    return [Case(label, (v,), _block_reference(v)) for label, v in blocks.items()]


bfloat8_block = Exercise(
    "09.2", "bfloat8_block", _block_cases, rtol=0, atol=0,
    hint="shared exponent e = the largest float32 exponent in the block; step 2^(e - 6); "
         "magnitude = round(|v| / step) with ties to even (np.round), at most 127 (saturation)")

EXERCISES = (collective_traffic, bfloat8_block)

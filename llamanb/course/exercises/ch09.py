"""Chapter 09 exercises: collective traffic on a line and a ring, and one bfloat8_b block.

    collective_traffic(op, topology, n, nbytes) -> (steps, busiest_link_bytes)
        counted by llamanb.mesh.ccl on an emulated 1 x n mesh (float32 values)
    bfloat8_block(v [16] float32) -> [16] float32     against llamanb.model.numerics.bfloat8_b
    matmul_program(ttl, grid) -> a TT-Lang operation (x, w, y): y = x @ w, run by tt-lang-sim on
        every chip of a mesh whose chips each hold a slice of K, then all-reduced by ttnnsim;
        checked against float64 within gamma_K |x||w| (llamanb.mesh.bounds)
"""
from __future__ import annotations

import numpy as np

from llamanb.mesh import ccl
from llamanb.mesh.config import MeshConfig
from llamanb.mesh.device import EmulatedMesh, MeshTensor
from llamanb.model.numerics import bfloat8_b
from llamanb.course.exercises.check import Case, Exercise

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

def _program_cases() -> list[Case]:
    rng = np.random.default_rng(9)
    cases = []
    for shape, grid, rows, K, N in (((1, 2), (1, 1), 1, 64, 64), ((1, 3), (1, 2), 5, 96, 128),
                                    ((2, 2), (2, 2), 32, 128, 192)):
        x = rng.standard_normal((rows, K)).astype(np.float32)
        w = rng.standard_normal((K, N)).astype(np.float32)
        cases.append(Case(f"x [{rows}, {K}] @ w [{K}, {N}], K over the {shape[1]} chips of each row of a "
                          f"{shape[0]}x{shape[1]} mesh, core grid {grid}", ("ttl", grid), (shape, grid, x, w)))
    return cases


def _run_program(want, make):
    """Run the reader's program on the case's mesh; None if every chip's all-reduced result is
    within gamma_K |x||w| of the float64 product, else what is wrong."""
    from llamanb.mesh.bounds import matmul_bound
    from llamanb.mesh.ttlang import TTLangMesh, k_split_matmul

    shape, grid, x, w = want
    if not callable(make):
        return f"expected a TT-Lang operation (a function of x, w, y), got {type(make).__name__}"
    mesh = TTLangMesh(shape, grid, trace=False, program=lambda ttl, g: make)
    try:
        got = k_split_matmul(mesh, x, w)
    except Exception as e:                              # noqa: BLE001 -- the simulator's verdict
        while isinstance(e, FileNotFoundError) and e.__context__ is not None:
            e = e.__context__                           # tt-lang-sim 1.1.6 lacks its diagnostics printer
        return f"tt-lang-sim stopped the program: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
    exact, bound = x.astype(np.float64) @ w.astype(np.float64), matmul_bound(x, w)
    for r, row in enumerate(got):
        for c, y in enumerate(row):
            bad = np.abs(y - exact) > bound
            if bad.any():
                i = tuple(int(j) for j in np.argwhere(bad)[0])
                return (f"chip ({r}, {c}) at {list(i)}: expected {exact[i]:.6g} (+-{bound[i]:.2g}), "
                        f"got {float(y[i]):.6g}")
    return None


class _ProgramExercise(Exercise):
    """Cases hand the reader's factory the simulator's ttl namespace, loaded when first run."""

    def verdict(self, fn):
        from llamanb.mesh.ttlang import load_ttlang

        ttl = load_ttlang()[0]
        return super().verdict(lambda name, grid: fn(ttl, grid) if name == "ttl" else fn(name, grid))


matmul_program = _ProgramExercise(
    "09.3", "matmul_program", _program_cases, compare=_run_program,
    hint="three kernels: read copies x[0:Mt, k-block] and w[k-block, n-block] into two dataflow "
         "buffers; compute fills an accumulator with 0, then for each k-block stores acc + x @ w "
         "into it, then moves it to the output buffer; write copies it to y[0:Mt, n-block]")

EXERCISES = (collective_traffic, bfloat8_block, matmul_program)

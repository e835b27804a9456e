"""The emulated NPU2 array: where each launch's herds sit, and whether their buffers fit.

    device row 5   C C C C C C C C     compute tiles, 4 rows x 8 columns = 32; each a core with
    device row 4   C C C C C C C C       64 KiB of data memory (L1), which also holds its stack
    device row 3   C C C C C C C C
    device row 2   C C C C C C C C
    device row 1   M M M M M M M M     mem tiles, 512 KiB each (L2), 4 MiB in all
    device row 0   S S S S S S S S     shim tiles: the DMAs to and from DDR
                   column 0 ... 7

The geometry is mlir-aie's device model for `npu2` (Xilinx/mlir-aie, AIETargetModel.h: the full
Strix NPU, 8 columns; row 0 shim, row 1 mem tiles, rows 2-5 cores; AIE2 local memory 0x10000
bytes, mem tile 0x80000 bytes) and AMD's AIE-ML architecture manual (AM020), whose tile memories
XDNA 2 keeps. Each core's stack (1024 bytes unless `aie.core` says otherwise, AIEOps.td) lives in
its own L1, next to the herd's buffers.

A herd of size [x, y] takes x columns and y rows (air-place-herds: size x is the herd's column
count). The MLIR-AIR Llama guide calls its [8, 1] herds "one column of 8 tiles"; they are one
row across all 8 columns -- a column has only 4 compute tiles. Herds of one launch run together
and are placed as air-place-herds' naive placement does: largest first, each at the first free
position scanning a row left to right, then the next row up. Launches run one after another, each
with the whole array. A herd too large for the array, herds that cannot all be placed, buffers
beyond a tile's L1 or beyond the mem tiles' L2 are rejected, as the real compiler would reject them.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from ..errors import LlamanbError
from .airtext import Herd, Launch, read_launches

KIB = 1024


@dataclass(frozen=True)
class ArraySpec:
    name: str = "NPU2 (Strix, XDNA 2, AIE2P)"
    columns: int = 8
    core_rows: int = 4
    first_core_row: int = 2           # device rows: 0 shim, 1 mem tiles, 2.. compute
    l1_bytes: int = 64 * KIB          # data memory per compute tile
    stack_bytes: int = 1 * KIB        # each core's stack, carved out of its L1
    mem_tile_bytes: int = 512 * KIB   # L2 per mem tile, one mem tile per column

    @property
    def compute_tiles(self) -> int:
        return self.columns * self.core_rows

    @property
    def l1_for_buffers(self) -> int:
        return self.l1_bytes - self.stack_bytes

    @property
    def l2_bytes(self) -> int:
        return self.columns * self.mem_tile_bytes


NPU2 = ArraySpec()


@dataclass(frozen=True)
class Placement:
    herd: Herd
    col: int                          # leftmost column
    row: int                          # lowest compute row, 0 .. core_rows - 1

    def tiles(self, spec: ArraySpec = NPU2) -> list[tuple[int, int]]:
        """(column, device row) of every tile the herd occupies."""
        return [(self.col + c, spec.first_core_row + self.row + r)
                for r in range(self.herd.rows) for c in range(self.herd.cols)]


def place(herds, spec: ArraySpec = NPU2) -> tuple[Placement, ...]:
    """Placements of herds that run together, in the order given (air-place-herds' naive rule)."""
    for h in herds:
        if h.cols > spec.columns or h.rows > spec.core_rows or h.cols < 1 or h.rows < 1:
            raise LlamanbError(f"herd {h.name!r} of size [{h.cols}, {h.rows}] does not fit "
                               f"{spec.name}: at most [{spec.columns}, {spec.core_rows}] "
                               f"({spec.columns} columns x {spec.core_rows} compute rows)")
    free = [[True] * spec.columns for _ in range(spec.core_rows)]     # free[row][col]

    def fits(h: Herd, row: int, col: int) -> bool:
        return (row + h.rows <= spec.core_rows and col + h.cols <= spec.columns
                and all(free[r][c] for r in range(row, row + h.rows)
                        for c in range(col, col + h.cols)))

    waiting = sorted(range(len(herds)), key=lambda i: -herds[i].tiles)   # largest first, stable
    where = {}
    for row in range(spec.core_rows):
        for col in range(spec.columns):
            if not waiting or not free[row][col]:
                continue
            for i in waiting:
                if fits(herds[i], row, col):
                    for r in range(row, row + herds[i].rows):
                        for c in range(col, col + herds[i].cols):
                            free[r][c] = False
                    where[i] = Placement(herds[i], col, row)
                    waiting.remove(i)
                    break
    if waiting:
        names = ", ".join(f"{herds[i].name!r} [{herds[i].cols}, {herds[i].rows}]" for i in waiting)
        used = sum(h.tiles for h in herds)
        raise LlamanbError(f"no valid placement on {spec.name} for herd(s) {names}: the launch's "
                           f"herds need {used} of {spec.compute_tiles} compute tiles at once")
    return tuple(where[i] for i in range(len(herds)))


def check_memory(launch: Launch, spec: ArraySpec = NPU2) -> None:
    """LlamanbError when a herd's L1 buffers or the launch's L2 buffers do not fit."""
    for h in launch.herds:
        if h.l1_bytes > spec.l1_for_buffers:
            bufs = " + ".join(f"{b.name} {list(b.shape)}x{b.dtype} ({b.nbytes} B)" for b in h.l1)
            raise LlamanbError(
                f"herd {h.name!r} in launch {launch.name!r} needs {h.l1_bytes} bytes of L1 per "
                f"tile ({bufs}); a compute tile has {spec.l1_bytes} bytes, {spec.stack_bytes} of "
                f"them the core's stack: choose smaller tiles")
    if launch.l2_bytes > spec.l2_bytes:
        raise LlamanbError(
            f"launch {launch.name!r} needs {launch.l2_bytes} bytes of L2; the {spec.columns} mem "
            f"tiles hold {spec.l2_bytes} ({spec.mem_tile_bytes} each): choose smaller L2 tiles")


@dataclass(frozen=True)
class LaunchUse:
    """What one launch occupies on the (emulated) array."""
    launch: Launch
    placements: tuple
    spec: ArraySpec = NPU2

    @property
    def tiles_used(self) -> int:
        return sum(p.herd.tiles for p in self.placements)

    @property
    def mem_tiles_needed(self) -> int:
        return ceil(self.launch.l2_bytes / self.spec.mem_tile_bytes)

    def summary(self) -> str:
        herds = "; ".join(f"{p.herd.name} [{p.herd.cols}, {p.herd.rows}] at column {p.col}, "
                          f"row {p.row + self.spec.first_core_row}, L1 "
                          f"{p.herd.l1_bytes / KIB:.1f} KiB/tile" for p in self.placements)
        return (f"{self.launch.name}: {self.tiles_used}/{self.spec.compute_tiles} compute tiles "
                f"({herds}); L2 {self.launch.l2_bytes / KIB:.1f} of "
                f"{self.spec.l2_bytes // KIB} KiB -- emulated {self.spec.name}")


def launch_use(launch: Launch, spec: ArraySpec = NPU2) -> LaunchUse:
    check_memory(launch, spec)
    return LaunchUse(launch, place(launch.herds, spec), spec)


def usage(module, spec: ArraySpec = NPU2) -> list[LaunchUse]:
    """Every launch of a module (its text, or a KernelSpec with `.text`), placed and checked
    (LlamanbError when one cannot be)."""
    text = module if isinstance(module, str) else module.text
    return [launch_use(lau, spec) for lau in read_launches(text)]

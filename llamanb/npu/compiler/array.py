"""The emulated NPU2 array: where each launch's herds sit, and whether their buffers fit.

    usage(spec_or_text) -> [LaunchUse(launch, placements)]   one per launch of the module, in order

    device row 5   C C C C C C C C     compute tiles, 4 rows x 8 columns = 32; each a core with
    device row 4   C C C C C C C C       64 KiB of data memory (L1), which also holds its stack
    device row 3   C C C C C C C C
    device row 2   C C C C C C C C
    device row 1   M M M M M M M M     mem tiles, 512 KiB each (L2), 4 MiB in all
    device row 0   S S S S S S S S     shim tiles: the DMAs to and from DDR
                   column 0 ... 7

The geometry is mlir-aie's device model for `npu2` (Xilinx/mlir-aie, AIETargetModel.h: the full
Strix NPU, 8 columns; row 0 shim, row 1 mem tiles, rows 2-5 cores; AIE2 local memory 0x10000
bytes, mem tile 0x80000 bytes, which the npu2 model inherits from AIE2 -- the sizes AMD's AIE-ML
architecture manual, AM020, gives for AIE-ML tiles). Each core's stack (1024 bytes unless `aie.core` says otherwise, AIEOps.td) lives in
its own L1, next to the herd's buffers.

A herd of size [x, y] takes x columns and y rows (air-place-herds: size x is the herd's column
count); a herd inside an unrolled segment (FlashAttention's) is placed once per segment instance.
The MLIR-AIR Llama guide calls its [8, 1] herds "one column of 8 tiles"; they are one row across
all 8 columns -- a column has only 4 compute tiles. Herds of one launch run together
and are placed as air-place-herds' naive placement does: largest first, each at the first free
position scanning a row left to right, then the next row up. Launches run one after another, each
with the whole array. A herd too large for the array, herds that cannot all be placed, buffers
beyond a tile's L1 or beyond the mem tiles' L2 are rejected, as the real compiler would reject them.
L1 is counted as aircc lays it out: with ping-pong (XRTBackend's default) a second copy of every
DMA-fed L1 buffer, unless the module is compiled with omit_pingpong "L1" or "all" (`l1_need`).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.plan import HerdPlan, LaunchPlan, read_plan

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


def cols_rows(herd: HerdPlan) -> tuple[int, int]:
    """(columns, rows) of one instance of a herd; a 1-D herd is one row."""
    return (herd.size + (1, 1))[:2]


@dataclass(frozen=True)
class Placement:
    herd: HerdPlan
    instance: int                     # which unrolled segment instance (0 when not unrolled)
    col: int                          # leftmost column
    row: int                          # lowest compute row, 0 .. core_rows - 1

    def tiles(self, spec: ArraySpec = NPU2) -> list[tuple[int, int]]:
        """(column, device row) of every tile this herd instance occupies."""
        cols, rows = cols_rows(self.herd)
        return [(self.col + c, spec.first_core_row + self.row + r)
                for r in range(rows) for c in range(cols)]


def place(herds, spec: ArraySpec = NPU2) -> tuple[Placement, ...]:
    """Placements of herds that run together (each unrolled instance separately), in the order
    given, by air-place-herds' naive rule."""
    items = [(h, i) for h in herds for i in range(h.instances)]
    for h, _ in items:
        cols, rows = cols_rows(h)
        if not (1 <= cols <= spec.columns and 1 <= rows <= spec.core_rows):
            raise LlamanbError(f"herd {h.sym!r} of size [{cols}, {rows}] does not fit "
                               f"{spec.name}: at most [{spec.columns}, {spec.core_rows}] "
                               f"({spec.columns} columns x {spec.core_rows} compute rows)")
    free = [[True] * spec.columns for _ in range(spec.core_rows)]     # free[row][col]

    def fits(k: int, row: int, col: int) -> bool:
        cols, rows = cols_rows(items[k][0])
        return (row + rows <= spec.core_rows and col + cols <= spec.columns
                and all(free[r][c] for r in range(row, row + rows) for c in range(col, col + cols)))

    size = [cols_rows(h)[0] * cols_rows(h)[1] for h, _ in items]
    waiting = sorted(range(len(items)), key=lambda k: -size[k])       # largest first, stable
    where = {}
    for row in range(spec.core_rows):
        for col in range(spec.columns):
            if not waiting or not free[row][col]:
                continue
            for k in waiting:
                if fits(k, row, col):
                    cols, rows = cols_rows(items[k][0])
                    for r in range(row, row + rows):
                        for c in range(col, col + cols):
                            free[r][c] = False
                    where[k] = Placement(items[k][0], items[k][1], col, row)
                    waiting.remove(k)
                    break
    if waiting:
        names = ", ".join(f"{items[k][0].sym!r} {list(cols_rows(items[k][0]))}" for k in waiting)
        raise LlamanbError(f"no valid placement on {spec.name} for herd(s) {names}: the launch's "
                           f"herds need {sum(size)} of {spec.compute_tiles} compute tiles at once")
    return tuple(where[k] for k in range(len(items)))


def double_buffered(omit_pingpong: str = "") -> bool:
    """Whether aircc ping-pongs L1 buffers under XRTBackend's omit_pingpong ("", "L1", "L2" or
    "all"; True means "all"): aircc runs air-label-scf-for-to-ping-pong and
    air-ping-pong-transform unless told "all", and skips L1 for "L1" (Xilinx/mlir-air
    tools/aircc/aircc.cpp:966-978; python/air/backend/xrt.py:300-304, 472-477)."""
    if omit_pingpong is True:
        return False
    if omit_pingpong not in ("", "L1", "L2", "all", False, None):
        raise LlamanbError(f"omit_pingpong must be '', 'L1', 'L2' or 'all', got {omit_pingpong!r}")
    return omit_pingpong not in ("L1", "all")


def l1_need(h: HerdPlan, omit_pingpong: str = "") -> int:
    """Bytes of L1 a tile of herd h needs: every buffer once, and with ping-pong a second copy of
    every DMA-fed one (the destination of an air.dma_memcpy_nd), so the next block can arrive
    while the core works on this one.

    Upstream's pass doubles the buffers allocated inside an scf.for of a herd (their memref.alloc
    a direct child of the loop; mlir-air mlir/include/air/Transform/Passes.td:950-979), and
    upstream's kernels allocate each per-trip block inside its loop. llamanb's builders allocate
    once per herd, so counting a second copy of every DMA-fed buffer is this model's stand-in:
    what the real compiler would double if the same blocks were allocated per trip."""
    extra = sum(b.nbytes for b in h.l1 if "in" in b.dma) if double_buffered(omit_pingpong) else 0
    return h.l1_bytes + extra


def check_memory(launch: LaunchPlan, spec: ArraySpec = NPU2, omit_pingpong: str = "") -> None:
    """LlamanbError when a herd's L1 buffers (doubled where ping-pong applies) or the launch's L2
    buffers do not fit."""
    for h in launch.herds:
        need = l1_need(h, omit_pingpong)
        if need > spec.l1_for_buffers:
            bufs = " + ".join(f"{b.name} {list(b.shape)}x{b.dtype} ({b.nbytes} B"
                              + (", x2" if need > h.l1_bytes and "in" in b.dma else "") + ")"
                              for b in h.l1)
            pp = (" with ping-pong (a second copy of each DMA-fed buffer; omit_pingpong='all' "
                  "turns it off)" if need > h.l1_bytes else "")
            raise LlamanbError(
                f"herd {h.sym!r} in launch {launch.sym!r} needs {need} bytes of L1 per "
                f"tile{pp} ({bufs}); a compute tile has {spec.l1_bytes} bytes, "
                f"{spec.stack_bytes} of them the core's stack: choose smaller tiles")
    if launch.l2_bytes > spec.l2_bytes:
        raise LlamanbError(
            f"launch {launch.sym!r} needs {launch.l2_bytes} bytes of L2; the {spec.columns} mem "
            f"tiles hold {spec.l2_bytes} ({spec.mem_tile_bytes} each): choose smaller L2 tiles")


@dataclass(frozen=True)
class LaunchUse:
    """What one launch occupies on the (emulated) array."""
    launch: LaunchPlan
    placements: tuple
    spec: ArraySpec = NPU2

    @property
    def tiles_used(self) -> int:
        return sum(len(p.tiles(self.spec)) for p in self.placements)

    @property
    def mem_tiles_needed(self) -> int:
        return ceil(self.launch.l2_bytes / self.spec.mem_tile_bytes)

    def summary(self) -> str:
        herds = "; ".join(f"{p.herd.sym}{f' #{p.instance}' if p.herd.instances > 1 else ''} "
                          f"{list(cols_rows(p.herd))} at column {p.col}, row "
                          f"{p.row + self.spec.first_core_row}, L1 {p.herd.l1_bytes / KIB:.1f} "
                          f"KiB/tile" for p in self.placements)
        return (f"{self.launch.sym}: {self.tiles_used}/{self.spec.compute_tiles} compute tiles "
                f"({herds}); L2 {self.launch.l2_bytes / KIB:.1f} of "
                f"{self.spec.l2_bytes // KIB} KiB -- emulated {self.spec.name}")


def launch_use(launch: LaunchPlan, spec: ArraySpec = NPU2, omit_pingpong: str = "") -> LaunchUse:
    check_memory(launch, spec, omit_pingpong)
    return LaunchUse(launch, place(launch.herds, spec), spec)


def omit_pingpong_of(module) -> str:
    """The omit_pingpong a module is compiled with: its KernelSpec's `backend` options, else ""
    (XRTBackend's default: ping-pong everywhere)."""
    return (getattr(module, "backend", None) or {}).get("omit_pingpong", "")


def usage(module, spec: ArraySpec = NPU2, omit_pingpong: str | None = None) -> list[LaunchUse]:
    """Every launch of a module (its text, or a KernelSpec with `.text`), placed and checked
    (LlamanbError when one cannot be). L1 is counted double-buffered unless omit_pingpong (given,
    or the KernelSpec's compile option) turns ping-pong off."""
    text = module if isinstance(module, str) else module.text
    pp = omit_pingpong if omit_pingpong is not None else omit_pingpong_of(module)
    launches = read_plan(text).launches
    if not launches:
        raise LlamanbError("the module has no air.launch and no bare air.herd: nothing to place")
    return [launch_use(lp, spec, pp) for lp in launches]


def l1_table(groups: dict) -> str:
    """Per group and herd: L1 per tile single-buffered, double-buffered, what the group's compile
    options make it, against a tile's L1 (64 KiB, 1 KiB of it the stack)."""
    rows = [("group", "herd", "op", "single KiB", "double KiB", "omit_pingpong", "needs KiB",
             "fits")]
    for name, g in groups.items():
        spec = getattr(g, "spec", g)
        pp = omit_pingpong_of(spec)
        for lp in read_plan(spec.text).launches:
            for h in lp.herds:
                need = l1_need(h, pp)
                rows.append((name, h.sym, h.op, f"{h.l1_bytes / KIB:.1f}",
                             f"{l1_need(h, '') / KIB:.1f}",
                             repr(pp), f"{need / KIB:.1f}",
                             "yes" if need <= NPU2.l1_for_buffers else "NO"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(x) for c, x in zip(r, w)).rstrip() for r in rows)

"""The emulated NPU2 array: herd placement, tiles per launch, L1/L2 checks.

The modules are written here, by a small writer independent of the package's builders, and every
expectation is closed-form arithmetic on the sizes they declare (tiles = x * y, bytes = elements
times 2 for bf16, positions from the placement rule). When upstream MLIR's Python bindings are
installed, each text is also parsed and verified by them, so the tests read real MLIR.
"""
from __future__ import annotations

import pytest

from llamanb.errors import LlamanbError
from llamanb.npu.compiler import array

KIB = 1024


def memref(shape, space=None) -> str:
    dims = "x".join(str(d) for d in shape)
    return f"memref<{dims}xbf16{'' if space is None else f', {space} : i32'}>"


class Writer:
    """Generic-form AIR text in the package's module form: launch { segment { herds } } or bare
    herds in one function, sizes from index constants, buffers from memref.alloc."""

    def __init__(self):
        self.lines, self.n = [], 0

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def const(self, v: int, indent: str) -> str:
        name = self.fresh("c")
        self.lines.append(f'{indent}{name} = "arith.constant"() <{{value = {v} : index}}> : () -> index')
        return name

    def alloc(self, shape, space: int, indent: str) -> None:
        self.lines.append(f'{indent}{self.fresh("buf")} = "memref.alloc"() <{{operandSegmentSizes = '
                          f'array<i32: 0, 0>}}> : () -> {memref(shape, space)}')

    def op(self, name, sizes, sym, indent, body, attrs=""):
        """"air.<name>"(sizes) with a region; body(indent) writes the region's ops."""
        size_vals = [self.const(s, indent) for s in sizes]
        block = ", ".join(f"{self.fresh('t')}: index" for _ in range(2 * len(sizes)))
        self.lines.append(f'{indent}"air.{name}"({", ".join(size_vals)}) <{{operandSegmentSizes = '
                          f'array<i32: 0, {len(sizes)}, 0>, sym_name = "{sym}"}}> ({{')
        self.lines.append(f"{indent}^bb0({block}):")
        body(indent + "  ")
        self.lines.append(f'{indent}  "air.{name}_terminator"() : () -> ()')
        self.lines.append(f"{indent}}}){attrs} : ({', '.join(['index'] * len(sizes))}) -> ()")

    def herd(self, name, sizes, l1=(), op="gemm", indent="    "):
        self.op("herd", sizes, name, indent, lambda ind: [self.alloc(s, 2, ind) for s in l1],
                f' {{llamanb.op = "{op}"}}')

    def launch(self, name, herds, l2=(), unroll=()):
        def segment(ind):
            for shape in l2:
                self.alloc(shape, 1, ind)
            for h in herds:
                self.herd(*h, indent=ind)

        self.op("launch", [1, 1], name, "    ",
                lambda ind: self.op("segment", list(unroll), f"{name}_seg", ind, segment))

    def text(self) -> str:
        body = "\n".join(self.lines)
        return f"module {{\n  func.func @kernel() {{\n{body}\n    return\n  }}\n}}\n"


def module(*launches, bare=()) -> str:
    w = Writer()
    for h in bare:
        w.herd(*h)
    for lau in launches:
        w.launch(*lau)
    text = w.text()
    try:
        from mlir import ir
    except ImportError:
        return text
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    assert ir.Module.parse(text, ctx).operation.verify()
    return text


def test_one_row_herd_spans_all_columns():
    """An [8, 1] herd is one tile in each of the 8 columns, all in the lowest compute row (not
    'one column of 8 tiles': a column has 4 compute tiles)."""
    text = module(("rope", [("rope_herd", [8, 1], [(64,), (64,), (128,)], "rope")], [(256, 64)]))
    (use,) = array.usage(text)
    assert use.tiles_used == 8
    (p,) = use.placements
    assert p.herd.op == "rope" and p.herd.size == (8, 1)
    assert p.tiles() == [(c, 2) for c in range(8)]
    assert p.herd.l1_bytes == (64 + 64 + 128) * 2
    assert use.launch.l2_bytes == 256 * 64 * 2 and use.mem_tiles_needed == 1
    assert "emulated" in use.summary() and "8/32" in use.summary()


def test_full_array_gemm():
    (use,) = array.usage(module(("gemm", [("mm", [8, 4], [(64, 64), (64, 64), (64, 64)])])))
    assert use.tiles_used == 32
    assert sorted(use.placements[0].tiles()) == [(c, r) for c in range(8) for r in range(2, 6)]


def test_herds_of_one_launch_placed_largest_first_row_by_row():
    """Device rows: [8, 2] first (16 tiles): rows 2-3. Then scanning row 4 from column 0: [4, 1] at column 0,
    and at column 4 the [2, 2] takes rows 4-5. (Placement.row counts compute rows from 0.)"""
    text = module(("mix", [("small", [4, 1]), ("square", [2, 2]), ("big", [8, 2])]))
    (use,) = array.usage(text)
    at = {p.herd.sym: (p.col, p.row) for p in use.placements}
    assert at == {"big": (0, 0), "small": (0, 2), "square": (4, 2)}
    assert [p.herd.sym for p in use.placements] == ["small", "square", "big"]   # as written
    tiles = [t for p in use.placements for t in p.tiles()]
    assert len(tiles) == len(set(tiles)) == 16 + 4 + 4 == use.tiles_used


def test_launches_each_get_the_whole_array_and_bare_herds_are_launches():
    text = module(("first", [("a", [8, 4])]), ("second", [("b", [8, 4])]),
                  bare=[("norm", [8, 1], [(2048,)], "rmsnorm")])
    uses = array.usage(text)
    assert [u.launch.sym for u in uses] == ["norm", "first", "second"]
    assert [u.tiles_used for u in uses] == [8, 32, 32]
    assert uses[0].launch.herds[0].l1_bytes == 4096 and uses[0].launch.l2_bytes == 0


def test_one_dimensional_herd_is_one_row():
    (use,) = array.usage(module(("l", [("h", [3])])))
    assert use.placements[0].tiles() == [(0, 2), (1, 2), (2, 2)]


@pytest.mark.parametrize("size", [[9, 1], [1, 5], [16, 2]])
def test_herd_larger_than_the_array_rejected(size):
    with pytest.raises(LlamanbError, match=r"does not fit .*at most \[8, 4\]"):
        array.usage(module(("l", [("too_big", size)])))


def test_herds_that_cannot_share_the_array_rejected():
    with pytest.raises(LlamanbError, match=r"no valid placement .*'extra' \[1, 1\].*33 of 32"):
        array.usage(module(("l", [("gemm", [8, 4]), ("extra", [1, 1])])))


def test_l1_limit_is_64_kib_minus_the_stack():
    """64 KiB per tile, 1 KiB of it the core's stack: 64512 bytes of buffers = 32256 bf16 fit,
    one element more does not."""
    fits = array.NPU2.l1_bytes - array.NPU2.stack_bytes
    assert fits == 64 * KIB - 1024
    (use,) = array.usage(module(("l", [("h", [8, 1], [(fits // 2 - 256,), (256,)])])))
    assert use.placements[0].herd.l1_bytes == fits
    with pytest.raises(LlamanbError, match=r"needs 64514 bytes of L1 per tile .*65536 bytes, 1024"):
        array.usage(module(("l", [("h", [8, 1], [(fits // 2 - 256,), (257,)])])))


def test_l2_limit_is_eight_mem_tiles():
    per_tile = 512 * KIB // 2                                 # bf16 elements in one mem tile
    (use,) = array.usage(module(("l", [("h", [8, 1])], [(per_tile,)] * 8)))
    assert use.launch.l2_bytes == 4 * 1024 * KIB and use.mem_tiles_needed == 8
    with pytest.raises(LlamanbError, match="needs 4194306 bytes of L2"):
        array.usage(module(("l", [("h", [8, 1])], [(per_tile,)] * 8 + [(1,)])))


def test_unrolled_segment_places_each_instance():
    """FlashAttention's form: a segment unrolled [2, 1] around a [4, 4] herd is two herds of 16
    tiles side by side, 32 in all; unrolled three times it cannot be placed."""
    (use,) = array.usage(module(("fa", [("attn", [4, 4], [(32, 64)], "flash_attn")], (), (2, 1))))
    assert use.tiles_used == 32 and [p.instance for p in use.placements] == [0, 1]
    assert [(p.col, p.row) for p in use.placements] == [(0, 0), (4, 0)]
    with pytest.raises(LlamanbError, match="no valid placement .*48 of 32"):
        array.usage(module(("fa", [("attn", [4, 4])], (), (3, 1))))


def test_modules_without_launches_rejected():
    with pytest.raises(LlamanbError, match="nothing to place"):
        array.usage("module {\n  func.func @k() {\n    return\n  }\n}\n")


# ---- the tile-usage figure and widget --------------------------------------------------------
def lit_tiles(ax) -> list[tuple[int, int]]:
    """(column, row) of every tile drawn in a herd color."""
    from matplotlib.colors import to_hex

    from llamanb.npu.compiler.tileview import COLORS

    return sorted((int(p.get_x()), int(p.get_y())) for p in ax.patches
                  if to_hex(p.get_facecolor()) in COLORS)


def test_figure_lights_exactly_the_herd_tiles(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from llamanb.npu.compiler import tileview

    (use,) = array.usage(module(("mix", [("small", [4, 1]), ("square", [2, 2]),
                                         ("big", [8, 2])])))
    fig = tileview.figure(use, "mix")
    ax = fig.axes[0]
    expect = [(c, r) for c in range(8) for r in (2, 3)] + [(c, 4) for c in range(4)] + \
             [(c, r) for c in (4, 5) for r in (4, 5)]
    assert lit_tiles(ax) == sorted(expect)
    assert "24/32 tiles" in ax.get_title()
    assert "emulated" in fig._suptitle.get_text()
    fig.savefig(tmp_path / "tiles.png")
    assert (tmp_path / "tiles.png").stat().st_size > 10_000


def test_overview_and_widget_cover_every_launch():
    import matplotlib

    matplotlib.use("Agg")
    pytest.importorskip("ipywidgets")
    from llamanb.npu.compiler import tileview

    kernels = {"gemm": module(("g", [("mm", [8, 4])])),
               "stitched": module(("a", [("q", [8, 1])]), ("b", [("r", [1, 1])]))}
    fig = tileview.overview(kernels, ncols=2)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [len(lit_tiles(ax)) for ax in shown] == [32, 8, 1]
    w = tileview.widget(kernels)
    pick = w.children[0]
    assert [label for label, _ in pick.options] == [
        "gemm", "stitched / launch 1 of 2: a", "stitched / launch 2 of 2: b"]
    pick.value = 2                                      # redraws without error


def test_overview_names_rows_and_chart_has_one_bar_per_launch():
    import matplotlib

    matplotlib.use("Agg")
    from llamanb.npu.compiler import tileview

    kernels = {"gemm": module(("g", [("mm", [8, 4])])),
               "stitched": module(("a", [("q", [8, 1])]), ("b", [("r", [1, 1])]))}
    fig = tileview.overview(kernels, ncols=2)
    ax = next(a for a in fig.axes if a.get_visible())
    assert [t.get_text() for t in ax.get_yticklabels()] == \
        ["shim 0", "mem 1", "core 2", "core 3", "core 4", "core 5"]
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 7
    fig = tileview.chart(kernels)
    (ax,) = fig.axes
    widths = sorted(p.get_width() for p in ax.patches if p.get_width() > 0)
    assert widths == [1, 8, 32]                        # tiles of each launch, read from the text
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["gemm", "stitched"]

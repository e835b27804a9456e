"""Pictures of the emulated NPU2 array: which tiles a launch's herds occupy, and how full their
memories are.

    draw(ax, use)            one launch on the 8 x (4 compute + 1 mem + 1 shim) grid, on an axes
    figure(use)              the same as a figure of its own
    overview(kernels)        every launch of every kernel, small multiples (a static figure), with
                             named rows and a legend
    chart(kernels)           one bar chart: tiles per launch, all kernels on one axis
    widget(kernels)          a selector over the same launches redrawing `draw` (ipywidgets)

`kernels` maps a name to a module's text (or anything with a `.text`, such as a KernelSpec), or to
the list of LaunchUse that llamanb.npu.compiler.array.usage returns. Each lit compute tile shows how much
of its 64 KiB of L1 the herd's buffers plus the core's stack take (the bar at its foot); the mem
tile row shows the launch's L2 against all eight mem tiles. matplotlib and ipywidgets are imported
only when a picture is made.
"""
from __future__ import annotations

from llamanb.npu.compiler.array import KIB, LaunchUse, cols_rows, usage

COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


def _launches(kernels) -> list[tuple[str, LaunchUse]]:
    """[(label, LaunchUse)] for every launch of every kernel, in order."""
    out = []
    for name, k in kernels.items():
        uses = k if isinstance(k, list) else usage(k)
        for i, u in enumerate(uses):
            label = name if len(uses) == 1 else \
                f"{name} / launch {i + 1} of {len(uses)}: {u.launch.sym}"
            out.append((label, u))
    return out


def row_name(spec, row: int) -> str:
    """'shim', 'mem' or 'core' with the row's number: what each row of the grid is."""
    kind = "shim" if row == 0 else "mem" if row < spec.first_core_row else "core"
    return f"{kind} {row}"


def legend_handles(spec) -> list:
    """Patches explaining the grid's colours and bars (for a figure-level legend)."""
    from matplotlib.patches import Patch

    return [Patch(facecolor=COLORS[0], edgecolor="#555555", label="compute tile of herd 1"),
            Patch(facecolor=COLORS[1], edgecolor="#555555", label="... of herd 2 (same launch)"),
            Patch(facecolor="#f4f4f4", edgecolor="#555555", label="idle compute tile"),
            Patch(facecolor="#e8e8f0", edgecolor="#555555", label="mem tile (L2)"),
            Patch(facecolor="#d9d9d9", edgecolor="#555555", label="shim tile (DDR)"),
            Patch(facecolor="#222222", label=f"bar on a tile: L1 used of {spec.l1_bytes // KIB} KiB"),
            Patch(facecolor="#1f3b73", label=f"bar on the mem row: L2 used of "
                                               f"{spec.l2_bytes // KIB} KiB")]


def draw(ax, use: LaunchUse, title: str | None = None, small: bool = False) -> None:
    """Draw one launch on `ax`: grid, lit herds, L1 gauges, L2 gauge (and, unless small, axis
    labels and legend entries for the caller's legend)."""
    from matplotlib.patches import Rectangle

    spec = use.spec
    rows = spec.first_core_row + spec.core_rows
    herds = list(use.launch.herds)                            # one color per herd
    owner = {}
    for p in use.placements:
        for t in p.tiles(spec):
            owner[t] = herds.index(p.herd)
    for col in range(spec.columns):
        for row in range(rows):
            kind = "shim" if row == 0 else "mem" if row < spec.first_core_row else "core"
            k = owner.get((col, row))
            face = COLORS[k % len(COLORS)] if k is not None else \
                {"shim": "#d9d9d9", "mem": "#e8e8f0", "core": "#f4f4f4"}[kind]
            ax.add_patch(Rectangle((col + 0.05, row + 0.05), 0.9, 0.9, facecolor=face,
                                   edgecolor="#555555", linewidth=0.6))
            if k is not None:                                   # L1 gauge: buffers + stack
                herd = herds[k]
                frac = min(1.0, (herd.l1_bytes + spec.stack_bytes) / spec.l1_bytes)
                ax.add_patch(Rectangle((col + 0.12, row + 0.12), 0.76, 0.16, facecolor="white",
                                       edgecolor="#333333", linewidth=0.4))
                ax.add_patch(Rectangle((col + 0.12, row + 0.12), 0.76 * frac, 0.16,
                                       facecolor="#222222", linewidth=0))
            elif not small and kind != "core":
                ax.text(col + 0.5, row + 0.5, kind, ha="center", va="center", fontsize=7,
                        color="#666666")
    l2 = use.launch.l2_bytes / spec.l2_bytes                  # L2 gauge across the mem row
    y = spec.first_core_row - 0.9
    ax.add_patch(Rectangle((0.1, y), spec.columns - 0.2, 0.16, facecolor="white",
                           edgecolor="#333333", linewidth=0.4))
    ax.add_patch(Rectangle((0.1, y), (spec.columns - 0.2) * min(l2, 1.0), 0.16,
                           facecolor="#1f3b73", linewidth=0))
    ax.set_xlim(0, spec.columns)
    ax.set_ylim(0, rows)
    ax.set_aspect("equal")
    ax.set_xticks([c + 0.5 for c in range(spec.columns)], [str(c) for c in range(spec.columns)])
    ax.set_yticks([r + 0.5 for r in range(rows)], [row_name(spec, r) for r in range(rows)])
    ax.tick_params(length=0, labelsize=7 if small else 8)   # 7 pt: 9.7 px at 100 dpi
    for side in ax.spines.values():
        side.set_visible(False)
    head = title or use.launch.sym
    ax.set_title(f"{head}\n{use.tiles_used}/{spec.compute_tiles} tiles, "
                 f"L2 {use.launch.l2_bytes / KIB:.0f} KiB", fontsize=8 if small else 10)
    if not small:
        ax.set_xlabel("column")
        ax.set_ylabel("row")
        for k, h in enumerate(herds):
            times = f" x{h.instances}" if h.instances > 1 else ""
            ax.plot([], [], "s", color=COLORS[k % len(COLORS)],
                    label=f"{h.sym} {list(cols_rows(h))}{times} {h.op}: L1 {h.l1_bytes / KIB:.1f}"
                          f" KiB + {spec.stack_bytes // KIB} KiB stack of {spec.l1_bytes // KIB} KiB")
        ax.plot([], [], "s", color="#1f3b73",
                label=f"L2 {use.launch.l2_bytes / KIB:.1f} of {spec.l2_bytes // KIB} KiB "
                      f"({use.mem_tiles_needed} of {spec.columns} mem tiles' worth)")


def figure(use: LaunchUse, title: str | None = None):
    """One launch as its own matplotlib figure (emulated NPU2), the legend below the grid."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 6.6), layout="constrained")
    fig.get_layout_engine().set(h_pad=0.08)
    draw(ax, use, title)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize=8,
               frameon=False)
    fig.suptitle(f"Tiles used on the emulated {use.spec.name}\n(bars: L1 per tile, L2 of all "
                 f"mem tiles)", fontsize=9)
    return fig


def overview(kernels, ncols: int = 4):
    """Every launch of every kernel as small multiples: the static twin of `widget`."""
    import matplotlib.pyplot as plt

    items = _launches(kernels)
    nrows = -(-len(items) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols, 2.7 * nrows), squeeze=False,
                             layout="constrained")
    for ax, (label, use) in zip(axes.flat, items):
        draw(ax, use, label, small=True)
    for ax in list(axes.flat)[len(items):]:
        ax.set_visible(False)
    spec = items[0][1].spec
    fig.legend(handles=legend_handles(spec), loc="outside lower center", ncol=min(4, ncols + 1),
               fontsize=7, frameon=False)
    fig.suptitle(f"Compute tiles per launch, emulated NPU2 (x: column)", fontsize=10)
    return fig


def chart(kernels, title: str | None = None):
    """Tiles used by every launch of every kernel, as one horizontal bar chart: a bar per launch,
    coloured by kernel, with the one-row (8 tiles) and whole-array (32) marks."""
    import matplotlib.pyplot as plt

    items = _launches(kernels)
    spec = items[0][1].spec
    names = list(kernels)
    fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.24 * len(items)), layout="constrained")
    ys = list(range(len(items)))[::-1]
    for y, (label, use) in zip(ys, items):
        kname = next(n for n in names if label == n or label.startswith(n + " / "))
        ax.barh(y, use.tiles_used, color=COLORS[names.index(kname) % len(COLORS)],
                edgecolor="#333333", linewidth=0.4)
        ax.text(use.tiles_used + 0.3, y, f"{use.tiles_used}", va="center", fontsize=7)
    short = [label.split(": ")[-1] if " / launch " in label else label for label, _ in items]
    ax.set_yticks(ys, short, fontsize=7)
    for x, what in ((spec.columns, "one row of tiles"), (spec.compute_tiles, "whole array")):
        ax.axvline(x, color="#888888", linestyle="--", linewidth=0.8)
        ax.text(x, max(ys) + 0.7, what, ha="center", fontsize=7, color="#555555")
    ax.set_xlim(0, spec.compute_tiles + 3)
    ax.set_ylim(-0.7, max(ys) + 1.2)
    ax.set_xlabel(f"compute tiles used (of {spec.compute_tiles})")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(facecolor=COLORS[k % len(COLORS)], label=n)
                       for k, n in enumerate(names)], fontsize=7, loc="lower right")
    ax.set_title(title or f"Tiles per launch on the emulated {spec.name}", fontsize=10)
    return fig


def widget(kernels):
    """A dropdown over every launch of every kernel; choosing one redraws its tile figure."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    items = _launches(kernels)
    pick = w.Dropdown(options=[(label, i) for i, (label, _) in enumerate(items)],
                      description="launch", layout=w.Layout(width="95%"))
    out = w.Output()

    def show(change=None):
        out.clear_output(wait=True)
        with out:
            label, use = items[pick.value]
            fig = figure(use, label)
            display(fig)
            plt.close(fig)

    pick.observe(show, names="value")
    show()
    return w.VBox([pick, out])

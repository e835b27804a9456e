"""Cells that keep a reader waiting with nothing on screen (issue 29 item 7).

Runs each notebook top to bottom in a kernel, as nbval and `make notebooks` do, and timestamps
every message a reader would see: stream text, displays, display updates, errors, and widget
updates. A cell's *silence* is its longest wait with nothing new on screen: from the moment it
starts to its first output, between two outputs, or from its last output to its end. A wait
that follows a progress line (llamanb.platform.progress: "llamanb: converting ... ...", shown while a
package step runs) is not silence: the reader is told what is running. A cell silent for more
than LIMIT_S seconds fails: a long step must say what it does (the package's slow steps do, with
llamanb.platform.progress) or print as it goes.

    python tests/lab/silent_cells.py [NN_name ...]      every chapter by default

Prints, per chapter, its run time and every cell that ran for more than LIMIT_S with its
silence; exits 1 if any cell is silent for more than LIMIT_S. Timings depend on the machine and
its load (they are printed, not stored anywhere): a cell near the limit on a busy machine may pass
on a quiet one.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT_S = 10.0
SEEN = {"stream", "display_data", "execute_result", "error", "update_display_data", "clear_output"}
MARK = " ..."                 # llamanb.platform.progress.MARK (not imported: this script reads the kernel)


def cell_timelines(path: Path, timeout: int = 600) -> tuple[float, list[tuple[int, str, float, float]]]:
    """Execute the notebook at `path`; return its total seconds and, per code cell,
    (index, first source line, seconds, longest silence in seconds)."""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(path.with_suffix(".py"), fmt="py:percent")
    marks: dict[int, list[float]] = {}

    class Timed(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            kind = msg["msg_type"]
            if kind in SEEN or kind == "comm_msg" and msg["content"].get("data", {}).get("method") == "update":
                text = str(msg["content"].get("data", {}).get("text/plain", ""))
                marks.setdefault(cell_index, []).append((time.perf_counter(), text.endswith(MARK)))
            return super().process_message(msg, cell, cell_index)

    starts, ends = {}, {}
    client = Timed(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(path.parent)}},
                   on_cell_execute=lambda cell, cell_index: starts.__setitem__(cell_index, time.perf_counter()),
                   on_cell_executed=lambda cell, cell_index, execute_reply: ends.__setitem__(cell_index, time.perf_counter()))
    t0 = time.perf_counter()
    client.execute()
    total = time.perf_counter() - t0
    rows = []
    for i, start in starts.items():
        # (time, whether what is on screen from then on says what is running)
        times = [(start, False)] + sorted(m for m in marks.get(i, []) if start <= m[0] <= ends[i])
        times.append((ends[i], False))
        silence = max((b - a for (a, told), (b, _) in zip(times, times[1:]) if not told), default=0.0)
        first = next((ln for ln in nb.cells[i].source.splitlines() if ln.strip() and not ln.startswith("# NBVAL")), "")
        rows.append((i, first[:60], ends[i] - start, silence))
    return total, rows


def main(argv: list[str]) -> int:
    import re

    names = argv or sorted(p.stem for p in (REPO / "notebooks").glob("*.py")   # 01b, A_ too
                           if re.match(r"([0-9][0-9][a-z]?|[A-Z])_", p.name))
    silent = 0
    for name in names:
        total, rows = cell_timelines(REPO / "notebooks" / f"{name}.py")
        print(f"{name}: {total:.0f} s", flush=True)
        for i, first, seconds, silence in rows:
            if seconds > LIMIT_S:
                bad = silence > LIMIT_S
                silent += bad
                print(f"  cell {i:3d} {seconds:5.1f} s, silent {silence:5.1f} s "
                      f"{'SILENT' if bad else 'ok    '} {first}", flush=True)
    print(f"{silent} cell(s) silent for more than {LIMIT_S:.0f} s")
    return 1 if silent else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

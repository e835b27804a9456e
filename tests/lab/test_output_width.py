"""Every line a committed notebook prints fits JupyterLab's output column.

Lab wraps output text with `word-break: break-all` (@jupyterlab/outputarea's style/base.css,
`.jp-OutputArea-output pre`), so a line wider than the column breaks mid-word and a table's
columns fall apart. At Lab's default layout (a 1400-px-wide window with the file browser open,
the default fonts) the column holds LIMIT characters; `make test-lab` measures the column in the
browser and fails if it holds fewer. Reads the committed .ipynb files only (well under a second).

    python tests/lab/test_output_width.py      lists every line over the limit, by chapter and cell
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 120
NOTEBOOKS = sorted(p for p in (REPO / "notebooks").glob("*.ipynb")
                   if re.match(r"([0-9][0-9][a-z]?|[A-Z])_", p.name))


def printed_text(output: dict) -> str:
    """The text Lab shows as monospace for one output: a stream, or a display/result whose best
    rendering is text/plain (an image, HTML or widget is drawn instead)."""
    if output["output_type"] == "stream":
        return "".join(output["text"])
    data = output.get("data", {})
    if output["output_type"] in ("display_data", "execute_result") and "text/plain" in data and not any(
            k.startswith("image/") or k in ("text/html", "text/markdown", "text/latex")
            or k.startswith("application/vnd.jupyter.widget") for k in data):
        return "".join(data["text/plain"])
    return ""


def wide_lines(path: Path, limit: int = LIMIT) -> list[tuple[int, int, str]]:
    """(code cell number as Lab counts from 1, width, line) for each printed line over `limit`."""
    nb = json.loads(path.read_text())
    found = []
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for n, cell in enumerate(code, 1):
        for output in cell.get("outputs", []):
            for line in printed_text(output).splitlines():
                if len(line) > limit:
                    found.append((n, len(line), line))
    return found


def test_chapters_found():
    names = {p.stem[:3] for p in NOTEBOOKS}
    assert {"00_", "01b", "03b", "04b", "13_"} <= names


def test_the_check_sees_a_wide_line(tmp_path):
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["x" * LIMIT + "\n", "y" * (LIMIT + 1) + "\n"]},
        {"output_type": "execute_result", "data": {"text/plain": ["'" + "z" * LIMIT + "'"]}},
        {"output_type": "display_data", "data": {"text/plain": ["<Figure " + "f" * LIMIT + ">"],
                                                 "image/png": "iVBOR"}}]}]}
    (tmp_path / "99_x.ipynb").write_text(json.dumps(nb))
    assert [(n, w) for n, w, _ in wide_lines(tmp_path / "99_x.ipynb")] == [(1, LIMIT + 1), (1, LIMIT + 2)]


def test_every_printed_line_fits_labs_column():
    over = [f"{p.stem} cell {n}: {w} > {LIMIT}: {line[:60]}..." for p in NOTEBOOKS
            for n, w, line in wide_lines(p)]
    assert not over, f"{len(over)} printed lines wider than Lab's column:\n" + "\n".join(over)


if __name__ == "__main__":
    rows = [(p.stem, n, w, line) for p in NOTEBOOKS for n, w, line in wide_lines(p)]
    for stem, n, w, line in rows:
        print(f"{stem:28s} cell {n:3d} {w:4d}  {line[:90]}")
    sys.exit(1 if rows else 0)

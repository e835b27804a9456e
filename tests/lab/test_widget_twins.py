"""Every widget of the course has a static twin beside it: what the widget shows, stored in the
committed notebook, for a reader whose widget cannot render (a static viewer such as GitHub, a
Lab that has lost the widget state, a notebook not run yet).

  * a figure widget (a slider or dropdown redrawing a figure): the very next code cell stores a
    figure (image/png);
  * the chat widget: one of the next three code cells stores a scripted exchange, "you> ..."
    then "assistant> ..." with a non-empty answer.

And every widget carries the kernel-gone notice (llamanb.course.widgets.kernel_notice) as its first
child: a widget reopened with no kernel behind it says so in one line instead of looking live.

Reads the committed .ipynb files only (no kernel, well under a second); `make test-lab` checks the
live widgets in JupyterLab.
"""
from __future__ import annotations

import json
import re

import pytest
from conftest import REPO_ROOT

from llamanb.course.widgets import NOTICE_CLASS

WIDGET = "application/vnd.jupyter.widget-view+json"
NOTEBOOKS = sorted(p for p in (REPO_ROOT / "notebooks").glob("*.ipynb")     # 01b, A_ too
                   if re.match(r"([0-9][0-9][a-z]?|[A-Z])_", p.name))


def widget_cells(nb) -> list[tuple[int, str]]:
    """(cell index, the widget's text/plain repr) for each cell that displays a widget."""
    found = []
    for i, c in enumerate(nb["cells"]):
        for o in c.get("outputs", []):
            if WIDGET in o.get("data", {}):
                found.append((i, "".join(o["data"].get("text/plain", ""))))
    return found


def code_cells_after(nb, i: int, n: int) -> list[dict]:
    return [c for c in nb["cells"][i + 1:] if c["cell_type"] == "code"][:n]


def has_figure(cell) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def has_exchange(cell) -> bool:
    text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o["output_type"] == "stream")
    return "you> " in text and "assistant> " in text and bool(text.split("assistant> ", 1)[1].strip())


def test_the_course_has_widgets():
    assert sum(len(widget_cells(json.loads(p.read_text()))) for p in NOTEBOOKS) >= 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_widget_has_a_static_twin(path):
    nb = json.loads(path.read_text())
    missing = []
    for i, text in widget_cells(nb):
        source = "".join(nb["cells"][i]["source"])
        if "Text(value=" in text or "chat_widget(" in source:   # the chat (llamanb.course.widgets;
            # its repr now opens with the kernel notice and is cut before the text box)
            ok = any(has_exchange(c) for c in code_cells_after(nb, i, 3))
            want = "a scripted 'you> / assistant>' exchange in the next 3 code cells"
        else:
            ok = any(has_figure(c) for c in code_cells_after(nb, i, 1))
            want = "a figure in the next code cell"
        if not ok:
            missing.append(f"cell {i} ({text[:40]}...): no {want}")
    assert not missing, f"{path.name}: " + "; ".join(missing)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_widget_says_when_its_kernel_is_gone(path):
    """The widget's repr opens with its first child: the notice, an HTML widget whose value holds
    NOTICE_CLASS's stylesheet (a notice nested deeper, or none, would not be seen first)."""
    nb = json.loads(path.read_text())
    bare = [f"cell {i} ({text[:60]}...)" for i, text in widget_cells(nb)
            if not re.match(r"VBox\(children=\(HTML\(value=[\"']<style>\." + re.escape(NOTICE_CLASS), text)]
    assert not bare, f"{path.name}: no kernel_notice() first in " + "; ".join(bare)

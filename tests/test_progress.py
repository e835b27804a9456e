"""llamanb.platform.progress in a real kernel: the stage line is shown while the step runs (a display, then
updates of it) and an executed notebook keeps nothing of it once `course.build` has written it;
outside a kernel nothing is printed."""
from __future__ import annotations

import pytest

from llamanb.course import notebooks as course
from llamanb.platform.progress import MARK, is_leftover, stages

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

CELLS = [
    "import time\nfrom llamanb.platform.progress import stages\n"
    "with stages() as say:\n    say('stage one')\n    time.sleep(0.2)\n    say('stage two')\nprint('done')",
    "with stages(after_s=60) as say:\n    say('never shown')\nprint('quick')",
]


def test_stages_show_then_leave_nothing(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    seen = []

    class Recording(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            if msg["msg_type"] in ("display_data", "update_display_data"):
                seen.append((cell_index, msg["msg_type"], msg["content"]["data"].get("text/plain")))
            return super().process_message(msg, cell, cell_index)

    Recording(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert seen == [(0, "display_data", f"llamanb: stage one{MARK}"),
                    (0, "update_display_data", f"llamanb: stage two{MARK}"),
                    (0, "update_display_data", None)]                    # the emptied bundle
    assert [o.output_type for o in nb.cells[0].outputs] == ["display_data", "stream"]
    assert is_leftover(nb.cells[0].outputs[0])
    course._strip(nb)                                                     # what build writes
    assert [(o.output_type, o.text) for o in nb.cells[0].outputs] == [("stream", "done\n")]
    assert [(o.output_type, o.text) for o in nb.cells[1].outputs] == [("stream", "quick\n")]


def test_outside_a_kernel_nothing_is_printed(capsys):
    with stages() as say:
        say("converting")
    assert capsys.readouterr() == ("", "")


def test_progress_off_shows_nothing_in_a_kernel(tmp_path, monkeypatch):
    """LLAMANB_PROGRESS=off (set by notebooks/conftest.py for nbval): a kernel started with it shows
    no stage line, however long the step."""
    from nbclient import NotebookClient

    monkeypatch.setenv("LLAMANB_PROGRESS", "off")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELLS[0])])
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outs = nb.cells[0].outputs
    assert [o.get("output_type") for o in outs] == ["stream"] and outs[0]["text"] == "done\n"

"""The course machinery: the pairing check catches drift; the committed notebooks are consistent.

(Executing the notebooks and comparing their stored outputs is nbval's job: `make test-notebooks`.)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT

jupytext = pytest.importorskip("jupytext")
nbformat = pytest.importorskip("nbformat")

from llamanb.course import notebooks as course  # noqa: E402
from llamanb.platform.hardware import amd_npu_devices, tenstorrent_devices  # noqa: E402

HEADER = """# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---
"""
BODY = """
# %% [markdown]
# # 98 · A test notebook
#
# One claim.

# %%
x = 6 * 7
print(x)
"""


def make_pair(directory, body=BODY, name="98_pair_test"):
    py = directory / f"{name}.py"
    py.write_text(HEADER + body)
    nb = jupytext.read(py, fmt="py:percent")
    nbformat.write(nb, directory / f"{name}.ipynb")
    return py, directory / f"{name}.ipynb"


def test_fresh_pair_is_consistent(tmp_path):
    py, ipynb = make_pair(tmp_path)
    assert course.pairs(tmp_path) == [(py, ipynb)]
    assert course.check(tmp_path) == []


def test_outputs_and_metadata_do_not_count_as_drift(tmp_path):
    py, ipynb = make_pair(tmp_path)
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nb.cells[1].execution_count = 1
    nb.metadata["widgets"] = {"state": {}}
    nbformat.write(nb, ipynb)
    assert course.check(tmp_path) == []


def test_edited_py_is_drift(tmp_path):
    py, _ = make_pair(tmp_path)
    py.write_text(py.read_text().replace("x = 6 * 7", "x = 6 * 9"))
    problems = course.check(tmp_path)
    assert len(problems) == 1
    assert "98_pair_test.py and 98_pair_test.ipynb hold different cells" in problems[0]
    assert "-x = 6 * 9" in problems[0] and "+x = 6 * 7" in problems[0]      # a real diff


def test_edited_ipynb_is_drift(tmp_path):
    _, ipynb = make_pair(tmp_path)
    data = json.loads(ipynb.read_text())
    data["cells"][0]["source"] = ["# 98 · A renamed notebook"]
    ipynb.write_text(json.dumps(data))
    assert len(course.check(tmp_path)) == 1


def test_added_cell_is_drift(tmp_path):
    py, _ = make_pair(tmp_path)
    py.write_text(py.read_text() + "\n# %%\nprint('more')\n")
    assert len(course.check(tmp_path)) == 1


def test_markdown_turned_code_is_drift(tmp_path):
    body = BODY.replace("# %% [markdown]\n# # 98", "# %%\n# # 98")
    py, _ = make_pair(tmp_path)
    py.write_text(HEADER + body)
    assert len(course.check(tmp_path)) == 1


def set_mtime(path, seconds_from_now):
    t = time.time() + seconds_from_now
    os.utime(path, (t, t))


def edit_ipynb_cell(ipynb, old, new):
    nb = nbformat.read(ipynb, as_version=4)
    for c in nb.cells:
        c.source = c.source.replace(old, new)
    nbformat.write(nb, ipynb)


def test_newer_ipynb_gets_advice_that_keeps_it(tmp_path):
    """An edit saved from Jupyter without pairing: `make notebooks` would regenerate the .ipynb
    from the stale .py and throw the edit away, so it must not be the advice."""
    py, ipynb = make_pair(tmp_path)
    edit_ipynb_cell(ipynb, "x = 6 * 7", "x = 6 * 9")
    set_mtime(py, -60)
    (msg,) = course.check(tmp_path)
    first = msg.splitlines()[0]
    assert "the .ipynb is newer" in first and "modified 60 s after" in first
    assert f"jupytext --to py:percent {ipynb}" in first
    # the only `make notebooks` offered comes after the edit is carried into the .py
    assert first.index("jupytext --to py:percent") < first.index("make notebooks")


def test_newer_py_gets_advice_that_keeps_it(tmp_path):
    py, ipynb = make_pair(tmp_path)
    py.write_text(py.read_text().replace("x = 6 * 7", "x = 6 * 9"))
    set_mtime(ipynb, -60)
    (msg,) = course.check(tmp_path)
    first = msg.splitlines()[0]
    assert "the .py is newer" in first and f"make notebooks NB={py}" in first
    assert "jupytext --to" not in first          # that would overwrite the newer .py


def test_same_mtime_says_it_cannot_tell(tmp_path):
    py, ipynb = make_pair(tmp_path)
    edit_ipynb_cell(ipynb, "x = 6 * 7", "x = 6 * 9")
    set_mtime(py, 0)
    os.utime(ipynb, (py.stat().st_atime, py.stat().st_mtime))
    (msg,) = course.check(tmp_path)
    assert "cannot tell which side is newer" in msg and "each overwrites the other file" in msg


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                   check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize("edited", ["py", "ipynb"])
def test_git_content_decides_over_file_times(tmp_path, edited):
    """In a clone, file times say nothing (checkout order): the side whose cells differ from the
    last commit is the edited one, even when the other file was touched later."""
    git(tmp_path, "init", "-q")
    py, ipynb = make_pair(tmp_path)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "pair")
    if edited == "py":
        py.write_text(py.read_text().replace("x = 6 * 7", "x = 6 * 9"))
        set_mtime(py, -60)                       # the untouched .ipynb looks newer by time
    else:
        edit_ipynb_cell(ipynb, "x = 6 * 7", "x = 6 * 9")
        set_mtime(ipynb, -60)
    (msg,) = course.check(tmp_path)
    assert f"the .{edited} is newer (its cells changed since the last commit" in msg


def test_missing_halves_are_reported(tmp_path):
    py, ipynb = make_pair(tmp_path)
    ipynb.unlink()
    assert "no 98_pair_test.ipynb" in course.check(tmp_path)[0]
    make_pair(tmp_path)
    py.unlink()
    assert "no 98_pair_test.py" in course.check(tmp_path)[0]


def test_cli_exit_codes(tmp_path):
    make_pair(tmp_path)
    run = [sys.executable, "-m", "llamanb.course.notebooks", "check", str(tmp_path)]
    ok = subprocess.run(run, capture_output=True, text=True, cwd=REPO_ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "1 notebook pairs hold the same cells" in ok.stdout
    py = tmp_path / "98_pair_test.py"
    py.write_text(py.read_text().replace("print(x)", "print(x + 1)"))
    bad = subprocess.run(run, capture_output=True, text=True, cwd=REPO_ROOT)
    assert bad.returncode == 1
    assert "hold different cells" in bad.stderr
    unknown = subprocess.run([sys.executable, "-m", "llamanb.course.notebooks", "frobnicate"],
                             capture_output=True, text=True, cwd=REPO_ROOT)
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "unknown command" in unknown.stderr


def test_a_split_off_chapter_is_a_notebook_and_sorts_after_its_parent(tmp_path):
    """01b_name (a chapter split off after 01) is found, checked and ordered 01, 01b, 02; names
    that are not chapters are not."""
    for name in ("02_next", "01b_split_off", "01_first"):
        make_pair(tmp_path, name=name)
    (tmp_path / "1_short.py").write_text(HEADER)                  # one digit: not a chapter
    (tmp_path / "01bb_two_letters.py").write_text(HEADER)         # two letters: not a chapter
    (tmp_path / "01B_upper.py").write_text(HEADER)
    assert [py.stem for py, _ in course.pairs(tmp_path)] == ["01_first", "01b_split_off", "02_next"]
    assert course.check(tmp_path) == []


@pytest.mark.parametrize("line, verdict, passed", [
    ("01b.2 decode_flops: passed, all 7 cases", True, True),
    ("03b.1 pad_prompt: FAILED on case 2/6 (...)", True, False),
    ("04.1 kv_append: not attempted yet (the function still raises NotImplementedError)", True, False),
    ("1b.1 x: passed", False, False),
    ("01bb.1 x: passed", False, False),
])
def test_verdict_lines_of_split_off_chapters_are_read(line, verdict, passed):
    assert bool(course.VERDICT.match(line)) is verdict
    assert bool(course.VERDICT_PASSED.match(line)) is passed


def test_committed_notebooks_are_paired():
    found = course.pairs()
    assert found, "no notebooks found"
    names = [py.stem for py, _ in found]
    assert names == sorted(names) and names[0].startswith("00_")
    assert course.check() == []


def test_committed_notebooks_carry_no_widget_state_and_were_executed():
    for _, ipynb in course.pairs():
        nb = nbformat.read(ipynb, as_version=4)
        assert "widgets" not in nb.metadata, ipynb.name
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(c.execution_count for c in code), f"{ipynb.name} is not executed"
        assert not any(o.output_type == "error" for c in code for o in c.outputs), ipynb.name


# ---- hardware probe ----------------------------------------------------------------------------
def test_device_nodes_are_found_by_driver(tmp_path):
    accel = tmp_path / "accel"
    for node, driver in (("accel0", "amdxdna"), ("accel1", "habanalabs")):
        (tmp_path / "drivers" / driver).mkdir(parents=True)
        (accel / node / "device").mkdir(parents=True)
        (accel / node / "device" / "driver").symlink_to(tmp_path / "drivers" / driver)
    assert amd_npu_devices(accel) == ["/dev/accel/accel0"]
    assert amd_npu_devices(tmp_path / "missing") == []
    tt = tmp_path / "tenstorrent"
    tt.mkdir()
    (tt / "0").touch()
    assert tenstorrent_devices(tt) == [str(tt / "0")]

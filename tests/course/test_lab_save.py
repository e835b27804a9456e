"""A notebook saved from JupyterLab reaches its .py, wherever the server is rooted.

JupyterLab saves through the server's contents manager; jupytext's contents manager (which the
`jupyterlab_jupytext` server extension installs) writes every paired format on save. It finds the
pairing in a jupytext.toml, walking up from the notebook's folder, but only as far as the server's
root. These tests save an edit through that contents manager, rooted at a copy of the repository
and at its notebooks/ folder, with the repository's own jupytext configuration files, and read
the .py back from disk.
"""
from __future__ import annotations

import shutil

import pytest

from conftest import REPO_ROOT

jupytext = pytest.importorskip("jupytext")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("jupyter_server", reason="jupyter_server (the notebooks extra) is not installed")

from llamanb.course import notebooks as course  # noqa: E402

CONFIG_FILES = ["jupytext.toml", "notebooks/jupytext.toml", "pyproject.toml"]
NAME = "98_lab_save"
PY = """# ---
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

# %% [markdown]
# # 98 · Saved from Lab

# %%
x = 6 * 7
print(x)
"""


def repo_copy(tmp_path, config_files=CONFIG_FILES):
    """A repository skeleton: the real jupytext configuration files and one notebook pair."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    for rel in config_files:
        if (REPO_ROOT / rel).is_file():
            shutil.copy(REPO_ROOT / rel, root / rel)
    py = root / "notebooks" / f"{NAME}.py"
    py.write_text(PY)
    nbformat.write(jupytext.read(py, fmt="py:percent"), py.with_suffix(".ipynb"))
    return root, py


def contents_manager(root_dir):
    return jupytext.TextFileContentsManager(root_dir=str(root_dir))


def save_edit(cm, path: str) -> None:
    """What Lab does on Ctrl-S after the reader changed a cell: get the model, edit, save."""
    model = cm.get(path)
    nb = model["content"]
    code = [c for c in nb.cells if c.cell_type == "code"][0]
    code.source = code.source.replace("6 * 7", "6 * 9")
    cm.save({"type": "notebook", "content": nb}, path)


@pytest.mark.parametrize("rooted_at", ["repo", "notebooks"])
@pytest.mark.parametrize("opened", [".ipynb", ".py"])
def test_lab_save_reaches_the_py(tmp_path, rooted_at, opened):
    root, py = repo_copy(tmp_path)
    server_root = root if rooted_at == "repo" else root / "notebooks"
    rel = py.with_suffix(opened).relative_to(server_root).as_posix()
    save_edit(contents_manager(server_root), rel)
    assert "x = 6 * 9" in py.read_text(), f"{rel} saved from a server rooted at {rooted_at}/"
    saved = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
    assert any("6 * 9" in c.source for c in saved.cells)
    assert course.check(root / "notebooks") == []          # the pair still holds the same cells


def test_without_a_config_in_notebooks_a_lab_save_misses_the_py(tmp_path):
    """The failure a student met: only a repository-root configuration (naming notebooks/ in
    its formats), a server rooted at notebooks/: the .py keeps the old text, and the pair drifts."""
    root, py = repo_copy(tmp_path, config_files=[])
    (root / "jupytext.toml").write_text('formats = "notebooks///ipynb,notebooks///py:percent"\n')
    save_edit(contents_manager(root / "notebooks"), f"{NAME}.ipynb")
    assert "x = 6 * 7" in py.read_text()
    assert course.check(root / "notebooks") != []

"""The course's JupyterLab settings (scripts/jupyterlab_overrides.json, installed by `make lab` and
`make test-lab` as Lab's overrides) name settings that exist: each plugin's schema, as the
installed extension ships it, has each key, and the value is one the schema allows. A misspelt key
would be ignored by Lab without a word, and widgets would again be lost on reopening.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

OVERRIDES = REPO_ROOT / "scripts" / "jupyterlab_overrides.json"
SHARE = Path(sys.prefix) / "share" / "jupyter"


def schema_file(plugin_id: str) -> Path | None:
    """Where Lab reads a plugin's schema: a prebuilt extension's own folder, or Lab's core."""
    package, plugin = plugin_id.split(":")
    for base in (SHARE / "labextensions" / package / "schemas" / package, SHARE / "lab" / "schemas" / package):
        if (base / f"{plugin}.json").is_file():
            return base / f"{plugin}.json"
    return None


def test_widget_state_is_saved():
    assert json.loads(OVERRIDES.read_text())["@jupyter-widgets/jupyterlab-manager:plugin"] == {"saveState": True}


@pytest.mark.parametrize("plugin_id", sorted(json.loads(OVERRIDES.read_text())))
def test_each_setting_exists_in_its_schema(plugin_id):
    path = schema_file(plugin_id)
    if path is None:
        pytest.skip(f"{plugin_id}'s extension is not installed here (the lab extra installs it)")
    props = json.loads(path.read_text())["properties"]
    for key, value in json.loads(OVERRIDES.read_text())[plugin_id].items():
        assert key in props, f"{plugin_id} has no setting {key!r} ({path})"
        allowed = [c["const"] for c in props[key].get("oneOf", []) if "const" in c] + props[key].get("enum", [])
        if allowed:
            assert value in allowed, f"{plugin_id}.{key} = {value!r}, not one of {allowed}"
        else:
            want = {"boolean": bool, "string": str, "number": (int, float), "integer": int}[props[key]["type"]]
            assert isinstance(value, want), f"{plugin_id}.{key} = {value!r} is not a {props[key]['type']}"

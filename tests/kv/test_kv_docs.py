"""The KV-store protocol's docstring names only storages that exist.

kv/base.py once listed a "block float" storage "(later chapters)" that no module held; block floats
are a number format the galaxy-emulated backend rounds K/V rows to before a store writes them. This
test holds the docstring to the code: every storage row of its table names the class that
implements it, every dotted llamanb path in it resolves, and every class-like name in it is a class
defined somewhere in llamanb.
"""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import llamanb
from llamanb.engine.kv import base

PACKAGE = Path(llamanb.__file__).resolve().parent
DOC = base.__doc__
DOTTED = re.compile(r"\bllamanb(?:\.\w+)+")
CLASSLIKE = re.compile(r"\b(?=\w*[a-z])[A-Z][a-z0-9]*[A-Z]\w*\b")    # KVStore, PagedKVCache (not "KV")


def resolve(path: str):
    """The object a dotted llamanb path names (module, then attributes), or raise."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(path)


def classes_in_package() -> set[str]:
    names = set()
    for f in PACKAGE.rglob("*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    return names


def storage_rows(doc: str) -> list[str]:
    """The indented rows of the table that follows 'How positions are stored'."""
    lines = doc.split("How positions are stored", 1)[1].splitlines()[1:]
    rows = []
    for line in lines:
        if not line.strip():
            if rows:
                break
            continue
        rows.append(line)
    return rows


def test_every_dotted_path_in_the_docstring_resolves():
    paths = DOTTED.findall(DOC)
    assert paths, "the docstring names no llamanb path"
    for path in paths:
        resolve(path)


def test_every_storage_row_names_its_class():
    rows = storage_rows(DOC)
    assert len(rows) >= 2
    for row in rows:
        names = DOTTED.findall(row)
        assert names, f"a storage with no implementation named: {row.strip()!r}"
        cls = resolve(names[-1])
        assert isinstance(cls, type) and issubclass(cls, base.KVStore), row


def test_every_class_the_docstring_names_exists():
    defined = classes_in_package()
    named = set(CLASSLIKE.findall(DOC))
    assert named, "the docstring names no class"
    assert not named - defined, f"named but defined nowhere in llamanb: {sorted(named - defined)}"

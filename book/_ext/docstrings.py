"""llamanb's docstrings as the API reference shows them.

The package's docstrings are plain text, not reStructuredText: `name` in backticks, a|b, x_, 2 * n
and indented examples mean what they say, and docutils would read them as markup (warnings, which
fail the build). Each docstring is turned into reST that means the same text: prose paragraphs are
escaped (backticked spans become inline code) and reflow; paragraphs laid out by hand (indented,
lists, aligned columns) stay as they are, as literal blocks.
"""
from __future__ import annotations

import re

CODE = re.compile(r"`([^`]+)`")
SPECIAL = re.compile(r"([\\*`|_\[\]<>:])")
LAID_OUT = re.compile(r"^(\s|[-*+•] |\d+[.)] |[A-Za-z_][\w.]*\s*:\s*$)|\S {2,}\S")


def escape(text: str) -> str:
    """Plain text as reST inline text; `spans` become inline literals."""
    out, last = [], 0
    for m in CODE.finditer(text):
        out.append(SPECIAL.sub(r"\\\1", text[last:m.start()]))
        code = m.group(1).strip()
        if code and "``" not in code:
            # an inline literal must stand apart from the word around it: `Op`s -> ``Op``\ s
            before = "\\ " if m.start() and text[m.start() - 1].isalnum() else ""
            after = "\\ " if m.end() < len(text) and text[m.end()].isalnum() else ""
            out.append(f"{before}``{code}``{after}")
        else:
            out.append(SPECIAL.sub(r"\\\1", m.group(0)))
        last = m.end()
    out.append(SPECIAL.sub(r"\\\1", text[last:]))
    s = "".join(out)
    # what reST would read at the start of a paragraph: a list, a numbered item, a heading, a comment
    return re.sub(r"^([-+#=.~^'\"]|\d+(?=[.)]))", r"\\\1", s)


def paragraphs(lines: list[str]) -> list[list[str]]:
    paras, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            paras.append(cur)
            cur = []
    if cur:
        paras.append(cur)
    return paras


def to_rst(lines: list[str]) -> list[str]:
    out: list[str] = []
    for para in paragraphs(lines):
        laid_out = any(LAID_OUT.search(line) for line in para[1:]) or para[0].startswith((" ", "\t")) \
            or bool(re.search(r"\S {2,}\S", para[0]))
        if laid_out:
            out += ["::", ""] + ["    " + line for line in para] + [""]
        else:
            out += [escape(" ".join(line.strip() for line in para)), ""]
    return out


def process_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = to_rst(lines)


def setup(app):
    app.connect("autodoc-process-docstring", process_docstring)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

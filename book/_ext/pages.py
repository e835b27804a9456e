"""The book's Sphinx extension: pages generated from the course map, the chapters as a reader of a
static page needs them, and MathJax served by the site itself.

- config-inited: copies the chapters (notebooks/*.ipynb and their .py) and docs/**/*.md into the
  source folder (book/notebooks, book/docs: git-ignored; a copy, not a link, so that relative links
  resolve inside the book), then writes parts/<key>.md (one page per part: its chapters' table and toctree) and
  api/index.md (the API reference's root) from the course map, each only when its text changed.
- `{course-map}` directive (the landing page): the map as tables linked to the chapters, and the
  parts' toctree.
- source-read of a chapter (.ipynb JSON): a note after its title cell (its .py source, how to run
  it), each ipywidgets view replaced by one line saying the widget needs a running kernel (its
  static figure is beside it in the chapter), and a build error for any stored error output.
- source-read of a docs/ page: links to the README point at the landing page (which holds the
  README's map and run instructions; the README itself is not a page of the book).
- build-finished: MathJax 2 (Debian's libjs-mathjax) copied into _static/mathjax, only the files
  its TeX-AMS_CHTML configuration loads.
"""
from __future__ import annotations

import ast
import json
import pkgutil
import re
import shutil
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

import coursemap

logger = logging.getLogger(__name__)
WIDGET = "application/vnd.jupyter.widget-view+json"
WIDGET_LINE = ("*Interactive widget: it needs a running Python kernel, which a static page does not "
               "have. Run this chapter with `make lab` to use it; the static figure beside it in "
               "the chapter shows the same data.*")
# What MathJax 2's TeX-AMS_CHTML configuration loads from its root: the combined configuration,
# the TeX input and CommonHTML output jax, the element jax, the extensions it loads on demand
# (menus, \require'd TeX packages) and CommonHTML's web fonts.
MATHJAX_FILES = ("MathJax.js", "config/TeX-AMS_CHTML.js", "jax/input/TeX", "jax/output/CommonHTML",
                 "jax/element", "extensions", "fonts/HTML-CSS/TeX/woff")


def sync_copies(src: Path, dest: Path, patterns: tuple[str, ...], keep=lambda p: True) -> None:
    """dest mirrors the files of src matching patterns: changed ones copied, stale ones removed
    (unchanged files keep their mtime, so an incremental build re-reads only what changed)."""
    wanted = {p.relative_to(src) for pat in patterns for p in src.glob(pat) if p.is_file() and keep(p)}
    for rel in sorted(wanted):
        s, d = src / rel, dest / rel
        if not d.exists() or d.read_bytes() != s.read_bytes():
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(s, d)
    if dest.exists():
        for d in sorted(dest.rglob("*"), reverse=True):
            if d.is_file() and d.relative_to(dest) not in wanted:
                d.unlink()
            elif d.is_dir() and not any(d.iterdir()):
                d.rmdir()


def copy_sources(app) -> None:
    src, repo = Path(app.srcdir), Path(app.config.book_repo)
    sync_copies(repo / "notebooks", src / "notebooks", ("*.ipynb", "*.py"),
                keep=lambda p: p.with_suffix(".ipynb").exists())     # a chapter's pair, not conftest.py
    sync_copies(repo / "docs", src / "docs", ("**/*.md",))


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


_MAP: list[coursemap.Part] = []


def _course_map(app) -> list[coursemap.Part]:
    if not _MAP:
        parts, where = coursemap.course_map(Path(app.config.book_repo))
        logger.info(f"course map: {len(parts)} parts, read from {where}")
        _MAP.extend(parts)
    return _MAP


def included_parts(app) -> list[coursemap.Part]:
    """The map's parts restricted to the chapters this build includes (book_chapters; all when empty)."""
    keep = set(app.config.book_chapters)
    out = []
    for part in _course_map(app):
        entries = tuple(e for e in part.entries if not keep or e.stem in keep)
        if entries:
            out.append(coursemap.Part(part.key, part.title, entries))
    return out


def _table(entries, link_prefix: str) -> list[str]:
    rows = ["| chapter | what you build |", "|---|---|"]
    for e in entries:
        number = e.stem.split("_")[0]
        label = f"{number} · {e.title}" if number != "A" else f"Appendix A · {e.title}"
        rows.append(f"| [{label}]({link_prefix}notebooks/{e.stem}.ipynb) | {e.builds} |")
    return rows


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring, read from its source (nothing imported)."""
    doc = (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").strip()
    first = " ".join(doc.split("\n\n")[0].split())         # its first paragraph, on one line
    m = re.match(r"(.+?\.)(\s|$)", first)                     # up to its first full stop
    return (m.group(1) if m else first).replace("|", "\\|")


def _rooms(repo: Path, module: str) -> str:
    """A table of a package's modules and subpackages (the package's rooms), each linked to its page."""
    path = repo.joinpath(*module.split("."))
    if not path.is_dir():
        return ""
    rows = [f"**[{module}](generated/{module}.rst)**: {_summary(path / '__init__.py')}", "",
            "| module | what it holds |", "|---|---|"]
    for info in sorted(pkgutil.iter_modules([str(path)]), key=lambda i: (not i.ispkg, i.name)):
        if info.name.startswith("_"):
            continue
        name = f"{module}.{info.name}"
        file = path / info.name / "__init__.py" if info.ispkg else path / f"{info.name}.py"
        rows.append(f"| [{name}](generated/{name}.rst) | {_summary(file)} |")
    return "\n".join(rows) + "\n"


def write_generated_pages(app) -> None:
    src, repo = Path(app.srcdir), Path(app.config.book_repo)
    parts = included_parts(app)
    for stale in (src / "parts").glob("*.md"):        # a part this build does not have (a subset's)
        if stale.stem not in {p.key for p in parts}:
            stale.unlink()
    for part in parts:
        lines = [f"# {part.title}", ""]
        lines += _table(part.entries, "../")
        lines += ["", "```{toctree}", ":hidden:", ""]
        lines += [f"../notebooks/{e.stem}" for e in part.entries]
        lines += ["```", ""]
        _write_if_changed(src / "parts" / f"{part.key}.md", "\n".join(lines))
    api_modules = list(app.config.book_api_modules)
    generated = src / "api" / "generated"
    if generated.exists():      # stubs of modules this build does not document (a subset's, or gone)
        for stub in generated.glob("*.rst"):
            if not any(stub.stem == m or stub.stem.startswith(m + ".") for m in api_modules):
                stub.unlink()
    modules = "\n".join(f"   {m}" for m in api_modules)
    rooms = "\n".join(_rooms(repo, m) for m in api_modules)
    _write_if_changed(src / "api" / "index.md", f"""# API reference

The `llamanb` package, generated from its docstrings: each module's page lists what it defines.
The package imports without its optional dependencies; the CUDA kernels (numba) and the TCL kernels
(Furiosa's compiler) are documented with those two imported as stand-ins.

{rooms}

```{{eval-rst}}
.. autosummary::
   :toctree: generated
   :recursive:

{modules}
```
""")


class CourseMap(SphinxDirective):
    """The course map on the landing page: one table per part, and the parts' toctree."""

    def run(self):
        parts = included_parts(self.env.app)
        lines = []
        for part in parts:
            lines += [f"**[{part.title}](parts/{part.key}.md)**", ""]
            lines += _table(part.entries, "")
            lines += [""]
        lines += ["```{toctree}", ":hidden:", ":caption: The course", ""]
        lines += [f"parts/{p.key}" for p in parts]
        lines += ["```"]
        container = nodes.container(classes=["course-map"])
        self.state.nested_parse(StringList(lines, source="course-map"), self.content_offset, container)
        return [container]


def chapter_note(stem: str) -> str:
    return f"""```{{admonition}} Run this chapter
:class: tip
This page is the chapter as committed, executed: every output below is the one stored in
`notebooks/{stem}.ipynb` and checked by the test suite, not re-run for this site.
Source: {{download}}`notebooks/{stem}.py <{stem}.py>` (the jupytext pair you edit).
To run it yourself, in a clone of the repository: `make lab` installs JupyterLab and opens the
chapters with a Python kernel (widgets included); `make notebooks NB=notebooks/{stem}.py`
re-executes it from the `.py`.
```"""


def _source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def rewrite_chapter(docname: str, nb: dict) -> dict:
    stem = docname.rsplit("/", 1)[-1]
    cells = nb["cells"]
    if not cells or cells[0]["cell_type"] != "markdown" or not _source(cells[0]).lstrip().startswith("# "):
        logger.warning(f"{docname}: the first cell is not the chapter's '# NN · Title' heading",
                       location=docname)
    for cell in cells:
        outputs = cell.get("outputs", [])
        for i, out in enumerate(outputs):
            if out.get("output_type") == "error":
                logger.warning(f"{docname}: a stored error output ({out.get('ename')}): the book shows "
                               "no tracebacks; re-execute the chapter", location=docname)
            if WIDGET in out.get("data", {}):
                outputs[i] = {"output_type": "display_data", "metadata": {},
                              "data": {"text/markdown": WIDGET_LINE}}
    note = {"cell_type": "markdown", "id": "llamanb-book-run-this-chapter", "metadata": {},
            "source": chapter_note(stem)}
    cells.insert(1, note)
    return nb


README_LINK = re.compile(r"\]\(((?:\.\./)+)README\.md")


def on_source_read(app, docname: str, source: list[str]) -> None:
    path = app.env.doc2path(docname)
    if str(path).endswith(".ipynb"):
        source[0] = json.dumps(rewrite_chapter(docname, json.loads(source[0])), ensure_ascii=False)
    elif docname.startswith("docs/"):
        source[0] = README_LINK.sub(r"](\1index.md", source[0])


def copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    root = Path(app.config.book_mathjax_dir)
    dest = Path(app.outdir) / "_static" / "mathjax"
    for rel in MATHJAX_FILES:
        s, d = root / rel, dest / rel
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        else:
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)


def check_mathjax(app) -> None:
    root = Path(app.config.book_mathjax_dir)
    missing = [rel for rel in MATHJAX_FILES if not (root / rel).exists()]
    if missing:
        from sphinx.errors import ConfigError
        raise ConfigError(f"MathJax 2 not found in {root} (missing {', '.join(missing)}): install "
                          "Debian's libjs-mathjax (`make book` does) or set LLAMANB_MATHJAX_DIR")


def setup(app):
    app.add_config_value("book_repo", str(coursemap.ROOT), "env")
    app.add_config_value("book_chapters", [], "env")
    app.add_config_value("book_api_modules", ["llamanb"], "env")
    app.add_config_value("book_mathjax_dir", "/usr/share/javascript/mathjax", "html")
    app.connect("builder-inited", check_mathjax)
    # at config-inited: the environment lists the source files before builder-inited, where
    # autosummary reads api/index.md
    app.connect("config-inited", lambda app, config: (copy_sources(app), write_generated_pages(app)))
    app.connect("source-read", on_source_read)
    app.connect("build-finished", copy_mathjax)
    app.add_directive("course-map", CourseMap)
    # docs/architecture.md draws its data flow as a mermaid diagram: shown as its source text (the
    # mermaid renderer is JavaScript from a CDN, which the book does not load)
    from pygments.lexers.special import TextLexer
    app.add_lexer("mermaid", TextLexer)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

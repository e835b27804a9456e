"""The course map: every chapter's tag, read from the chapter itself, rendered wherever the map is shown.

Each chapter carries one tag, in its jupytext header (the top of notebooks/NN_name.py):

    #   llamanb:
    #     builds: the FLOPs of a prefill and a decode step, against torch's counter
    #     modules:
    #     - llamanb.model.flops
    #     part: I

`part` places the chapter in the map (I, II, III, or A for the appendix), `builds` says what the
reader builds in it, `modules` where that code lands in the package (in d2l's spirit, where
`#@save` marks the code a chapter hands to the library). The title is the chapter's own heading,
the first `# NN · Title` of its first cell, so nothing is written twice. Chapter 00, the capstone's
"course in one page" and the README's course-map block are all rendered from these tags:

    python -m llamanb.course map                  the map as text (what the chapters print)
    python -m llamanb.course map --markdown       the map as the README's block
    python -m llamanb.course map --write-readme   rewrite README.md between its course-map markers
    python -m llamanb.course map --check-readme   exit 1 when that block is stale

The tag is plain YAML in the header (jupytext keeps it: `notebook_metadata_filter: llamanb`), so a
chapter saved from JupyterLab keeps it too.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from llamanb.errors import LlamanbError

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
README = NOTEBOOK_DIR.parent / "README.md"
NAME = re.compile(r"^(\d\d[a-z]?|A)_[a-z0-9_]+$")        # NN_name, NNb_name, or A_name (the appendix)
PARTS = {
    "I": "Part I — the model and its engine on your CPU",
    "II": "Part II — the accelerators",
    "III": "Part III — serving and the capstone",
    "A": "Appendix",
}
FIELDS = ("builds", "modules", "part")
WIDTH = 120                                             # JupyterLab's column of text output
START, END = "<!-- course-map:start -->", "<!-- course-map:end -->"
# the heading of a chapter's first cell: "# 01b · FLOPs of a prefill", "# Appendix A · three ..."
HEADING = re.compile(r"^# # (?:\d\d[a-z]?|Appendix A) · (.+)$")


@dataclass(frozen=True)
class Chapter:
    stem: str                       # 01b_prefill_flops
    number: str                     # 01b (A for the appendix)
    part: str                       # I, II, III or A
    title: str                      # from the chapter's heading
    builds: str
    modules: tuple[str, ...]


def _yaml():
    try:
        import yaml
    except ImportError:
        raise LlamanbError("PyYAML is not installed (it comes with jupytext): run `make test` once "
                           "or `pip install -e '.[notebooks]'`") from None
    return yaml


def read_chapter(py: Path) -> Chapter:
    """The tag and title of one chapter's .py; a LlamanbError naming the file if either is missing."""
    py = Path(py)
    lines = py.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != "# ---" or "# ---" not in lines[1:]:
        raise LlamanbError(f"{py.name}: no jupytext header (a first line '# ---')")
    end = lines.index("# ---", 1)
    header = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in lines[1:end])
    try:
        meta = (_yaml().safe_load(header) or {}).get("jupyter", {})
    except Exception as e:
        raise LlamanbError(f"{py.name}: its jupytext header is not YAML ({e})") from None
    tag = meta.get("llamanb")
    if not isinstance(tag, dict):
        raise LlamanbError(f"{py.name}: no course-map tag (an `llamanb:` entry with {', '.join(FIELDS)} "
                           "in its jupytext header)")
    missing = [f for f in FIELDS if not tag.get(f)]
    if missing:
        raise LlamanbError(f"{py.name}: its course-map tag lacks {', '.join(missing)}")
    if tag["part"] not in PARTS:
        raise LlamanbError(f"{py.name}: part {tag['part']!r} is not one of {', '.join(PARTS)}")
    modules = tag["modules"]
    if not (isinstance(modules, list) and all(isinstance(m, str) and (m == "llamanb" or m.startswith("llamanb."))
                                              for m in modules)):
        raise LlamanbError(f"{py.name}: modules must be a list of llamanb modules, not {modules!r}")
    title = next((m.group(1) for m in map(HEADING.match, lines[end + 1:]) if m), None)
    if title is None:
        raise LlamanbError(f"{py.name}: no heading '# NN · Title' in its first cell")
    return Chapter(py.stem, py.stem.split("_")[0], tag["part"], title[:1].upper() + title[1:],
                   str(tag["builds"]), tuple(modules))


def chapters(directory: Path = NOTEBOOK_DIR) -> list[Chapter]:
    """Every chapter in `directory`, in the order of their names (the reading order)."""
    found = [read_chapter(p) for p in sorted(Path(directory).glob("*.py")) if NAME.match(p.stem)]
    if not found:
        raise LlamanbError(f"no chapters (NN_name.py) in {directory}")
    return found


def by_part(chs: list[Chapter]) -> list[tuple[str, list[Chapter]]]:
    """(part heading, its chapters in reading order) for every part that has chapters."""
    return [(PARTS[p], [c for c in chs if c.part == p]) for p in PARTS if any(c.part == p for c in chs)]


def landed_in(chs: list[Chapter]) -> dict[str, list[str]]:
    """module -> the chapters whose code lands there (the map read the other way round)."""
    out: dict[str, list[str]] = {}
    for c in chs:
        for m in c.modules:
            out.setdefault(m, []).append(c.number)
    return dict(sorted(out.items()))


def text(chs: list[Chapter] | None = None) -> str:
    """The map as the chapters print it: per part, each chapter's number and title, then what it
    builds and where that lands, wrapped to WIDTH columns."""
    chs = chapters() if chs is None else chs
    out = []
    for heading, members in by_part(chs):
        out.append(heading)
        for c in members:
            out.append(textwrap.fill(f"  {c.number:<4} {c.title}", WIDTH, subsequent_indent=" " * 7))
            for label, value in (("builds:  ", c.builds), ("lands in:", ", ".join(c.modules))):
                out.append(textwrap.fill(f"       {label} {value}", WIDTH, subsequent_indent=" " * 17,
                                         break_on_hyphens=False))
    return "\n".join(out)


def markdown(chs: list[Chapter] | None = None) -> str:
    """The map as the README shows it: one table per part, each chapter linked."""
    chs = chapters() if chs is None else chs
    out = []
    for heading, members in by_part(chs):
        out += [f"### {heading}", "", "| chapter | title | what you build | lands in |", "|---|---|---|---|"]
        for c in members:
            mods = ", ".join(f"`{m}`" for m in c.modules)
            out.append(f"| [{c.number}](notebooks/{c.stem}.ipynb) | {c.title} | {c.builds} | {mods} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def readme_block(readme_text: str) -> tuple[int, int]:
    """(start, end): the character span between the course-map markers of the README's text."""
    i, j = readme_text.find(START), readme_text.find(END)
    if i < 0 or j < 0:
        raise LlamanbError(f"README has no course-map block (lines '{START}' and '{END}')")
    if j < i or readme_text.count(START) != 1 or readme_text.count(END) != 1:
        raise LlamanbError("README's course-map markers must appear once each, start before end")
    return i + len(START), j


def with_map(readme_text: str, chs: list[Chapter] | None = None) -> str:
    """The README's text with its course-map block replaced by the map rendered from the tags."""
    i, j = readme_block(readme_text)
    return readme_text[:i] + "\n" + markdown(chs) + readme_text[j:]


def write_readme(readme: Path = README, chs: list[Chapter] | None = None) -> bool:
    """Rewrite README's course-map block (atomically); True when it changed."""
    readme = Path(readme)
    try:
        old = readme.read_text(encoding="utf-8")
    except OSError as e:
        raise LlamanbError(f"cannot read {readme}: {e.strerror}") from None
    new = with_map(old, chs)
    if new == old:
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{readme.name}.", dir=readme.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new)
        os.chmod(tmp, readme.stat().st_mode & 0o777)
        os.replace(tmp, readme)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


USAGE = "usage: python -m llamanb.course map [--markdown | --write-readme | --check-readme] [--readme PATH]"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        readme = README
        if "--readme" in argv:
            k = argv.index("--readme")
            if k + 1 >= len(argv):
                raise LlamanbError("--readme needs a path")
            readme = Path(argv[k + 1])
            del argv[k:k + 2]
        if len(argv) > 1 or (argv and argv[0] not in ("--markdown", "--write-readme", "--check-readme")):
            raise LlamanbError(f"unexpected arguments {' '.join(argv)!r}; {USAGE}")
        mode = argv[0] if argv else "--text"
        if mode == "--text":
            print(text())
        elif mode == "--markdown":
            print(markdown(), end="")
        elif mode == "--write-readme":
            changed = write_readme(readme)
            print(f"{readme}: course map {'rewritten' if changed else 'already current'}")
        else:
            try:
                current = readme.read_text(encoding="utf-8")
            except OSError as e:
                raise LlamanbError(f"cannot read {readme}: {e.strerror}") from None
            if with_map(current) != current:
                print(f"{readme}: the course map is stale; run `python -m llamanb.course map "
                      "--write-readme`", file=sys.stderr)
                return 1
            print(f"{readme}: the course map is current")
        return 0
    except LlamanbError as e:
        print(f"llamanb.course map: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

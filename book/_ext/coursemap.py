"""The course map as the book reads it: the parts, in order, each with its chapters in reading order.

One source: the chapters' own course-map tags through `llamanb.course.chapters` where the package
has it; until then the README's block between `<!-- course-map:start -->` and
`<!-- course-map:end -->`, which renders the same map (`### Part ...` headings, one table each).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START, END = "<!-- course-map:start -->", "<!-- course-map:end -->"
STEM = re.compile(r"(\d\d[a-z]?|A)_[a-z0-9_]+")


class MapError(Exception):
    """The course map could not be read (the message says where)."""


@dataclass(frozen=True)
class Entry:
    stem: str       # 04_kv_cache_growth
    title: str      # The KV cache: how it grows and what it costs
    builds: str     # what the reader builds in it


@dataclass(frozen=True)
class Part:
    key: str        # I, II, III, A: the part's page is parts/<key>
    title: str      # Part I — the model and its engine on your CPU
    entries: tuple[Entry, ...]


def _key(title: str, n: int) -> str:
    m = re.match(r"Part ([IVX]+)\b", title)
    return m.group(1) if m else ("A" if title.lower().startswith("appendix") else str(n))


def from_tags(root: Path = ROOT) -> list[Part] | None:
    """The map from the chapters' tags, or None where this llamanb has no llamanb.course.chapters."""
    try:
        from llamanb.course import chapters as ch
    except ImportError:
        return None
    parts = ch.by_part(ch.chapters(root / "notebooks"))
    return [Part(_key(title, n), title, tuple(Entry(c.stem, c.title, c.builds) for c in members))
            for n, (title, members) in enumerate(parts, 1)]


def from_readme(readme: Path = ROOT / "README.md") -> list[Part]:
    """The map from the README's course-map block: each `### ` heading a part, each table row a
    chapter whose first cell names its notebook (`04_kv_cache_growth`, bare or linked)."""
    text = readme.read_text(encoding="utf-8")
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise MapError(f"{readme}: no single block between {START} and {END}")
    block = text[text.index(START) + len(START):text.index(END)]
    parts: list[tuple[str, list[Entry]]] = []
    for line in block.splitlines():
        if line.startswith("### "):
            parts.append((line[4:].strip(), []))
        elif line.startswith("|") and not set(line) <= set("|-: "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            m = STEM.search(cells[0])
            if not m or cells[0].lower() == "chapter":
                continue
            if not parts:
                raise MapError(f"{readme}: a chapter row before any '### Part' heading: {line}")
            title = cells[1] if len(cells) > 1 else m.group(0)
            builds = cells[2] if len(cells) > 2 else ""
            parts[-1][1].append(Entry(m.group(0), title, builds))
    if not parts or not all(entries for _, entries in parts):
        raise MapError(f"{readme}: the course-map block has a part with no chapters, or no parts")
    return [Part(_key(title, n), title, tuple(entries)) for n, (title, entries) in enumerate(parts, 1)]


def course_map(root: Path = ROOT) -> tuple[list[Part], str]:
    """(the parts, where they were read from) for the checkout at root."""
    parts = from_tags(root)
    if parts is not None:
        return parts, "the chapters' course-map tags (llamanb.course.chapters)"
    return from_readme(root / "README.md"), "the README's course-map block"

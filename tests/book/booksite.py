"""The course's book (book/, `make book`): building it and the checks its HTML must pass without a
browser. Used by test_book_subset.py (in `make test`) and check_book.py (`make test-book`)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BOOK = REPO / "book"
# book/'s committed files; the rest of book/ is made by a build (copies, generated pages, _build)
GENERATED = {"_build", "notebooks", "docs", "parts", "api"}
WIDGET_LINE = "Interactive widget: it needs a running Python kernel"


def book_source(dest: Path) -> Path:
    """A copy of book/'s committed files at dest/book, so a test builds in a folder of its own."""
    src = dest / "book"
    shutil.copytree(BOOK, src, ignore=lambda d, names: [n for n in names
                                                          if Path(d) == BOOK and n in GENERATED])
    return src


def start_build(srcdir: Path, outdir: Path, chapters: list[str] | None = None,
                api: list[str] | None = None) -> subprocess.Popen:
    """sphinx-build as `make book` runs it (warnings are errors), from srcdir, for this checkout;
    chapters and api restrict it to a subset. Its output is in the returned process's stdout."""
    env = dict(os.environ, LLAMANB_BOOK_REPO=str(REPO), PYTHONPATH=str(REPO), SOURCE_DATE_EPOCH="0")
    env.pop("LLAMANB_BOOK_CHAPTERS", None)
    env.pop("LLAMANB_BOOK_API", None)
    if chapters:
        env["LLAMANB_BOOK_CHAPTERS"] = ",".join(chapters)
    if api:
        env["LLAMANB_BOOK_API"] = ",".join(api)
    return subprocess.Popen([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
                             "-d", str(outdir.parent / (outdir.name + ".doctrees")), str(srcdir), str(outdir)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def build(srcdir: Path, outdir: Path, chapters: list[str] | None = None, api: list[str] | None = None,
          timeout: float = 1800) -> tuple[int, str]:
    """(exit status, output) of a build, waited for."""
    proc = start_build(srcdir, outdir, chapters, api)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out


class _Resources(HTMLParser):
    """What a page loads (script src, stylesheet/icon/preload links, images, iframes) and its text."""

    def __init__(self):
        super().__init__()
        self.loads: list[str] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "video", "audio", "embed") and a.get("src"):
            self.loads.append(a["src"])
        if tag == "link" and a.get("href") and set((a.get("rel") or "").split()) & {
                "stylesheet", "preload", "icon", "prefetch", "modulepreload", "manifest"}:
            self.loads.append(a["href"])
        if tag == "object" and a.get("data"):
            self.loads.append(a["data"])
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


EXTERNAL = re.compile(r"^(https?:)?//", re.I)
CSS_URL = re.compile(r"url\(\s*['\"]?((?:https?:)?//[^)'\"]+)", re.I)
CSS_IMPORT = re.compile(r"@import\s+(?:url\()?\s*['\"]((?:https?:)?//[^'\"]+)", re.I)


def html_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


def static_problems(site: Path) -> list[str]:
    """Every page's external loads (scripts, styles, fonts, images from the network), raw ANSI
    escapes, tracebacks, and stylesheets that fetch from the network."""
    problems = []
    for page in html_pages(site):
        rel = page.relative_to(site)
        html = page.read_text(encoding="utf-8")
        parser = _Resources()
        parser.feed(html)
        for url in parser.loads:
            if EXTERNAL.match(url):
                problems.append(f"{rel}: loads {url} from the network")
        text = "".join(parser.text)
        if "\x1b" in html or "&#27;" in html or re.search(r"\[[0-9;]{1,12}m\S", text):
            problems.append(f"{rel}: a raw ANSI escape in its text")
        if "Traceback (most recent call last)" in text or 'class="output traceback' in html:
            problems.append(f"{rel}: shows a traceback")
        for url in CSS_URL.findall(html) + CSS_IMPORT.findall(html):
            problems.append(f"{rel}: inline style loads {url} from the network")
    for css in sorted(site.rglob("*.css")):
        text = css.read_text(encoding="utf-8", errors="replace")
        for url in CSS_URL.findall(text) + CSS_IMPORT.findall(text):
            problems.append(f"{css.relative_to(site)}: loads {url} from the network")
    return problems


def chapter_problems(site: Path, stem: str) -> list[str]:
    """A chapter page: its note with the .py source (downloadable, the repository's own file) and
    `make lab`; each stored widget shown as one line, none left as a widget view."""
    page = site / "notebooks" / f"{stem}.html"
    if not page.exists():
        return [f"no page for chapter {stem}"]
    html = page.read_text(encoding="utf-8")
    problems = []
    m = re.search(r'href="(\.\./_downloads/[0-9a-f]+/' + re.escape(stem) + r'\.py)"', html)
    if not m:
        problems.append(f"{stem}: no link to notebooks/{stem}.py")
    elif (site / "notebooks" / m.group(1)).resolve().read_bytes() != (REPO / "notebooks" / f"{stem}.py").read_bytes():
        problems.append(f"{stem}: its .py link does not hold notebooks/{stem}.py")
    if not re.search(r"make\s+lab", page_text(page)):
        problems.append(f"{stem}: does not say how to run it (make lab)")
    import json
    nb = json.loads((REPO / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    widgets = sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                  for c in nb["cells"] for o in c.get("outputs", []))
    if html.count(WIDGET_LINE) != widgets:
        problems.append(f"{stem}: {widgets} widgets stored, {html.count(WIDGET_LINE)} widget lines shown")
    if "widget-view+json" in html or "jupyter-widgets" in html:
        problems.append(f"{stem}: a widget view left in the page")
    images = sum(any(k.startswith("image/") for k in o.get("data", {}))
                 for c in nb["cells"] for o in c.get("outputs", []))
    shown = len(re.findall(r'<img [^>]*src="\.\./_images/', html))
    if shown < images:
        problems.append(f"{stem}: {images} figures stored, {shown} shown")
    return problems


def page_text(page: Path) -> str:
    parser = _Resources()
    parser.feed(page.read_text(encoding="utf-8"))
    return "".join(parser.text)


def solution_lines(stem: str) -> list[str]:
    """The code lines of solutions/<stem>.py that its chapter does not hold: what the book must not show."""
    sol = REPO / "solutions" / f"{stem}.py"
    if not sol.exists():
        return []
    # what the chapter itself holds (its .py, and its .ipynb's outputs: a chapter may print the
    # package's finished code, which a solution can repeat) is not a solution
    chapter = (REPO / "notebooks" / f"{stem}.py").read_text(encoding="utf-8")
    import json
    nb = json.loads((REPO / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    chapter += "\n".join("".join(o.get("text", "")) + "".join(
        "".join(v) if isinstance(v, list) else str(v) for v in o.get("data", {}).values())
        for c in nb["cells"] for o in c.get("outputs", []))
    out = []
    for line in sol.read_text(encoding="utf-8").splitlines():
        code = line.split("#")[0].strip()
        if len(code) >= 25 and not code.startswith(("def ", "import ", "from ", '"""', "return None")) \
                and code not in chapter:
            out.append(code)
    return out


def shown_solutions(site: Path, stems: list[str]) -> list[str]:
    """Solution lines found in any page's text (code is compared with whitespace collapsed)."""
    squash = lambda s: re.sub(r"\s+", "", s)
    texts = {p.relative_to(site): squash(page_text(p)) for p in html_pages(site)}
    found = []
    for stem in stems:
        for code in solution_lines(stem):
            for rel, text in texts.items():
                if squash(code) in text:
                    found.append(f"{rel}: shows the solution line {code!r} (solutions/{stem}.py)")
    if any("solutions" in p.parts for p in site.rglob("*")):
        found.append("the site holds a solutions/ file")
    return found

"""The whole book in a real browser (`make test-book`): two clean builds of book/ give the same HTML,
then every page in Debian's chromium (playwright's Python API, no browser download), served from a
local HTTP server on 127.0.0.1:

- loads with no console error, no page error, no failed request and no request off this server;
- every image on it loads (naturalWidth > 0);
- every internal link resolves: the file exists and its #fragment is an id on that page;
- math is typeset (MathJax's CommonHTML output for every math element, no MathJax error) and no
  raw $...$ is left in the text;
- fits a 1280-px window: no horizontal scroll;
- search finds a chapter for a word that only that chapter's page contains;
- the landing page opened as a file (file://, as a reader of a clone would) shows the map and math.

Screenshots of the landing page, a math chapter, a figure chapter and the API reference go to
$BOOK_SHOTS (default /tmp/llamanb-book-shots). Prints the build times and the page count.
Usage: python tests/book/check_book.py [--one-build]   (--one-build: skip the determinism build)
"""
from __future__ import annotations

import filecmp
import functools
import http.server
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import booksite  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("BOOK_SHOTS", "/tmp/llamanb-book-shots"))
WIDTH, HEIGHT = 1280, 900
SHOT_PAGES = {"landing": "index.html", "math-02": "notebooks/02_rope_einsum_tables.html",
              "figures-04": "notebooks/04_kv_cache_growth.html", "api": "api/index.html",
              "api-module": "api/generated/llamanb.engine.engine.html"}

PAGE_JS = """async () => {
  const imgs = [...document.images];
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.complete ? null : i.decode().catch(() => null)));
  if (window.MathJax && MathJax.Hub) {
    await new Promise(res => MathJax.Hub.Queue(res));
  }
  const skip = el => el.closest('pre, code, script, style, .math, .MathJax_Preview, .highlight, .cell_output, .mjx-chtml, textarea');
  const walker = document.createTreeWalker(document.querySelector('main') || document.body, NodeFilter.SHOW_TEXT);
  const raw = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!skip(n.parentElement) && /(^|[^\\w$])\\$[^\\s$](?:[^$\\n]{0,200}?[^\\s$])?\\$(?![\\w$])/.test(n.textContent)) raw.push(n.textContent.trim().slice(0, 80));
  }
  const maths = [...document.querySelectorAll('.math')];
  return {
    images: imgs.map(i => ({src: i.currentSrc || i.src, w: i.naturalWidth, ok: i.complete})),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id).concat([...document.querySelectorAll('a[name]')].map(a => a.name)),
    math: maths.length,
    typeset: maths.filter(m => m.querySelector('.mjx-chtml, .MathJax_CHTML')).length,
    matherrors: document.querySelectorAll('.mjx-merror, .MathJax_Error').length,
    raw,
    scroll: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth),
    inner: window.innerWidth,
  };
}"""


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(root))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/"


def compare(a: Path, b: Path) -> list[str]:
    """Files that differ between two builds (HTML, JS, images: the site; .buildinfo aside)."""
    out = []
    for p in sorted(a.rglob("*")):
        rel = p.relative_to(a)
        if p.is_dir() or rel.name == ".buildinfo":
            continue
        q = b / rel
        if not q.exists():
            out.append(f"{rel}: only in the first build")
        elif not filecmp.cmp(p, q, shallow=False):
            out.append(f"{rel}: differs between two builds")
    out += [f"{q.relative_to(b)}: only in the second build" for q in sorted(b.rglob("*"))
            if q.is_file() and not (a / q.relative_to(b)).exists()]
    return out


def unique_words(site: Path, pages: list[Path]) -> dict[str, str]:
    """chapter page -> a word (7+ letters) its text holds and no other page's text does, nor any
    word that starts with its first six letters (the search stems what it looks up)."""
    texts = {p: booksite.page_text(p).lower() for p in booksite.html_pages(site)}
    words = {p: set(re.findall(r"\b[a-z]{7,}\b", t)) for p, t in texts.items()}
    prefixes = {p: {w[:6] for w in re.findall(r"\b[a-z]{6,}", t)} for p, t in texts.items()}
    found = {}
    for page in pages:
        others = set().union(*(x for p, x in prefixes.items() if p != page))
        only = sorted(w for w in words[page] if w[:6] not in others)
        if only:
            found[str(page.relative_to(site))] = only[0]
    return found


def check_pages(browser, base: str, site: Path) -> tuple[list[str], int]:
    problems: list[str] = []
    pages = booksite.html_pages(site)
    ctx = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    ids: dict[str, set[str]] = {}
    links: dict[str, list[str]] = {}
    for page_path in pages:
        rel = page_path.relative_to(site).as_posix()
        page = ctx.new_page()
        errs: list[str] = []
        page.on("console", lambda m, errs=errs: errs.append(f"console {m.type}: {m.text[:160]}")
                if m.type == "error" else None)
        page.on("pageerror", lambda e, errs=errs: errs.append(f"page error: {str(e)[:160]}"))
        page.on("requestfailed", lambda r, errs=errs: errs.append(f"request failed: {r.url} {r.failure}"))
        page.on("response", lambda r, errs=errs: errs.append(f"HTTP {r.status}: {r.url}")
                if r.status >= 400 else None)
        page.on("request", lambda r, errs=errs: errs.append(f"off-site request: {r.url}")
                if not r.url.startswith((base, "data:", "blob:", "about:")) else None)
        page.goto(base + rel, wait_until="load")
        info = page.evaluate(PAGE_JS)
        page.wait_for_timeout(50)
        problems += [f"{rel}: {e}" for e in errs]
        problems += [f"{rel}: image did not load: {i['src']}" for i in info["images"] if not (i["ok"] and i["w"] > 0)]
        if info["typeset"] != info["math"] or info["matherrors"]:
            problems.append(f"{rel}: {info['typeset']} of {info['math']} math elements typeset, "
                            f"{info['matherrors']} MathJax errors")
        problems += [f"{rel}: raw $...$ in the text: {t!r}" for t in info["raw"]]
        if info["scroll"] > info["inner"]:
            problems.append(f"{rel}: {info['scroll']} px wide in a {info['inner']}-px window (horizontal scroll)")
        ids[rel] = set(info["ids"])
        links[rel] = info["links"]
        for name, target in SHOT_PAGES.items():
            if target == rel:
                page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)
                page.screenshot(path=str(SHOTS / f"{name}-full.png"), full_page=True)
        page.close()
    n_links = 0
    for rel, hrefs in links.items():
        for href in hrefs:
            if not href.startswith(base):
                continue                            # external links are links, not loads
            n_links += 1
            parts = urlsplit(href)
            target = unquote(parts.path[len(urlsplit(base).path):]) or "index.html"
            path = site / target
            if path.is_dir():
                path, target = path / "index.html", target.rstrip("/") + "/index.html"
            if not path.exists():
                problems.append(f"{rel}: link to a missing file: {target}")
            elif parts.fragment and path.suffix == ".html":
                if target not in ids:
                    problems.append(f"{rel}: link into a page not visited: {target}")
                elif unquote(parts.fragment) not in ids[target]:
                    problems.append(f"{rel}: link to a missing anchor: {target}#{parts.fragment}")
    ctx.close()
    return problems, n_links


def check_search(browser, base: str, site: Path) -> list[str]:
    chapters = sorted((site / "notebooks").glob("*.html"))
    words = unique_words(site, chapters)
    problems = [f"{c.relative_to(site)}: no word of its own to search for" for c in chapters
                if str(c.relative_to(site)) not in words]
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    for target, word in words.items():
        page.goto(f"{base}search.html?q={word}", wait_until="load")
        try:
            page.wait_for_function("/Search finished|did not match/.test("
                                   "(document.querySelector('#search-results .search-summary') || {}).textContent || '')",
                                   timeout=30000)
        except Exception as e:                          # noqa: BLE001 -- reported below
            problems.append(f"search {word!r}: no results shown ({type(e).__name__})")
            continue
        hits = page.eval_on_selector_all("#search-results ul.search li a", "as => as.map(a => a.href)")
        if not any(urlsplit(h).path.endswith("/" + target) for h in hits):
            problems.append(f"search {word!r} (only in {target}): not found, results {hits[:5]}")
        if target.endswith("02_rope_einsum_tables.html"):
            page.screenshot(path=str(SHOTS / "search.png"))
    page.close()
    print(f"  search: {len(words)} chapters, each found by a word of its own "
          f"(e.g. {', '.join(f'{w!r}' for w in list(words.values())[:4])})" if not problems else "", flush=True)
    return problems


def check_file_url(browser, site: Path) -> list[str]:
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    errs = []
    page.on("console", lambda m: errs.append(m.text[:160]) if m.type == "error" else None)
    page.goto((site / "index.html").as_uri(), wait_until="load")
    problems = [f"file:// index.html: console error {e}" for e in errs]
    if not page.locator("text=Part I").first.is_visible():
        problems.append("file:// index.html: the course map is not shown")
    page.goto((site / "notebooks" / "02_rope_einsum_tables.html").as_uri(), wait_until="load")
    info = page.evaluate(PAGE_JS)
    if not info["math"] or info["typeset"] != info["math"]:
        problems.append(f"file:// chapter 02: {info['typeset']} of {info['math']} math elements typeset")
    page.close()
    return problems


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="llamanb-book-"))
    problems: list[str] = []
    try:
        sites = []
        for n in range(1 if "--one-build" in argv else 2):
            src = booksite.book_source(work / f"src{n}")
            t0 = time.time()
            rc, log = booksite.build(src, work / f"html{n}")
            print(f"build {n + 1}: {time.time() - t0:.0f} s (exit {rc})", flush=True)
            if rc:
                print(log[-6000:])
                return 1
            sites.append(work / f"html{n}")
        site = sites[0]
        if len(sites) == 2:
            diff = compare(*sites)
            problems += diff
            print(f"  determinism: {'the same files, byte for byte' if not diff else f'{len(diff)} files differ'}")
        problems += booksite.static_problems(site)
        stems = sorted(p.stem for p in (booksite.REPO / "notebooks").glob("*.ipynb"))
        for stem in stems:
            problems += booksite.chapter_problems(site, stem)
        problems += booksite.shown_solutions(site, stems)
        pages = booksite.html_pages(site)
        print(f"  {len(pages)} pages ({len(stems)} chapters), {sum(1 for _ in site.rglob('*.png'))} images", flush=True)
        srv, base = serve(site)
        t0 = time.time()
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run"])
                page_problems, n_links = check_pages(browser, base, site)
                problems += page_problems
                problems += check_search(browser, base, site)
                problems += check_file_url(browser, site)
                browser.close()
        finally:
            srv.shutdown()
        print(f"  browser: {len(pages)} pages, {n_links} internal links in {time.time() - t0:.0f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in problems:
        print("FAIL:", line)
    print(f"{'FAILED' if problems else 'ok'}: {len(problems)} problems (screenshots in {SHOTS})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

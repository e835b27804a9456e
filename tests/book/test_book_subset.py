"""The book builds (`make book`), checked on a subset that builds in seconds: the landing page with
the whole course map, two chapters (one with math, figures and a widget), the docs/ pages and the
API reference of one package, with warnings as errors. The full build, in a browser:
tests/book/check_book.py (`make test-book`)."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("myst_nb", reason="the book extra is not installed (pip install -e '.[book]')")

import booksite as book_site  # noqa: E402  -- tests/book/booksite.py
from pathlib import Path  # noqa: E402

SUBSET = ["02_rope_einsum_tables", "04_kv_cache_growth"]       # Part I: math; figures and a widget
if not Path("/usr/share/javascript/mathjax/MathJax.js").exists():
    pytest.skip("Debian's libjs-mathjax is not installed (make apt-deps installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The subset, and beside it (both at once: two cores) the smallest book with one broken link."""
    work, broken = tmp_path_factory.mktemp("book"), tmp_path_factory.mktemp("broken")
    src, bad = book_site.book_source(work), book_site.book_source(broken)
    (bad / "index.md").write_text((bad / "index.md").read_text(encoding="utf-8")
                                  + "\nSee [a page that is not there](docs/nowhere.md).\n", encoding="utf-8")
    procs = [book_site.start_build(src, work / "html", chapters=SUBSET, api=["llamanb.model"]),
             book_site.start_build(bad, broken / "html", chapters=["04b_sampling"], api=["llamanb.errors"])]
    try:
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    return (work / "html", procs[0].returncode, outs[0]), (procs[1].returncode, outs[1])


@pytest.fixture(scope="module")
def subset(builds):
    (out, rc, log), _ = builds
    assert rc == 0, f"sphinx-build failed:\n{log[-4000:]}"
    return out


def test_chapters_as_pages(subset):
    for stem in SUBSET:
        assert book_site.chapter_problems(subset, stem) == []


def test_nothing_from_the_network_no_ansi_no_traceback(subset):
    assert book_site.static_problems(subset) == []
    mathjax = subset / "_static" / "mathjax"
    assert (mathjax / "MathJax.js").exists() and (mathjax / "config" / "TeX-AMS_CHTML.js").exists()
    assert list((mathjax / "fonts" / "HTML-CSS" / "TeX" / "woff").glob("*.woff"))
    page = (subset / "notebooks" / "02_rope_einsum_tables.html").read_text(encoding="utf-8")
    assert 'src="../_static/mathjax/MathJax.js?config=TeX-AMS_CHTML' in page
    assert page.count('class="math notranslate nohighlight"') >= 2          # its display equations


def test_landing_page_holds_the_map_and_the_reference(subset):
    readme = (book_site.REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- course-map:start -->")[1].split("<!-- course-map:end -->")[0]
    part_of = {}
    for section in re.split(r"^### ", block, flags=re.M)[1:]:
        for stem in re.findall(r"^\|[^|]*?(\d\d[a-z]?_[a-z0-9_]+)", section, flags=re.M):
            part_of[stem] = section.splitlines()[0].strip()
    index = (subset / "index.html").read_text(encoding="utf-8")
    for stem in SUBSET:                         # the subset's part, from the README's map
        assert part_of[stem] in index
    for stem in SUBSET:
        assert f'href="notebooks/{stem}.html"' in index
    for doc in ("docs/course", "docs/architecture", "docs/performance", "docs/corrections", "docs/testing",
                "docs/usage", "docs/hardware/cpu", "api/index"):
        assert (subset / f"{doc}.html").exists(), doc
    api = (subset / "api" / "generated" / "llamanb.model.config.html").read_text(encoding="utf-8")
    assert 'id="llamanb.model.config.LlamaConfig"' in api


def test_no_solutions(subset):
    assert book_site.shown_solutions(subset, SUBSET) == []


def test_a_broken_link_fails_the_build(builds):
    _, (rc, log) = builds
    assert rc != 0
    assert re.search(r"index.md:\d+: WARNING: .*nowhere", log), log[-2000:]

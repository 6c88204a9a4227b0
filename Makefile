# gpulens developer entry points. `make demo` and `make test` set up everything they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch is pinned to the CPU build: an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: venv system-deps demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

venv: $(STAMP)

system-deps:
	@bash scripts/install-system-deps.sh

demo: venv
	$(BIN)/gpulens demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy gpulens

pytest: venv
	$(BIN)/pytest

test: venv system-deps lint typecheck pytest

bench: venv
	$(BIN)/python -m benchmarks.run $(BENCH)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

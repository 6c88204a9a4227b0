# gpulens developer entry points. `make demo` and `make test` set up everything they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch is pinned to the CPU build: an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: venv system-deps demo test test-fast lint typecheck pytest bench clean

# pip is not quiet: the first install downloads about 1 GB and takes minutes, and what it is
# doing shows (one line per package, progress bars on a terminal). What it installs must be
# byte-compiled (45-60 CPU-s for torch, pyspark, scipy...), since with PYTHONDONTWRITEBYTECODE set
# (as on CI machines) Python would otherwise compile every module again in every process. pip
# compiles one file at a time; compileall -j 0 uses every core. Like pip, it goes on past a file
# that is not Python 3.11 (torch ships a py312-only test module), so its status is not checked.
# Left out: what no gpulens process imports (the packages' own test suites, sympy, pip,
# setuptools, mypyc: 36% of the bytes); such a module still runs, compiled in memory.
PIP := $(BIN)/python -m pip install --progress-bar on --no-compile
UNUSED := '/(tests?|testing/_internal)/|/site-packages/(sympy|pip|setuptools|mypyc)/'
COMPILE := $(BIN)/python -m compileall -qq -j 0 -x $(UNUSED) $(VENV)/lib
$(STAMP): pyproject.toml
	@echo "==> [1/4] creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [2/4] upgrading pip"
	$(PIP) --upgrade pip
	@echo "==> [3/4] installing PyTorch ($(TORCH), CPU build: a few hundred MB)"
	$(PIP) $(TORCH)
	@echo "==> [4/4] installing gpulens and its dependencies ('.[all,dev]')"
	$(PIP) -e '.[all,dev]'
	@echo "==> byte-compiling what was installed (all cores)"
	$(COMPILE) || true
	touch $(STAMP)
	@echo "==> $(VENV) is ready"

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

# Independent tests run in parallel (pytest-xdist); tests sharing one real server (the Slurm
# cluster, the Spark JVM, Chromium) or one costly module fixture stay on one worker, and those
# groups start first (tests/conftest.py: XDIST_GROUPS, pytest_xdist_make_scheduler).
# Waiting on servers and subprocesses dominates, so 3 workers pay off even on 2 cores.
PYTEST_WORKERS ?= 3
# With PYTHONDONTWRITEBYTECODE set (as on CI machines), every `gpulens` process a test starts
# compiled the package's modules again (measured: 12% of the CPU of the CLI tests); compiled once
# here (about 1 CPU-s). Python ignores a compiled file whose source changed since.
PACKAGE_PYC := $(BIN)/python -m compileall -qq -j 0 gpulens
FAST := not slow and not server and not browser and not torch and not slurm

pytest: venv
	@$(PACKAGE_PYC)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

# The edit-run loop: every test that takes under about half a second, no servers (< 2 minutes:
# 1,887 tests took 126 s in one process, 105 s on two workers; 1,973 took 79 s on two workers at stop 36; 2,412 took 57 s at stop 37, on a faster machine).
test-fast: venv
	@$(PACKAGE_PYC)
	$(BIN)/pytest -m "$(FAST)" -q -n 2

# mypy (about 40 s from a clean clone) runs beside pytest, which leaves part of the two cores
# idle while its tests wait on servers and subprocesses; its report prints when pytest ends,
# and `make test` fails when either fails.
test: venv system-deps lint
	@$(PACKAGE_PYC)
	@log=$$(mktemp); ($(BIN)/mypy gpulens > $$log 2>&1) & mypy=$$!; \
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup; tests=$$?; \
	wait $$mypy; typecheck=$$?; echo "==> $(BIN)/mypy gpulens (ran beside pytest)"; \
	cat $$log; rm -f $$log; [ $$tests -eq 0 ] || exit $$tests; exit $$typecheck

bench: venv
	$(BIN)/python -m benchmarks.run $(BENCH)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

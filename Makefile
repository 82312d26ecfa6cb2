# Two entry points (README "Quick start"): `make run` runs the main job,
# `make test` runs the whole suite plus ruff, mypy and the import contract.
# Both create ./.venv on first use and are safe to repeat. `make test-fast` is the
# edit-test loop: every test not marked `slow` (no framework process), under 2 minutes.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
# `make run GPU=1` (or `make venv GPU=1`) on a GPU server takes the CUDA builds: PyPI's
# Linux torch wheel (CUDA), tensorflow[and-cuda] and jax[cuda13]; the three variables below
# still override one by one. The stamp records which build the venv holds.
GPU ?=
# torch 2.13.0 is the CPU build this project tests with (pip finds it on local
# disk on our machines; elsewhere it downloads). GPU servers: install the CUDA
# build of torch into the venv instead; nothing else changes.
TORCH ?= torch==2.13.0
# TensorFlow shares dltop's interpreter (CPU build here; GPU servers:
# tensorflow[and-cuda]). CNTK 2.7 gets its own Python 3.6 environment, built by
# `dltop env setup cntk` (pyenv's 3.6, cntk==2.7.post2, Open MPI sonames).
ifeq ($(GPU),1)
TF ?= tensorflow[and-cuda]==2.21.0
JAX ?= jax[cuda13]==0.10.2
endif
TF ?= tensorflow-cpu==2.21.0
# JAX shares it too: the CPU build (GPU servers: jax[cuda13]).
JAX ?= jax==0.10.2
STAMP := $(VENV)/.dltop-installed$(if $(filter 1,$(GPU)),-gpu,)

.PHONY: run test test-fast lint check venv clean-venv slurm-packages

run: $(STAMP)
	$(BIN)/dltop run quick
	$(BIN)/dltop export --format md

# Three workers (pytest-xdist) on our 2-core machines: the tests are written to run beside
# each other and beside real engines (own lock directories, foreign runners allowed for),
# and two left the CPUs idle ~23 % of the time (tests waiting on processes, Slurm,
# servers): three took 16 min 54 s and 17 min 23 s, two 20 min 5 s (docs/development.md).
# tests/slurm share one worker and so one cluster (tests/conftest.py). `pytest` alone
# runs them one by one.
test: $(STAMP) lint slurm-packages
	$(BIN)/pytest -q -n 3 --dist loadgroup --durations=25

# tests/slurm start a real single-node Slurm: install it as root, else say what is missing.
slurm-packages:
	@if ! command -v sbatch >/dev/null \
	        || { ! command -v munged >/dev/null && ! test -x /usr/sbin/munged; }; then \
	    if [ "$$(id -u)" = 0 ]; then \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	            apt-get install -y -qq slurm-wlm munge >/dev/null; \
	    else \
	        echo "make test: the Slurm tests need Slurm and munge:" \
	             "run 'sudo apt-get install -y slurm-wlm munge' first" >&2; exit 1; \
	    fi; \
	fi

test-fast: $(STAMP)
	$(BIN)/pytest -q -n 2 -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)" "$(TF)" "$(JAX)" numpy
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/dltop env setup cntk
	touch $(STAMP)

clean-venv:
	rm -rf $(VENV)

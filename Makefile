# Two commands matter: `make run` (the default experiment, ending in a report) and `make test`.
# Both create .venv and install the project (CPU-only torch, pinned in constraints.txt) on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint bench docs clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# The default experiment (conf/experiment/$(EXPERIMENT).yaml) as a parallel sweep, then its report.
# Re-running resumes the sweep (finished runs are skipped). Another: make run EXPERIMENT=load_sweep
EXPERIMENT ?= paper_main

run: $(STAMP)
	$(BIN)/pacml sim -m experiment=$(EXPERIMENT) hydra.sweep.dir=outputs/$(EXPERIMENT)
	$(BIN)/pacml report outputs/$(EXPERIMENT)

test: $(STAMP)
	$(BIN)/pytest -q -n 2

lint: $(STAMP)
	$(BIN)/ruff check workloads simulator pacml analysis tests benchmarks scripts

bench: $(STAMP)
	$(BIN)/python benchmarks/sim/bench_simulator.py

# The docs site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or page reference.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) outputs site .pytest_cache .ruff_cache

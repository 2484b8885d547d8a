# Two commands matter: `make run` (the default experiment, ending in a report) and `make test`.
# Both create .venv and install the project (CPU-only torch, pinned in constraints.txt) on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint bench clean

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
	$(BIN)/pacml-sim -m experiment=$(EXPERIMENT) hydra.sweep.dir=outputs/$(EXPERIMENT)
	$(BIN)/pacml-report outputs/$(EXPERIMENT)

test: $(STAMP)
	$(BIN)/pytest -q -n 2

lint: $(STAMP)
	$(BIN)/ruff check workloads simulator pacml analysis tests benchmarks scripts

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_simulator.py

clean:
	rm -rf $(VENV) outputs .pytest_cache .ruff_cache

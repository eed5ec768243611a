# Laminar developer commands. Everything runs inside .venv, which `install` creates.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install check test bench demo clean lint typecheck generated-check

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check laminar clients tests bench
	$(BIN)/ruff format --check laminar clients tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict laminar clients

generated-check: $(STAMP)
	$(BIN)/python scripts/check_generated.py

check: lint typecheck generated-check

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not chaos"

demo: $(STAMP)
	scripts/demo.sh

bench: $(STAMP)
	$(BIN)/python -m bench.segment_bench --quick
	$(BIN)/python -m bench.placement_bench
	$(BIN)/python -m bench.membership_bench --quick
	$(BIN)/python -m bench.replica_sim_bench --quick
	$(BIN)/python -m bench.cluster_bench --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

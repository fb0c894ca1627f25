PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-integration test-slow test-all bench lab clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[parquet]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $@

$(VENV)/.installed-notebooks: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[notebooks]'
	touch $@

lab: $(VENV)/.installed-notebooks
	$(BIN)/jupyter lab notebooks/

demo: $(VENV)/.installed-base
	$(BIN)/python -m memlab demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

# the tiers deselected by default: `integration` reads the shared public data
# ($$MEMLAB_SHARED_DATA, else ../shared/datasets; skipped, saying why, without it), `slow` is long
test-integration: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m integration

test-slow: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m slow

test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m ''

bench: $(VENV)/.installed-bench
	$(BIN)/python -m memlab bench --json benchmarks/results.json

clean:
	rm -rf $(VENV) build *.egg-info

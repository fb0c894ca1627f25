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

# `make bench` installs the peers (igraph, scikit-network, tantivy, bm25s) and numba (the fast
# extra) beside pytest-benchmark; `make bench BENCH_EXTRAS=bench` measures memlab alone (the
# peer groups then skip, saying why)
BENCH_EXTRAS ?= bench,peers,fast

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[$(BENCH_EXTRAS)]'
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

# prints the load average before and after: timings on a shared machine are only comparable as
# the ratios measured inside one run. `make bench BENCH_SELECT=peer` runs only the benchmarks
# whose name matches (pytest -k), e.g. the peer groups (~2.5 of the ~6 CPU-minutes)
BENCH_SELECT ?=

bench: $(VENV)/.installed-bench
	@cat /proc/loadavg 2>/dev/null || true
	$(BIN)/python -m memlab bench --json benchmarks/results.json \
		$(if $(BENCH_SELECT),-k '$(BENCH_SELECT)')
	@cat /proc/loadavg 2>/dev/null || true

clean:
	rm -rf $(VENV) build *.egg-info

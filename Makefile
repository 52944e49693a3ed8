# distill — the commands a newcomer runs. `make test` is what CI runs (.ci/run).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)
OWNER := .distill/services-owned.json
# The context-assembly property test's acceptance size (issue 7: >= 10,000 generated sessions).
PROPERTY_EXAMPLES ?= 10000
# Test processes (pytest-xdist). Whole files go to one process (module fixtures start one worker or
# keyspace per file); most integration time is waiting on Kafka and Cassandra, so 3 beat 2 cores' worth.
TEST_WORKERS ?= 3

.PHONY: venv test unit lint typecheck demo services-up services-down clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,rocksdb,trpc,agents]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Installs everything, starts (or reuses) Kafka and Cassandra, runs `distill init` and the whole
# suite (unit + integration against the real services), and stops what it started.
test: venv
	@mkdir -p .distill
	$(BIN)/distill services up --owner-file $(OWNER)
	@set -e; rc=0; \
	  $(BIN)/distill init || rc=$$?; \
	  if [ $$rc -eq 0 ]; then DISTILL_PROPERTY_EXAMPLES=$(PROPERTY_EXAMPLES) \
	    $(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS) || rc=$$?; fi; \
	  $(BIN)/distill services down --owner-file $(OWNER); \
	  exit $$rc

unit: venv
	$(BIN)/pytest -q -m "not integration" -n 2 $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check schemas projections streams tests benchmarks
	$(BIN)/mypy

demo: venv
	$(BIN)/distill demo

services-up: venv
	$(BIN)/distill services up

services-down: venv
	$(BIN)/distill services down

clean:
	rm -rf $(VENV) .distill .pytest_cache .mypy_cache .ruff_cache

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
# Bytecode is written while the suite runs even where PYTHONDONTWRITEBYTECODE is set (as on this
# machine): the first process to import a module compiles it once, and the test processes and the
# dozens of stages they start reuse it (compiling every installed library up front took 40 s of CPU).
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE

.PHONY: venv test unit lint typecheck demo services-up services-down clean

venv: $(STAMP)

# uv (from PyPI) resolves and installs the same versions as pip in a fraction of the time (a fresh
# install here: 19 s against 112 s). It writes no .pyc files: see TEST_ENV.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q 'uv>=0.5,<1'
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev,rocksdb,trpc,agents]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Installs everything, starts (or reuses) Kafka and Cassandra, runs `distill init` and the whole
# suite (unit + integration against the real services), and stops what it started. The services
# start beside the suite: the unit tests run while the jars download and the JVMs boot, and the
# tests that need the services wait for READY (the exit status of `services up` + `init`).
READY := .distill/services-up.rc
# The option's value is joined with `=`: pytest reads its arguments before tests/conftest.py declares
# the option, and a separate value that exists on disk (services already up: the file is there at
# once) became the path its conftests are looked up from; the workers then refused the option.
test: venv
	@mkdir -p .distill; rm -f $(READY) $(READY).tmp
	@set -e; rc=0; \
	  ( set +e; { $(TEST_ENV) $(BIN)/distill services up --owner-file $(OWNER) && $(TEST_ENV) $(BIN)/distill init; } \
	      > .distill/services-up.log 2>&1; echo $$? > $(READY).tmp; mv $(READY).tmp $(READY) ) & up=$$!; \
	  $(TEST_ENV) DISTILL_PROPERTY_EXAMPLES=$(PROPERTY_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider \
	    -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 --services-ready-file=$(READY) $(PYTEST_ARGS) \
	    || rc=$$?; \
	  wait $$up || true; cat .distill/services-up.log; \
	  $(BIN)/distill services down --owner-file $(OWNER); \
	  exit $$rc

unit: venv
	$(BIN)/pytest -q -m "not integration" -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

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

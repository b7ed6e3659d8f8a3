# Two commands on a fresh machine: `make run` (the whole platform locally, with a demo) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run down test lint unit integration e2e deploy-check bench clean

$(STAMP): pyproject.toml client/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ./client
	$(BIN)/pip install -q -e '.[dev,bench]'
	touch $(STAMP)

install: $(STAMP)

# Bring up Cassandra, Kafka, ZooKeeper and Redis, apply migrations, start the processes and run a demo.
run: install
	$(BIN)/tickwheel up --demo

down: install
	$(BIN)/tickwheel down

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy tickwheel api dispatcher worker coordinator schemas tests client/tickwheel_client

# Everything: lint, then unit, integration and end-to-end tests against the real local servers (the 40 slowest
# named at the end: CI must stay under 30 minutes).
test: install lint
	$(BIN)/tickwheel stack up
	$(BIN)/python -m pytest -p no:cacheprovider --durations=40 tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest ran no tests" >&2; exit 1; fi; exit $$rc

unit: install
	$(BIN)/python -m pytest -p no:cacheprovider tests/unit

deploy-check: install
	bash deploy/check.sh

clean:
	rm -rf $(VENV) .stack

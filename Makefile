# The two commands of the README: `make run` and `make test`.
VENV := .venv/bin

.PHONY: bootstrap run test lint typecheck pytest test-hosts down clean

bootstrap:
	@bash scripts/bootstrap.sh

# The demo: the local stack, a sample tenant, changes through check and gate.
DEMO := $(VENV)/sluice --config demo/sluice.yaml

run: bootstrap
	$(DEMO) stack up
	$(DEMO) demo

test: bootstrap lint typecheck pytest

lint:
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .

typecheck:
	$(VENV)/mypy celeryconfig.py tasks scheduler workers web cli

# Two processes, each with its own ZooKeeper and Redis; a test file stays in
# one of them (module fixtures are made once). Most tests wait on workers,
# so two processes halve the run even on two cores.
PYTEST_WORKERS ?= 2

pytest:
	$(VENV)/pytest -n $(PYTEST_WORKERS) --dist loadfile

# Nightly-style: a gate across three network namespaces losing one (root only);
# SIGINT on timeout, so the fixtures still remove the namespaces.
test-hosts: bootstrap
	timeout -s INT -k 60 1200 $(VENV)/pytest -m hosts tests/hosts -s

down:
	$(DEMO) stack down

clean: down
	rm -rf .sluice

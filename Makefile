# The two commands of the README: `make run` and `make test`.
VENV := .venv/bin

.PHONY: bootstrap run test lint typecheck pytest down clean

bootstrap:
	@bash scripts/bootstrap.sh

run: bootstrap
	$(VENV)/sluice stack up
	$(VENV)/sluice demo

test: bootstrap lint typecheck pytest

lint:
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .

typecheck:
	$(VENV)/mypy celeryconfig.py tasks scheduler workers web

pytest:
	$(VENV)/pytest

down:
	$(VENV)/sluice stack down

clean: down
	rm -rf .sluice

# Two commands for a newcomer: `make run` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint docs clean bench

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,test]'
	touch $(STAMP)

## Run api + worker + scheduler in one process on embedded defaults (lethe dev).
run: $(STAMP)
	$(VENV)/bin/lethe dev

## Run the whole test suite (PostgreSQL from DATABASE_URL or embedded; RabbitMQ from BROKER_URL).
test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

## Regenerate docs/configuration.md from the configuration schema.
docs: $(STAMP)
	$(PY) -m app.docs_gen > docs/configuration.md

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info

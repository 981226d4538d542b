# Two commands for a newcomer: `make run` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test docs format clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# `make run` installs what running needs; `make test` adds the test tools. PYTHONWARNINGS=ignore only for the
# install: setuptools prints a banner about editable installs that a newcomer cannot act on.
$(RUN_STAMP): pyproject.toml constraints.txt | $(PY)
	PYTHONWARNINGS=ignore $(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

$(TEST_STAMP): pyproject.toml constraints.txt | $(PY)
	PYTHONWARNINGS=ignore $(PY) -m pip install --quiet -c constraints.txt -e '.[dev,test]'
	touch $@

## Run api + worker + scheduler in one process on embedded defaults (lethe dev); make run PORT=9000 for another port.
run: $(RUN_STAMP)
	$(VENV)/bin/lethe dev $(if $(PORT),--port $(PORT))

## Format and lint (ruff), type-check (mypy, strict), then run the whole test suite (PostgreSQL from DATABASE_URL
## or embedded; RabbitMQ from BROKER_URL). `make format` formats and fixes what ruff can. The suite writes Python's
## bytecode caches even where the environment says not to: its few hundred processes would each compile it again.
test: $(TEST_STAMP)
	$(PY) -m ruff format --check --quiet .
	$(PY) -m ruff check --quiet .
	$(PY) -m mypy
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest $(PYTEST_ARGS)

## Regenerate docs/configuration.md from the configuration schema.
docs: $(RUN_STAMP)
	$(PY) -m app.entry.docs_gen > docs/configuration.md

format: $(TEST_STAMP)
	$(PY) -m ruff check --fix --quiet .
	$(PY) -m ruff format --quiet .

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info

# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make run` installs what serving needs and nothing else; `make test` adds the client's
# pandas, the docs site's mkdocs and the test tooling (Playwright, schemathesis, ruff, ...).
SERVE := $(VENV)/.serve
STAMP := $(VENV)/.installed

.PHONY: run test docs lint bench-deps clean browser

$(SERVE): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(SERVE)

$(STAMP): $(SERVE)
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

## run: set up what serving needs and serve on http://127.0.0.1:8000 with the digits demo
run: $(SERVE)
	$(BIN)/tripletlab serve

## browser: Debian's Chromium for the browser tests (Playwright drives it; nothing is downloaded)
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

## test: set everything up and run the whole suite (SQLite, PostgreSQL, browser) on two
## pytest-xdist workers, each with a PostgreSQL database of its own (tests/postgres.py);
## a test file's tests stay together on one worker (its module fixtures are started once)
test: $(STAMP) browser
	$(BIN)/ruff check app tripletlab tests bench migrations docs/hooks
	$(BIN)/pytest -n 2 --dist loadfile --durations=25

## docs: build the documentation site into site/ (as the suite does, strictly)
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check app tripletlab tests bench migrations docs/hooks
	$(BIN)/ruff format --check app tripletlab tests bench migrations docs/hooks

clean:
	rm -rf $(VENV) data site .pytest_cache .ruff_cache

# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench-deps clean browser

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

## run: set everything up and serve on http://127.0.0.1:8000 with the digits demo
run: $(STAMP)
	$(BIN)/tripletlab serve

## browser: Debian's Chromium for the browser tests (Playwright drives it; nothing is downloaded)
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

## test: set everything up and run the whole suite (SQLite, PostgreSQL, browser)
test: $(STAMP) browser
	$(BIN)/ruff check app tests bench migrations
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check app tests bench migrations
	$(BIN)/ruff format --check app tests bench migrations

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache

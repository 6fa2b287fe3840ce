# The one task runner. `make serve` and `make test` are all a newcomer needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test lint typecheck unit browser clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## serve: install into .venv and serve http://127.0.0.1:8000/v1 on the embedded SQLite database
serve: $(STAMP)
	$(BIN)/petstore serve

## test: lint, type-check and run the whole test suite (schemathesis included)
test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) browser
	$(BIN)/pytest

# The docs-page test drives Debian's chromium headless; install it when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser test..."; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	    >/dev/null 2>&1 || echo "Could not install chromium (needs root and apt)."; }

## bench: load benchmark of petstore serve against a raw ASGI baseline (flags: make bench ARGS="--help")
.PHONY: bench
bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

## compare: two versions served at once on one core, AFTER/BEFORE req/s (make compare ARGS="main .")
.PHONY: compare
compare: $(STAMP)
	$(BIN)/python -m bench.compare $(ARGS)

## soak: a mixed load against one instance, 5 min by default (make soak ARGS="--duration 60")
.PHONY: soak
soak: $(STAMP)
	$(BIN)/python -m bench.soak $(ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache .hypothesis

# The two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps bfcl-eval==2026.3.23
	$(BIN)/python -m pip install -q mpmath==1.3.0
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/forethought bench --json reports/bench.json

test: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) reports .pytest_cache .mypy_cache .ruff_cache

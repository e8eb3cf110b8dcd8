"""Tests outside ``tests/whitebox/`` use forethought only as its users can: every import of forethought there
names a public module (no ``_core``, no underscore module) and public names (none starting with ``_``). The
white-box tests, which reach into the core's parts, live in ``tests/whitebox/`` (docs/design.md, "Tests")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
PUBLIC_TESTS = sorted(TESTS.glob("*.py"))
SUPPORT = {"conftest.py"}
"""The suite's shared fixtures: conftest makes the real load signal read idle, which only the core can do."""


def private_imports(source: str) -> list[str]:
    """Each import of a private part of forethought in ``source`` (at any depth of the module)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "forethought":
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"line {node.lineno}: from {node.module}")
            found += [f"line {node.lineno}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] == "forethought" and any(p.startswith("_") for p in a.name.split("."))]
    return found


@pytest.mark.parametrize("path", [p for p in PUBLIC_TESTS if p.name not in SUPPORT], ids=lambda p: p.name)
def test_tests_outside_whitebox_import_only_the_public_surface(path: Path) -> None:
    assert private_imports(path.read_text(encoding="utf-8")) == [], f"{path.name}: move it to tests/whitebox/"


@pytest.mark.parametrize(("source", "private"), [
    ("from forethought import Runtime", False),
    ("from forethought.agent.feed import GuessFeed", False),
    ("from forethought._core.store import Store", True),
    ("from forethought.mcp.cli import _daemon", True),
    ("import forethought._core.calls", True),
    ("def f():\n    from forethought._core import lifecycle\n", True),
    ("import json", False),
])
def test_the_check_sees_private_imports_at_any_depth(source: str, private: bool) -> None:
    assert bool(private_imports(source)) is private


def test_the_whitebox_folder_holds_tests() -> None:
    assert len(list((TESTS / "whitebox").glob("test_*.py"))) >= 10

"""The public surface: what ``forethought`` exports, that it is importable, documented and one error family.

Users may rely on the names in ``forethought.__all__`` (and ``forethought.integrations.__all__``) and on
nothing else. These tests pin a required subset (more names may be added), check that every exported name
exists, is importable the way users import it, is documented, and that the error classes the package
raises can all be caught through the surface as one family.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pathlib
import re
from types import ModuleType
from typing import Any

import pytest

import forethought
import forethought.errors

SRC = pathlib.Path(forethought.__file__).parent

REQUIRED = {
    # calls and tools
    "ToolCall", "Tool", "Effect", "tool", "StateCell", "PartialRule",
    # the runtime facade and its policy
    "Runtime", "Session", "Policy", "ToolPolicy", "load_policy", "CallOutcome", "SpeculationTicket",
    # snapshots for stateful tools
    "ObjectState", "FileWorkspace",
    # the agent loop and what it returns
    "Agent", "AgentResult", "ToolRecord", "StepTiming",
    # LLM clients
    "LLMClient", "OpenAIChatClient", "FakeLLMClient",
    # predictors
    "Predictor", "Prediction", "PredictionContext", "ObservedCall", "ModelSpeculator", "PatternPredictor",
    "PatternConfig",
    # code speculation
    "CodePredictor", "CodeExecutor", "PlainExecutor", "ExecResult",
    # telemetry
    "Telemetry", "EventKind", "SessionStats",
    # the error family
    "ForethoughtError", "CallError", "UnknownToolError", "InvalidArgumentsError", "MalformedArgumentsJSONError",
    "ToolDefinitionError", "ToolExecutionError", "SnapshotError", "PolicyError", "LLMError",
    "StreamDroppedError", "UpstreamError", "WorkloadError",
    "__version__",
}


def _own_doc(obj: Any) -> str:
    """The docstring ``obj`` itself declares (a dataclass's generated signature does not count)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not isinstance(doc, str):
        return ""
    doc = doc.strip()
    name = getattr(obj, "__name__", "")
    if inspect.isclass(obj) and doc.startswith(f"{name}("):  # dataclasses write "Name(field: type, ...)"
        return ""
    return doc


def _exports(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    assert isinstance(names, list | tuple), f"{module.__name__} has no __all__"
    assert all(isinstance(n, str) for n in names)
    return list(names)


def _check_documented_exports(module: ModuleType) -> None:
    names = _exports(module)
    assert len(names) == len(set(names)), f"duplicates in {module.__name__}.__all__"
    undocumented, foreign, missing = [], [], []
    for name in names:
        try:
            obj = getattr(module, name)
        except ModuleNotFoundError as exc:  # a lazily imported adapter whose framework is an optional extra
            if exc.name is None or exc.name.split(".")[0] == "forethought":
                missing.append(f"{name} ({exc})")
            continue
        except AttributeError:
            missing.append(name)
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not _own_doc(obj):
                undocumented.append(name)
            if not obj.__module__.startswith("forethought"):
                foreign.append(f"{name} ({obj.__module__})")
    assert not missing, f"{module.__name__}.__all__ names that do not exist: {missing}"
    assert not undocumented, f"exported without a docstring of their own: {undocumented}"
    assert not foreign, f"re-exports of other packages' objects: {foreign}"


def test_the_required_names_are_exported() -> None:
    missing = REQUIRED - set(forethought.__all__)
    assert not missing, f"missing from forethought.__all__: {sorted(missing)}"


def test_every_exported_name_exists_and_is_documented() -> None:
    _check_documented_exports(forethought)
    assert _own_doc(forethought), "the package needs a docstring saying what it is"


def test_exported_names_are_public_spellings() -> None:
    private = [n for n in forethought.__all__ if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))]
    assert not private, f"private names exported: {private}"
    assert isinstance(forethought.__version__, str) and re.match(r"\d+\.\d+", forethought.__version__)


def test_star_import_gives_exactly_the_surface() -> None:
    namespace: dict[str, Any] = {}
    exec("from forethought import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(forethought.__all__)


def test_exported_classes_are_the_ones_the_package_uses() -> None:
    """A name exported at the top is the very object the implementation uses, not a copy or a lookalike."""
    for name in forethought.__all__:
        obj = getattr(forethought, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        home = importlib.import_module(obj.__module__)
        assert getattr(home, obj.__name__) is obj, f"{name} is not what {obj.__module__} defines"


def _raised_error_names() -> set[str]:
    """Error classes of forethought.errors that some module outside errors.py names (raises or maps to)."""
    errors_py = SRC / "errors.py"
    text = "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py") if p != errors_py)
    names: set[str] = set()
    for name, cls in vars(forethought.errors).items():
        if (inspect.isclass(cls) and issubclass(cls, forethought.errors.ForethoughtError)
                and re.search(rf"\b{name}\b", text)):
            names.add(name)
    return names


def test_every_error_the_package_uses_is_exported_and_in_one_family() -> None:
    raised = _raised_error_names()
    assert {"ForethoughtError", "CallError", "ToolExecutionError", "LLMError"} <= raised  # the scan works
    assert not raised - set(forethought.__all__), f"errors in use but not exported: {raised - set(forethought.__all__)}"
    for name in forethought.__all__:
        obj = getattr(forethought, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, forethought.ForethoughtError), f"{name} is outside the error family"
            assert obj.__module__ == "forethought.errors", f"{name} is defined outside forethought.errors"


def test_the_integrations_package_exports_only_documented_names() -> None:
    if importlib.util.find_spec("forethought.integrations") is None:
        pytest.skip("forethought.integrations does not exist yet")
    integrations = importlib.import_module("forethought.integrations")
    _check_documented_exports(integrations)
    assert _own_doc(integrations), "forethought.integrations needs a module docstring"
    private = [n for n in _exports(integrations) if n.startswith("_")]
    assert not private, f"private names exported from forethought.integrations: {private}"

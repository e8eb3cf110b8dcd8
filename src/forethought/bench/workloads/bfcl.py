"""The BFCL multi-turn workload: entries, ground truth, tool schemas and live executable backends.

Entries come from the installed ``bfcl-eval`` package (JSON Lines files under ``bfcl_eval/data``). Ground
truth call strings such as ``"cd(folder='document')"`` are parsed with :mod:`ast` (never evaluated);
positional arguments are mapped to names with the backend method's signature. Tool schemas are BFCL's
function docs converted to OpenAI ``tools`` entries (``dict`` -> ``object``, ``float`` -> ``number``; doc
defaults that disagree with the method's own default, such as the string ``'None'``, are dropped).

:func:`build_session` gives one session fresh backend instances (``_load_scenario`` on a deep copy of the
entry's ``initial_config``; BFCL's own executor, which uses ``eval`` and module globals, is not used). Each
backend class lives in one :class:`~forethought.sandbox.objects.ObjectState` cell and every BFCL function
becomes an ISOLATED_WRITE :class:`~forethought._core.tools.Tool` bound to its class's cell, so any of them may be
speculated against a snapshot. :func:`state_fingerprint` renders all backend state canonically for the
equivalence checks (wall-clock file timestamps excluded; random generator states included).
"""

from __future__ import annotations

import ast
import asyncio
import copy
import functools
import importlib
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from forethought._core.calls import ToolCall, compile_arguments, dumps_canonical
from forethought._core.tools import Effect, Tool
from forethought.bench.workloads.latency import LatencyModel, Sleep, call_key_text
from forethought.errors import InvalidArgumentsError, WorkloadError
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.sandbox.fingerprint import fingerprint, render_state
from forethought.sandbox.objects import ObjectState, resolve_target

BACKEND_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

BACKENDS: Mapping[str, tuple[str, str]] = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
"""Backend class -> (module under :data:`BACKEND_PACKAGE`, function doc file)."""

STATELESS_CLASSES = frozenset({"MathAPI"})

DOMAIN_BLOCK = 50
DOMAINS = ("file_system", "vehicle", "trading", "travel")
"""Main domain of each block of 50 consecutive ids (ids 0-49 file system, 50-99 vehicle, ...)."""

_CLASS_DOMAIN = {"GorillaFileSystem": "file_system", "VehicleControlAPI": "vehicle", "TradingBot": "trading",
                 "TravelAPI": "travel"}

_TYPE_MAP = {"dict": "object", "float": "number", "int": "integer", "integer": "integer", "string": "string",
             "str": "string", "array": "array", "list": "array", "tuple": "array", "boolean": "boolean",
             "bool": "boolean", "number": "number", "object": "object"}

EXCLUDED_STATE = frozenset({("File", "_last_modified")})
"""Attributes left out of fingerprints: wall-clock timestamps that differ between runs by construction."""

Grouping = Literal["step", "turn"]


# --- data ------------------------------------------------------------------------------------------


def data_dir() -> Path:
    """``bfcl_eval/data`` of the installed package."""
    try:
        import bfcl_eval
    except ImportError as exc:
        raise WorkloadError("bfcl-eval is not installed (pip install --no-deps bfcl-eval==2026.3.23)") from exc
    return Path(bfcl_eval.__file__).parent / "data"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"cannot read {path}: {exc.strerror}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"{path}:{n}: not JSON ({exc})") from None
    return out


@functools.cache
def backend_class(class_name: str) -> type:
    """The executable backend class named ``class_name``."""
    try:
        module_name, _ = BACKENDS[class_name]
    except KeyError:
        raise WorkloadError(f"unknown BFCL backend class {class_name!r}") from None
    module = importlib.import_module(f"{BACKEND_PACKAGE}.{module_name}")
    cls: type = getattr(module, class_name)
    return cls


def method_parameters(class_name: str, method: str) -> tuple[str, ...]:
    """Parameter names of a backend method in signature order (``self`` excluded)."""
    fn = getattr(backend_class(class_name), method, None)
    if fn is None or method.startswith("_"):
        raise WorkloadError(f"{class_name} has no tool {method!r}")
    return tuple(p for p in inspect.signature(fn).parameters if p != "self")


def _convert_schema(schema: Any, python_defaults: Mapping[str, Any] | None = None) -> Any:
    """Convert one BFCL parameter schema to JSON schema (recursively)."""
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            mapped = _TYPE_MAP.get(str(value).lower())
            if mapped is not None:
                out["type"] = mapped
        elif key == "properties" and isinstance(value, Mapping):
            props = {}
            for name, sub in value.items():
                converted = _convert_schema(sub)
                if (isinstance(converted, dict) and "default" in converted and python_defaults is not None
                        and (name not in python_defaults or python_defaults[name] != converted["default"])):
                    del converted["default"]
                props[name] = converted
            out["properties"] = props
        elif key == "items":
            out["items"] = _convert_schema(value)
        elif key in ("description", "enum", "default", "required"):
            out[key] = copy.deepcopy(value)
    return out


@functools.cache
def function_docs() -> dict[str, tuple[str, dict[str, Any]]]:
    """Tool name -> (backend class, OpenAI ``tools`` entry), for every function of the 8 backends."""
    docs: dict[str, tuple[str, dict[str, Any]]] = {}
    base = data_dir() / "multi_turn_func_doc"
    for class_name, (_, doc_file) in BACKENDS.items():
        cls = backend_class(class_name)
        for doc in _read_jsonl(base / doc_file):
            name = doc["name"]
            method = getattr(cls, name, None)
            if method is None:
                raise WorkloadError(f"{doc_file}: {class_name} has no method {name!r}")
            signature = inspect.signature(method)
            defaults = {p.name: p.default for p in signature.parameters.values()
                        if p.default is not inspect.Parameter.empty}
            parameters = _convert_schema(doc.get("parameters") or {"type": "object"}, defaults)
            parameters["type"] = "object"
            parameters.setdefault("properties", {})
            docs[name] = (class_name, {"type": "function", "function": {
                "name": name, "description": doc.get("description", ""), "parameters": parameters}})
    return docs


# --- entries -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BfclEntry:
    """One BFCL multi-turn conversation with its ground truth and tools."""

    id: str
    index: int
    domain: str
    involved_classes: tuple[str, ...]
    initial_config: Mapping[str, Any] = field(compare=False, hash=False)
    excluded_function: tuple[str, ...]
    turns: tuple[str, ...]
    ground_truth: tuple[tuple[ToolCall, ...], ...]
    tools: tuple[Mapping[str, Any], ...] = field(compare=False, hash=False)
    long_context: bool = False

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t["function"]["name"] for t in self.tools)

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(call for turn in self.ground_truth for call in turn)


def _index_of(entry_id: str) -> int:
    match = re.search(r"(\d+)$", entry_id)
    if match is None:
        raise WorkloadError(f"BFCL id {entry_id!r} has no numeric part")
    return int(match.group(1))


def _domain_of(index: int, classes: Sequence[str], category: str) -> str:
    if category.startswith("multi_turn") and 0 <= index < DOMAIN_BLOCK * len(DOMAINS):
        return DOMAINS[index // DOMAIN_BLOCK]
    for class_name in classes:
        if class_name in _CLASS_DOMAIN:
            return _CLASS_DOMAIN[class_name]
    return classes[0] if classes else "unknown"


def _literal(node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise WorkloadError(f"{where}: argument is not a literal: {ast.unparse(node)}") from None


def parse_call(text: str, owners: Mapping[str, str]) -> ToolCall:
    """Parse one ground-truth call string into a :class:`ToolCall` with named arguments only.

    ``owners`` maps tool names to backend classes; it supplies the signature for positional arguments.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise WorkloadError(f"cannot parse call {text!r}: {exc.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise WorkloadError(f"not a plain function call: {text!r}")
    name = node.func.id
    arguments: dict[str, Any] = {}
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        raise WorkloadError(f"{text!r}: starred arguments are not supported")
    if node.args:
        owner = owners.get(name)
        if owner is None:
            raise WorkloadError(f"{text!r}: positional arguments for unknown tool {name!r}")
        params = method_parameters(owner, name)
        if len(node.args) > len(params):
            raise WorkloadError(f"{text!r}: too many positional arguments")
        for param, arg in zip(params, node.args, strict=False):
            arguments[param] = _literal(arg, text)
    for keyword in node.keywords:
        if keyword.arg is None:
            raise WorkloadError(f"{text!r}: **kwargs are not supported")
        if keyword.arg in arguments:
            raise WorkloadError(f"{text!r}: argument {keyword.arg!r} given twice")
        arguments[keyword.arg] = _literal(keyword.value, text)
    return ToolCall(name, arguments)


def _turn_text(messages: Any) -> str:
    if isinstance(messages, list):
        return "\n".join(str(m.get("content", "")) for m in messages
                         if isinstance(m, Mapping) and m.get("role", "user") == "user")
    return str(messages or "")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _widen(docs: Mapping[str, tuple[str, dict[str, Any]]],
           calls: Iterable[ToolCall]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Docs whose parameter types also admit every ground-truth value (BFCL's truth is not always typed
    like its docs: ``close_ticket(ticket_id='ticket_001')`` for an integer id)."""
    out = {name: (owner, copy.deepcopy(doc)) for name, (owner, doc) in docs.items()}
    for call in calls:
        if call.name not in out:
            continue
        properties = out[call.name][1]["function"]["parameters"]["properties"]
        for arg, value in call.arguments.items():
            prop = properties.get(arg)
            if not isinstance(prop, dict) or "type" not in prop:
                continue
            spec = compile_arguments(call.name, {"type": "object", "properties": {arg: prop}})
            try:
                spec.canonical_arguments(ToolCall(call.name, {arg: value}))
            except InvalidArgumentsError:
                types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
                prop["type"] = [*types, _json_type(value)]
    return out


def _entry(raw: Mapping[str, Any], ground_truth: tuple[tuple[ToolCall, ...], ...], category: str,
           docs: Mapping[str, tuple[str, dict[str, Any]]]) -> BfclEntry:
    entry_id = str(raw["id"])
    classes = tuple(raw.get("involved_classes", ()))
    excluded = tuple(raw.get("excluded_function", ()))
    tools = tuple(copy.deepcopy(doc) for name, (owner, doc) in docs.items()
                  if owner in classes and name not in excluded)
    turns = tuple(_turn_text(t) for t in raw["question"])
    if len(turns) != len(ground_truth):
        raise WorkloadError(f"{entry_id}: {len(turns)} turns but {len(ground_truth)} ground-truth turns")
    index = _index_of(entry_id)
    return BfclEntry(id=entry_id, index=index, domain=_domain_of(index, classes, category),
                     involved_classes=classes, initial_config=copy.deepcopy(raw.get("initial_config", {})),
                     excluded_function=excluded, turns=turns, ground_truth=ground_truth, tools=tools,
                     long_context=category.endswith("long_context"))


def _ground_truth(raw: Mapping[str, Any], answer: Mapping[str, Any]) -> tuple[tuple[ToolCall, ...], ...]:
    classes = tuple(raw.get("involved_classes", ()))
    unknown = [c for c in classes if c not in BACKENDS]
    if unknown:
        raise WorkloadError(f"{raw['id']}: unsupported backend classes {unknown}")
    owners = {name: owner for name, (owner, _) in function_docs().items() if owner in classes}
    return tuple(tuple(parse_call(c, owners) for c in turn) for turn in answer["ground_truth"])


@functools.cache
def _load(category: str) -> tuple[BfclEntry, ...]:
    base = data_dir()
    questions = _read_jsonl(base / f"BFCL_v4_{category}.json")
    answers = {a["id"]: a for a in _read_jsonl(base / "possible_answer" / f"BFCL_v4_{category}.json")}
    truths = []
    for raw in questions:
        answer = answers.get(raw["id"])
        if answer is None:
            raise WorkloadError(f"{category}: no ground truth for {raw['id']}")
        truths.append(_ground_truth(raw, answer))
    docs = _widen(function_docs(), (call for truth in truths for turn in truth for call in turn))
    out = [_entry(raw, truth, category, docs) for raw, truth in zip(questions, truths, strict=True)]
    return tuple(sorted(out, key=lambda e: e.index))


def load_bfcl(category: str = "multi_turn_base") -> list[BfclEntry]:
    """All entries of a BFCL multi-turn category, ordered by numeric id."""
    return list(_load(category))


def split_interleaved(entries: Sequence[BfclEntry], fold: int = 0) -> tuple[list[BfclEntry], list[BfclEntry]]:
    """Two-fold split by interleaving ids: fold 0 tests on odd ids, fold 1 on even ids (never by halves)."""
    if fold not in (0, 1):
        raise ValueError("fold must be 0 or 1")
    test = [e for e in entries if e.index % 2 != fold]
    train = [e for e in entries if e.index % 2 == fold]
    return train, test


def to_trajectory(entry: BfclEntry, grouping: Grouping = "step") -> Trajectory:
    """The entry as a :class:`Trajectory`: one call per step, or all calls of a turn in one (parallel) step."""
    if grouping not in ("step", "turn"):
        raise ValueError(f"grouping must be 'step' or 'turn', not {grouping!r}")
    turns = []
    for user, calls in zip(entry.turns, entry.ground_truth, strict=True):
        steps: tuple[tuple[ToolCall, ...], ...]
        steps = tuple((call,) for call in calls) if grouping == "step" else ((calls,) if calls else ())
        turns.append(Turn(user=user, steps=steps))
    return Trajectory(id=entry.id, turns=tuple(turns), tools=entry.tools, domain=entry.domain,
                      metadata={"involved_classes": list(entry.involved_classes), "category": "bfcl",
                                "grouping": grouping})


# --- live backends ---------------------------------------------------------------------------------


class BfclState:
    """The backend instances of one session, one :class:`ObjectState` cell per class."""

    def __init__(self, cells: Mapping[str, ObjectState]) -> None:
        self.cells: dict[str, ObjectState] = dict(cells)

    def instance(self, class_name: str) -> Any:
        """The live instance of a backend class."""
        return self.cells[class_name].live


class BfclSession(NamedTuple):
    """What :func:`build_session` returns: the session's tools and its backend state."""

    tools: list[Tool]
    state: BfclState


def new_backend(class_name: str, config: Mapping[str, Any], long_context: bool = False) -> Any:
    """A fresh backend instance loaded from (a deep copy of) ``config``."""
    instance = backend_class(class_name)()
    if class_name not in STATELESS_CLASSES:
        instance._load_scenario(copy.deepcopy(dict(config)), long_context=long_context)
    return instance


def _method_tool(name: str, class_name: str, schema: Mapping[str, Any], cell: ObjectState,
                 latency: LatencyModel | None, sleep: Sleep) -> Tool:
    function = schema["function"]

    def call_method(target: Any, arguments: Mapping[str, Any]) -> Any:
        return getattr(resolve_target(target), name)(**arguments)

    fn: Callable[..., Any]
    if latency is None:
        def fn(target: Any, **arguments: Any) -> Any:
            return call_method(target, arguments)
    else:
        model = latency

        async def fn(target: Any, **arguments: Any) -> Any:
            seconds = model.delay(name, call_key_text(arguments))
            if seconds > 0:
                await sleep(seconds)
            return call_method(target, arguments)

    fn.__name__ = name
    return Tool(name=name, fn=fn, parameters=function["parameters"], description=function.get("description", ""),
                effect=Effect.ISOLATED_WRITE, state=cell, threaded=False,
                parameter_order=method_parameters(class_name, name))


def build_session(entry: BfclEntry, latency: LatencyModel | None = None, lazy: bool = True,
                  sleep: Sleep = asyncio.sleep) -> BfclSession:
    """Fresh backends for ``entry`` and one ISOLATED_WRITE tool per offered function, bound to them.

    With ``latency`` each tool waits its seeded delay (``sleep``) before touching state. ``lazy`` snapshots
    copy the state only when a speculative call first touches it (after its delay).
    """
    cells = {c: ObjectState(new_backend(c, entry.initial_config.get(c, {}), entry.long_context), lazy=lazy)
             for c in entry.involved_classes}
    docs = function_docs()
    tools = []
    for schema in entry.tools:
        name = schema["function"]["name"]
        class_name = docs[name][0]
        tools.append(_method_tool(name, class_name, schema, cells[class_name], latency, sleep))
    return BfclSession(tools, BfclState(cells))


# --- fingerprints --------------------------------------------------------------------------------


def fingerprint_value(value: Any) -> str:
    """Canonical text of any backend object graph (deterministic, cycle-safe)."""
    return fingerprint(value, EXCLUDED_STATE)


def state_fingerprint(state: BfclState) -> str:
    """Canonical dump of every backend instance of a session (for equivalence checks)."""
    return dumps_canonical({name: render_state(cell.live, EXCLUDED_STATE, name)
                            for name, cell in sorted(state.cells.items())})


def render_bfcl_output(value: Any) -> str:
    """A tool result as BFCL's own executor renders it (strings as is, dicts as JSON, else ``str``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)

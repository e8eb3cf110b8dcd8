"""The loop bench's tasks: scripted model sessions that call MCP tools, generated from a seed.

A :class:`Task` is one conversation: the user's text, the model's responses (a script for
:mod:`forethought.serve.scripted`: text, then calls, with timing), the API it is spoken in, and the state the
server starts from. Two suites:

* **notes** (:func:`notes_tasks`): the bench's notes server (:mod:`~forethought.bench.loop.notes_server`)
  with a latency per call (a server doing real work: a remote API, a database). Each task explores a folder
  (list, read two or three notes in one message, search), and in three of four it writes a note and reads it
  back; in one of four the client's own tool edits a note (a write no shim sees) before the model reads it
  again.
* **repo** (:func:`repo_tasks`): real third-party servers (the npm filesystem server and ``mcp-server-git``)
  on a generated repository (:mod:`forethought.bench.mcp.repo`), the MCP bench's generated tasks grouped into
  messages (consecutive reads in one message, each write alone), at the servers' own latency.

Timing is a model's: a first token after ``ttft_s`` and a fragment of ``fragment_chars`` every ``chunk_s``
(times the bench's time scale), with a sentence or two of reasoning before each message's calls.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forethought.daemon.wire import Wire

__all__ = ["CLIENT_EDIT", "NOTES_READS", "Task", "noisy_script", "notes_state", "notes_tasks", "repo_tasks"]

NOTES_READS = frozenset({"read_note", "list_notes", "search_notes", "note_info"})
CLIENT_EDIT = "Edit"
"""The client's own editing tool in the notes suite: it changes a note where no shim sees it."""
WIRES = (Wire.MESSAGES, Wire.RESPONSES, Wire.CHAT)
FOLDERS = ("design", "ops", "research", "notes")
WORDS = ("latency", "cache", "schema", "retry", "budget", "index", "queue", "token", "shard", "lease")
THOUGHTS = ("Let me look at what is there before changing anything.", "I will read the relevant notes first.",
            "That gives me the structure; now the details.", "I should check where this is mentioned.",
            "I have enough context to make the change.", "Let me confirm the result.")


@dataclass(frozen=True, slots=True)
class Task:
    """One conversation of the bench (see the module docstring)."""

    name: str
    user_text: str
    wire: Wire
    script: Mapping[str, Any]
    tools: Sequence[Mapping[str, Any]]
    reads: frozenset[str]
    """The tools (by their model-facing name) that only read."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return sum(len(r.get("calls", ())) for r in self.script["responses"])


def _tool(name: str, **properties: str) -> dict[str, Any]:
    return {"name": name, "description": name.replace("_", " "), "parameters": {
        "type": "object", "properties": {k: {"type": v} for k, v in properties.items()},
        "required": list(properties)}}


NOTES_TOOLS = [_tool("mcp__notes__read_note", path="string"), _tool("mcp__notes__list_notes", folder="string"),
               _tool("mcp__notes__search_notes", text="string"), _tool("mcp__notes__note_info", path="string"),
               _tool("mcp__notes__write_note", path="string", text="string"),
               _tool("mcp__notes__append_note", path="string", text="string"),
               _tool(CLIENT_EDIT, path="string", text="string")]


def notes_state(seed: int) -> dict[str, str]:
    """The notes every task starts from (seeded): four folders of five notes."""
    rng = random.Random(f"notes-state/{seed}")
    state = {}
    for folder in FOLDERS:
        for i in range(5):
            lines = [f"# {folder} note {i}"] + [f"The {rng.choice(WORDS)} of {rng.choice(WORDS)} is "
                                                  f"{rng.randint(1, 99)} units." for _ in range(rng.randint(3, 8))]
            state[f"{folder}/n{i}.md"] = "\n".join(lines)
    return state


def _call(tool: str, **arguments: Any) -> dict[str, Any]:
    name = tool if tool == CLIENT_EDIT else f"mcp__notes__{tool}"
    return {"name": name, "arguments": arguments}


def _message(rng: random.Random, calls: list[dict[str, Any]], timing: Mapping[str, float]) -> dict[str, Any]:
    text = " ".join(rng.sample(THOUGHTS, k=rng.randint(1, 2)))
    return {"text": text, "calls": calls, **timing}


def notes_tasks(count: int, seed: int = 0, ttft_s: float = 0.6, chunk_s: float = 0.025,
                fragment_chars: int = 10) -> list[Task]:
    """``count`` seeded tasks of the notes suite, their APIs in turn (Messages, Responses, Chat)."""
    state = notes_state(seed)
    timing = {"ttft_s": ttft_s, "chunk_s": chunk_s, "fragment_chars": fragment_chars}
    tasks = []
    for i in range(count):
        rng = random.Random(f"notes-task/{seed}/{i}")
        folder = rng.choice(FOLDERS)
        notes = sorted(p for p in state if p.startswith(folder + "/"))
        picked = rng.sample(notes, k=rng.randint(2, 3))
        word = rng.choice(WORDS)
        responses = [_message(rng, [_call("list_notes", folder=folder)], timing),
                     _message(rng, [_call("read_note", path=p) for p in picked], timing),
                     _message(rng, [_call("search_notes", text=word)]
                              + ([_call("note_info", path=picked[0])] if rng.random() < 0.5 else []), timing)]
        if rng.random() < 0.75:
            target = f"{folder}/summary-{i}.md"
            responses.append(_message(rng, [_call("write_note", path=target,
                                                  text=f"Summary of {', '.join(picked)}: {word}.")], timing))
            responses.append(_message(rng, [_call("read_note", path=target)], timing))
        if rng.random() < 0.25:
            responses.append(_message(rng, [_call(CLIENT_EDIT, path=picked[0], text=f"edited {word}"),
                                            _call("read_note", path=picked[0])], timing))
        responses.append({"text": f"Done: {folder} reviewed.", **timing})
        tasks.append(Task(f"notes-{i}", f"Task {i}: review the {folder} notes about {word}.", WIRES[i % 3],
                          {"responses": responses}, NOTES_TOOLS,
                          frozenset(f"mcp__notes__{t}" for t in NOTES_READS)))
    return tasks


GIT_READS = frozenset({"git_status", "git_log", "git_show", "git_diff_unstaged", "git_diff_staged", "git_diff"})


def repo_tasks(root: Path, files: Mapping[str, str], count: int, seed: int, schemas: Mapping[str, Mapping[str, Any]],
               reads: frozenset[str], ttft_s: float = 0.6, chunk_s: float = 0.025,
               fragment_chars: int = 10) -> list[Task]:
    """The MCP bench's generated repository tasks as scripted sessions (``schemas``: model name -> input
    schema of every tool of the two servers; ``reads``: the model names of the tools that only read)."""
    from forethought.bench.mcp.repo import make_traces

    timing = {"ttft_s": ttft_s, "chunk_s": chunk_s, "fragment_chars": fragment_chars}
    tools = [{"name": name, "description": name, "parameters": schema} for name, schema in sorted(schemas.items())]
    tasks = []
    for i, trace in enumerate(make_traces(root, files, count, seed)):
        rng = random.Random(f"repo-task/{seed}/{i}")
        responses: list[dict[str, Any]] = []
        group: list[dict[str, Any]] = []
        for call in trace:
            name = f"mcp__{call.server}__{call.tool}"
            entry = {"name": name, "arguments": dict(call.arguments)}
            if name in reads:
                group.append(entry)
                continue
            if group:
                responses.append(_message(rng, group, timing))
                group = []
            responses.append(_message(rng, [entry], timing))
        if group:
            responses.append(_message(rng, group, timing))
        responses.append({"text": "Done.", **timing})
        tasks.append(Task(f"repo-{i}", f"Repository task {i}: read around and make the change.", WIRES[i % 3],
                          {"responses": responses}, tools, reads))
    return tasks


def noisy_script(script: Mapping[str, Any], error_rate: float, seed: int) -> dict[str, Any]:
    """``script`` as a cheaper speculator model answers it: with chance ``error_rate`` per call, a wrong
    argument value (so its proposals are right with about ``1 - error_rate`` per call)."""
    rng = random.Random(f"noisy/{seed}")
    responses = []
    for response in script["responses"]:
        calls = []
        for call in response.get("calls", ()):
            arguments = dict(call["arguments"])
            if arguments and rng.random() < error_rate:
                key = sorted(arguments)[0]
                arguments[key] = f"{arguments[key]}-guess" if isinstance(arguments[key], str) else arguments[key]
            calls.append({"name": call["name"], "arguments": arguments})
        responses.append({**response, "calls": calls} if "calls" in response else dict(response))
    return {**script, "responses": responses}

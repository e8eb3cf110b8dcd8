"""A seeded ticket service: the data and the tasks of the MCP bench's latency and one-at-a-time suites.

A remote service an agent reaches through an MCP server (a tracker with tickets, comments and linked docs),
generated from a seed: :class:`Service` holds its state and answers its calls, deterministically. The tasks
(:func:`make_tasks`) are generic agent work on it, generated, not copied from any data set: who am I, which
projects, search a project's tickets, read the top hit and its comments, sometimes its linked doc and a second
ticket, and in some tasks comment on or move the ticket, then read it again. A later call's arguments come
from earlier results (a ticket id from a search, a doc path from a ticket), as they do for a model.
The server (:mod:`~forethought.bench.mcp.sim_server`) serves a :class:`Service` with seeded read latencies.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

READS = ("whoami", "list_projects", "search_tickets", "get_ticket", "get_comments", "read_doc")
WRITES = ("add_comment", "set_status")
STATUSES = ("open", "in-progress", "review", "done")
_WORDS = ("cache", "login", "timeout", "export", "billing", "search", "upload", "report", "sync", "latency",
          "crash", "memory", "token", "webhook", "schema", "retry", "quota", "locale", "backup", "index")

TOOLS: tuple[dict[str, Any], ...] = (
    {"name": "whoami", "description": "The signed-in user.", "properties": {}},
    {"name": "list_projects", "description": "Every project's key and name.", "properties": {}},
    {"name": "search_tickets", "description": "Tickets of a project matching a word, best first.",
     "properties": {"project": {"type": "string"}, "query": {"type": "string"},
                    "limit": {"type": "integer", "default": 5}}, "required": ["project", "query"]},
    {"name": "get_ticket", "description": "One ticket: title, status, assignee, body, linked doc.",
     "properties": {"ticket_id": {"type": "string"}}, "required": ["ticket_id"]},
    {"name": "get_comments", "description": "A ticket's comments, oldest first.",
     "properties": {"ticket_id": {"type": "string"}}, "required": ["ticket_id"]},
    {"name": "read_doc", "description": "A documentation page by path.",
     "properties": {"path": {"type": "string"}}, "required": ["path"]},
    {"name": "add_comment", "description": "Comment on a ticket.",
     "properties": {"ticket_id": {"type": "string"}, "text": {"type": "string"}}, "required": ["ticket_id", "text"]},
    {"name": "set_status", "description": "Move a ticket to another status.",
     "properties": {"ticket_id": {"type": "string"}, "status": {"type": "string", "enum": list(STATUSES)}},
     "required": ["ticket_id", "status"]},
)


@dataclass(frozen=True, slots=True)
class ServiceShape:
    projects: int = 4
    tickets: int = 30
    """Tickets per project."""
    seed: int = 0


class Service:
    """The service's state and its tools' behaviour (deterministic for a shape)."""

    def __init__(self, shape: ServiceShape = ServiceShape()) -> None:
        rng = random.Random(shape.seed)
        self.user = "dana"
        self.projects = {f"P{i}": f"{rng.choice(_WORDS).title()} {rng.choice(('API', 'App', 'Core', 'Web'))}"
                         for i in range(shape.projects)}
        self.tickets: dict[str, dict[str, Any]] = {}
        self.comments: dict[str, list[str]] = {}
        self.docs: dict[str, str] = {}
        for key in self.projects:
            for n in range(1, shape.tickets + 1):
                words = rng.sample(_WORDS, 3)
                ticket_id = f"{key}-{n}"
                doc = f"docs/{key.lower()}/{words[0]}.md"
                self.docs.setdefault(doc, f"# {words[0]}\n\nHow {words[0]} works in {self.projects[key]}: "
                                          + " ".join(rng.sample(_WORDS, 8)))
                self.tickets[ticket_id] = {
                    "id": ticket_id, "title": f"{words[0]} {words[1]} fails with {words[2]}",
                    "status": rng.choice(STATUSES), "assignee": rng.choice(("dana", "li", "sam")),
                    "body": " ".join(rng.sample(_WORDS, 10)), "doc": doc}
                self.comments[ticket_id] = [f"{rng.choice(('li', 'sam'))}: {' '.join(rng.sample(_WORDS, 5))}"
                                            for _ in range(rng.randint(0, 3))]

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call; its result text (errors as text, as a server's tool error would read)."""
        try:
            return str(getattr(self, "_" + name)(**arguments))
        except (TypeError, KeyError, ValueError) as exc:
            return f"error: {type(exc).__name__} {exc}"

    def fingerprint(self) -> str:
        state = json.dumps([self.tickets, self.comments], sort_keys=True)
        return hashlib.sha256(state.encode()).hexdigest()[:16]

    def _whoami(self) -> str:
        return json.dumps({"user": self.user})

    def _list_projects(self) -> str:
        return json.dumps([{"key": k, "name": v} for k, v in self.projects.items()])

    def _search_tickets(self, project: str, query: str, limit: int = 5) -> str:
        found = [t for t in self.tickets.values() if t["id"].startswith(project + "-")
                 and query in (t["title"] + " " + t["body"])]
        found.sort(key=lambda t: (query not in t["title"], int(t["id"].split("-")[1])))
        return json.dumps([{"id": t["id"], "title": t["title"], "status": t["status"]} for t in found[:limit]])

    def _get_ticket(self, ticket_id: str) -> str:
        return json.dumps(self.tickets[ticket_id])

    def _get_comments(self, ticket_id: str) -> str:
        if ticket_id not in self.tickets:
            raise KeyError(ticket_id)
        return json.dumps(self.comments[ticket_id])

    def _read_doc(self, path: str) -> str:
        return self.docs[path]

    def _add_comment(self, ticket_id: str, text: str) -> str:
        self.comments[ticket_id].append(f"{self.user}: {text}")
        return json.dumps({"ok": True, "comments": len(self.comments[ticket_id])})

    def _set_status(self, ticket_id: str, status: str) -> str:
        if status not in STATUSES:
            raise ValueError(status)
        self.tickets[ticket_id]["status"] = status
        return json.dumps({"ok": True, "status": status})


@dataclass(frozen=True, slots=True)
class Step:
    """One call of a task; ``pick``: how its arguments come from earlier results, resolved at replay."""

    tool: str
    arguments: Mapping[str, Any]


def make_tasks(shape: ServiceShape, n: int, seed: int) -> list[list[Step]]:
    """``n`` seeded tasks on the service of ``shape`` (a service of that shape resolves every argument)."""
    service = Service(shape)
    rng = random.Random(seed)
    tasks = []
    for _ in range(n):
        steps: list[Step] = []
        if rng.random() < 0.7:
            steps.append(Step("whoami", {}))
        steps.append(Step("list_projects", {}))
        project = rng.choice(sorted(service.projects))
        word = rng.choice(_WORDS)
        steps.append(Step("search_tickets", {"project": project, "query": word}))
        hits = json.loads(service.call("search_tickets", {"project": project, "query": word}))
        if not hits:
            steps.append(Step("search_tickets", {"project": project, "query": "fails"}))
            hits = json.loads(service.call("search_tickets", {"project": project, "query": "fails"}))
        for hit in hits[:1 + (rng.random() < 0.4)]:
            ticket = json.loads(service.call("get_ticket", {"ticket_id": hit["id"]}))
            steps.append(Step("get_ticket", {"ticket_id": hit["id"]}))
            steps.append(Step("get_comments", {"ticket_id": hit["id"]}))
            if rng.random() < 0.5:
                steps.append(Step("read_doc", {"path": ticket["doc"]}))
        if hits and rng.random() < 0.6:
            target = hits[0]["id"]
            if rng.random() < 0.5:
                steps.append(Step("add_comment", {"ticket_id": target, "text": f"looking into {word}"}))
            else:
                steps.append(Step("set_status", {"ticket_id": target, "status": rng.choice(STATUSES)}))
            steps.append(Step("get_ticket", {"ticket_id": target}))
        tasks.append(steps)
    return tasks

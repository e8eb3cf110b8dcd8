"""The hostile program suite's tools, and plain exec in a fresh process (``plain_main`` reads a job on stdin and
prints what plain exec did; run it as ``python -c "import code_suite; code_suite.plain_main()"`` so that programs
importing ``code_suite`` see the module the tools read).

Both the test process (the speculative real run) and the fresh process (plain exec) build the same tools from
here, against a work directory of their own: fetch/lookup/echo (PURE), read_text/exists/env/config
(READ_ONLY: a file of the work directory, an environment variable, this module's ``STATE``), send
(DESTRUCTIVE: appends to ``outbox.txt`` of the work directory).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "src")] if str(HERE.parent / "src") not in sys.path else []

from forethought import Effect, Tool, tool  # noqa: E402
from forethought.code.plain import PlainExecutor  # noqa: E402
from forethought.code.results import ExecResult  # noqa: E402

STATE: dict[str, Any] = {"mode": "initial"}
"""Process state a READ_ONLY tool reads (programs may change it through ``import code_suite``)."""
INITIAL_STATE = dict(STATE)
_ADDRESS = re.compile(r"0x[0-9a-f]+")


def suite_tools(work: str) -> list[Tool]:
    def fetch(url: str) -> dict[str, Any]:
        return {"url": url, "n": len(url)}

    def lookup(key: str) -> int:
        if key.startswith("bad"):
            raise KeyError(key)
        return len(key)

    def echo(value: Any) -> str:
        return f"{type(value).__name__}:{value!r}"

    def read_text(name: str) -> str:
        path = Path(work) / name
        return path.read_text() if path.is_file() else "<missing>"

    def exists(name: str) -> bool:
        return (Path(work) / name).exists()

    def env(name: str) -> str:
        return os.environ.get(name, "<unset>")

    def config(key: str) -> Any:
        return STATE.get(key, "<unset>")

    def send(message: str) -> str:
        with open(Path(work) / "outbox.txt", "a") as f:
            f.write(message + "\n")
        return f"sent {message}"

    return [tool(fetch, effect=Effect.PURE), tool(lookup, effect=Effect.PURE), tool(echo, effect=Effect.PURE),
            tool(read_text, effect=Effect.READ_ONLY), tool(exists, effect=Effect.READ_ONLY),
            tool(env, effect=Effect.READ_ONLY), tool(config, effect=Effect.READ_ONLY),
            tool(send, effect=Effect.DESTRUCTIVE)]


def render_value(value: Any) -> str:
    """A namespace value as the comparison sees it: data by repr, anything else by its type's name."""
    if type(value) in (str, bytes, int, float, bool, type(None), list, tuple, dict, set, frozenset):
        try:
            return repr(value)
        except RecursionError:
            return "<recursive>"
    if hasattr(value, "__qualname__"):
        return f"<{type(value).__name__} {value.__qualname__}>"
    return f"<{type(value).__name__}>"


def signature(results: list[ExecResult], namespace: dict[str, Any], work: str) -> dict[str, Any]:
    """What must be equal between the speculative real run and plain exec (paths of the work directory as
    ``<WORK>``)."""
    def clean(text: str) -> str:
        return _ADDRESS.sub("0x?", text.replace(work, "<WORK>"))

    files = {}
    for path in sorted(Path(work).rglob("*")):
        if path.is_file():
            files[str(path.relative_to(work))] = clean(path.read_text(errors="replace"))
    tools = {t.name for t in suite_tools(work)}
    names = {name: clean(render_value(value)) for name, value in sorted(namespace.items())
             if not name.startswith("__") and name not in tools}
    return {"blocks": [[clean(r.stdout), clean(r.error_text), [[c.call.name, clean(repr(c.call.positional)),
                                                                 clean(repr(c.call.arguments))] for c in r.calls]]
                       for r in results],
            "names": names, "files": files}


async def _plain(blocks: list[str], work: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"WORK": work}
    executor = PlainExecutor(suite_tools(work), namespace)
    results = [await executor.run(code) for code in blocks]
    return signature(results, namespace, work)


def plain_main() -> None:
    job = json.load(sys.stdin)
    os.chdir(job["cwd"])
    out = asyncio.run(_plain(job["blocks"], job["work"]))
    sys.stdout.flush()
    os.write(1, ("\n@@SIGNATURE@@" + json.dumps(out)).encode())
    os._exit(0)  # threads a hostile program left behind do not hold the process


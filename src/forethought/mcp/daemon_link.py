"""The shim's side of linked MCP: an MCP proxy registers its server with ``forethought serve`` and asks it first.

``forethought mcp-proxy --daemon URL -- <server ...>`` links its upstream server to a running daemon, which
sees the model's stream and starts READ-only calls the moment their arguments close. This module is that
link, on the proxy's side, and the link protocol itself (the daemon imports its names from here):

* **Registration.** ``POST /link/v1/register`` with the server's names (its key in the client's
  configuration, ``--name``, and the name it gives itself) and its ``tools/list`` entries (schemas and
  annotations); the daemon answers a shim id. Every request carries the daemon's token in
  :data:`TOKEN_HEADER`: a random secret the daemon writes, readable by the user only, to the file
  :func:`daemon_file` names (a local token, not an open port for anyone).
* **Jobs.** ``GET /link/v1/jobs`` is a server-sent-event stream from the daemon: ``{"job", "name",
  "arguments"}`` asks the shim to run a call early (it sends the request upstream under an id of its own and
  posts the answer to ``/link/v1/result``); ``{"cancel": job}`` withdraws one. Comments keep it alive; when
  it ends, either side knows the other is gone.
* **Claims.** A client's ``tools/call`` is first offered to ``POST /link/v1/claim``. The answer is ``hit``
  (the result of an early run, to send the client as its answer) or ``run``: the shim sends the client's
  request upstream itself, verbatim, and reports the answer to ``/link/v1/done`` (so the daemon knows when a
  write has really ended).

:class:`DaemonLink` does all of it for one proxy session. The proxy gives it two functions: how to send a
call upstream under its own id (:data:`UpstreamCall`), and, per client call, how to send the client's own
request (``forward``). If the daemon cannot be reached, or stops answering (its job stream ends), the link
says so in one warning line and from then on :meth:`DaemonLink.call` is just ``forward()``: the proxy goes on
as a plain proxy. This module never imports the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from forethought.llm.sse import SSEDecoder

__all__ = ["DAEMON_FILE_ENV", "LINK_PREFIX", "TOKEN_HEADER", "DaemonLink", "LinkAnswer", "LinkResult", "UpstreamCall",
           "daemon_file", "read_daemon_file"]

log = logging.getLogger(__name__)

LINK_PREFIX = "/link/v1"
TOKEN_HEADER = "x-forethought-link-token"
DAEMON_FILE_ENV = "FORETHOUGHT_DAEMON_FILE"
KEEPALIVE_S = 5.0
"""How often the daemon writes a comment on an idle job stream."""
STALE_STREAM_S = 3 * KEEPALIVE_S
"""A job stream silent this long means the daemon is gone."""
CONNECT_TIMEOUT_S = 5.0
CANCELLED_ERROR = {"code": -32800, "message": "the client cancelled the call"}
"""What a run reports when the client's call ended without an answer (cancelled: the report still ends it)."""


def daemon_file() -> Path:
    """Where the daemon writes its URL and token (``$FORETHOUGHT_DAEMON_FILE``; else under
    ``$XDG_RUNTIME_DIR/forethought``, else ``~/.cache/forethought``)."""
    explicit = os.environ.get(DAEMON_FILE_ENV)
    if explicit:
        return Path(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "forethought" / "daemon.json"


def read_daemon_file(path: Path | None = None) -> tuple[str, str]:
    """The daemon's URL and token from its file; ``OSError`` or ``ValueError`` when there is none usable."""
    data = json.loads((path or daemon_file()).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("the daemon file is not a JSON object")
    url, token = data.get("url"), data.get("token")
    if not isinstance(url, str) or not isinstance(token, str) or not token:
        raise ValueError("the daemon file has no url and token")
    return url, token


@dataclass(frozen=True, slots=True)
class LinkAnswer:
    """An MCP server's answer to one ``tools/call``: exactly one of ``result`` and ``error`` (JSON objects)."""

    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None

    @property
    def servable(self) -> bool:
        """Whether an early run that got this answer may stand in for the client's call: a final tool result
        that reports no error (an error is never served from a guess)."""
        if self.result is None or not isinstance(self.result.get("content", []), list):
            return False
        return not self.result.get("isError") and self.result.get("resultType", "complete") == "complete"

    def to_json(self) -> dict[str, Any]:
        return {"result": dict(self.result)} if self.result is not None else {"error": dict(self.error or {})}

    @classmethod
    def from_json(cls, data: Any) -> LinkAnswer:
        """The answer in a link message; ``ValueError`` for anything but exactly one JSON object."""
        if not isinstance(data, Mapping):
            raise ValueError("an answer must be a JSON object")
        result, error = data.get("result"), data.get("error")
        if (result is None) == (error is None) or not isinstance(result if result is not None else error, Mapping):
            raise ValueError("an answer holds exactly one of 'result' and 'error', an object")
        return cls(result=result, error=error)


@dataclass(frozen=True, slots=True)
class LinkResult:
    """How a client's call was answered through the link: the answer, and whether it was the daemon's early
    result (``hit``) rather than the client's own request sent upstream."""

    answer: LinkAnswer
    hit: bool = False


UpstreamCall = Callable[[str, Mapping[str, Any]], Awaitable[LinkAnswer]]
"""Sends ``tools/call`` of a tool with arguments upstream under the proxy's own id; returns the answer."""


class DaemonLink:
    """One proxy session's link to the daemon (see the module docstring)."""

    def __init__(self, url: str, token: str, upstream: UpstreamCall, *, client: httpx2.AsyncClient | None = None
                 ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._upstream = upstream
        self._http = client or httpx2.AsyncClient(timeout=httpx2.Timeout(None, connect=CONNECT_TIMEOUT_S))
        self._own_http = client is None
        self.shim: str | None = None
        self._jobs: dict[str, asyncio.Task[None]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._reports: set[asyncio.Task[None]] = set()
        """Reports of runs whose call ended without an answer (sent in the background)."""
        self._gone = asyncio.Event()
        self.gone_reason: str | None = None
        self.hits = self.runs = self.jobs = 0

    @property
    def linked(self) -> bool:
        """Whether calls are offered to the daemon (registered, and the daemon not gone)."""
        return self.shim is not None and not self._gone.is_set()

    # --- registration ---------------------------------------------------------------------------------

    async def register(self, names: Sequence[str], tools: Sequence[Mapping[str, Any]],
                       server_info: Mapping[str, Any] | None = None) -> bool:
        """Register the server (``names``: its configuration key first, then the name it gives itself) and
        its tools, and start reading jobs. ``False`` (and one warning) when the daemon cannot be reached."""
        body = {"names": [n for n in names if n], "tools": list(tools), "server_info": dict(server_info or {}),
                "pid": os.getpid()}
        if self.shim is not None:
            body["shim"] = self.shim
        try:
            answer = await self._post("register", body)
        except _LinkError as exc:
            self._lost(str(exc))
            return False
        shim = answer.get("shim") if isinstance(answer, Mapping) else None
        if not isinstance(shim, str):
            self._lost("the daemon's answer to the registration has no shim id")
            return False
        self.shim = shim
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_jobs())
        return True

    async def tools_changed(self, tools: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
        """The server's tool list changed: register it again (same shim)."""
        if self.linked:
            await self.register(names, tools)

    # --- the client's calls ---------------------------------------------------------------------------

    async def call(self, name: str, arguments: Mapping[str, Any],
                   forward: Callable[[], Awaitable[LinkAnswer]]) -> LinkResult:
        """Answer one client ``tools/call``: the daemon's early result, or ``forward()`` (the client's own
        request sent upstream verbatim), reported to the daemon when it has ended."""
        if not self.linked:
            return LinkResult(await forward())
        try:
            claim = await self._until_gone(self._post("claim", {"shim": self.shim, "name": name,
                                                                "arguments": dict(arguments)}),
                                           late=self._claim_abandoned)
        except _LinkError as exc:
            self._lost(str(exc))
            return LinkResult(await forward())
        kind = claim.get("kind") if isinstance(claim, Mapping) else None
        if kind == "hit":
            try:
                answer = LinkAnswer.from_json(claim.get("answer"))
            except ValueError as exc:
                self._lost(f"the daemon answered a claim with {exc}")
                return LinkResult(await forward())
            self.hits += 1
            return LinkResult(answer, hit=True)
        run = claim.get("run") if isinstance(claim, Mapping) else None
        if kind != "run" or not isinstance(run, str):
            self._lost("the daemon answered a claim with neither a hit nor a run")
            return LinkResult(await forward())
        self.runs += 1
        try:
            answer = await forward()
        except BaseException:  # cancelled (or failed): the run still ends, with no answer to serve
            self._report_later(run)
            raise
        with contextlib.suppress(_LinkError):  # a daemon gone meanwhile learns nothing more; the call is done
            await self._until_gone(self._post("done", {"shim": self.shim, "run": run, **answer.to_json()}))
        return LinkResult(answer)

    # --- jobs -----------------------------------------------------------------------------------------

    async def _read_jobs(self) -> None:
        try:
            async with self._http.stream("GET", f"{self.url}{LINK_PREFIX}/jobs", params={"shim": self.shim or ""},
                                         headers={TOKEN_HEADER: self._token}) as response:
                if response.status_code != 200:
                    raise _LinkError(f"the daemon refused the job stream (HTTP {response.status_code})")
                decoder = SSEDecoder()
                chunks = response.aiter_raw().__aiter__()
                while True:
                    chunk = await asyncio.wait_for(chunks.__anext__(), STALE_STREAM_S)
                    for event in decoder.feed(chunk):
                        self._job(json.loads(event.data))
        except StopAsyncIteration:
            self._lost("the daemon ended the job stream")
        except TimeoutError:
            self._lost(f"the daemon's job stream was silent for {STALE_STREAM_S:g} s")
        except (httpx2.HTTPError, _LinkError, ValueError, OSError) as exc:
            self._lost(str(exc) if isinstance(exc, _LinkError) else f"{type(exc).__name__} on the job stream")
        except asyncio.CancelledError:
            raise

    def _job(self, message: Any) -> None:
        if not isinstance(message, Mapping):
            return
        cancel = message.get("cancel")
        if isinstance(cancel, str):
            task = self._jobs.pop(cancel, None)
            if task is not None:
                task.cancel()
            return
        job, name, arguments = message.get("job"), message.get("name"), message.get("arguments")
        if isinstance(job, str) and isinstance(name, str) and isinstance(arguments, Mapping):
            self.jobs += 1
            task = asyncio.create_task(self._run_job(job, name, arguments))
            self._jobs[job] = task
            task.add_done_callback(lambda _: self._jobs.pop(job, None))

    async def _run_job(self, job: str, name: str, arguments: Mapping[str, Any]) -> None:
        try:
            answer = await self._upstream(name, arguments)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the upstream is gone, say: the guess is simply not served
            answer = LinkAnswer(error={"code": -32000, "message": f"the early run failed: {type(exc).__name__}"})
        with contextlib.suppress(_LinkError):
            await self._post("result", {"shim": self.shim, "job": job, **answer.to_json()})

    # --- plumbing -------------------------------------------------------------------------------------

    async def _until_gone(self, request: Awaitable[Any], late: Callable[[Any], None] | None = None) -> Any:
        """``request``'s answer, or :class:`_LinkError` as soon as the daemon is known to be gone. A cancelled
        wait leaves the request going; ``late`` then gets its answer when it comes."""
        task = asyncio.ensure_future(request)
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if late is not None:
                task.add_done_callback(lambda t: late(t.result()) if not t.cancelled() and t.exception() is None
                                       else None)
            raise
        finally:
            gone.cancel()
        if not task.done():
            task.cancel()
            raise _LinkError(self.gone_reason or "the daemon is gone")
        return task.result()

    async def _post(self, what: str, body: Mapping[str, Any]) -> Any:
        try:
            response = await self._http.post(f"{self.url}{LINK_PREFIX}/{what}", json=body,
                                             headers={TOKEN_HEADER: self._token})
        except httpx2.HTTPError as exc:
            raise _LinkError(f"cannot reach the daemon at {self.url} ({type(exc).__name__})") from None
        if response.status_code == 204:
            return None
        if response.status_code != 200:
            raise _LinkError(f"the daemon answered {what} with HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise _LinkError(f"the daemon's answer to {what} is not JSON") from None

    def _claim_abandoned(self, claim: Any) -> None:
        """The answer to a claim whose call was cancelled meanwhile: a run is reported ended at once (the
        client's request was never sent)."""
        run = claim.get("run") if isinstance(claim, Mapping) and claim.get("kind") == "run" else None
        if isinstance(run, str):
            self._report_later(run)

    def _report_later(self, run: str) -> None:
        """Report ``run`` ended without an answer (its call was cancelled), in the background: the daemon ends
        its write then, rather than when the shim leaves."""
        if self._gone.is_set():
            return

        async def report() -> None:
            with contextlib.suppress(_LinkError):
                await self._post("done", {"shim": self.shim, "run": run, "error": dict(CANCELLED_ERROR)})

        task = asyncio.get_running_loop().create_task(report())
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    def _lost(self, reason: str) -> None:
        if self._gone.is_set():
            return
        self.gone_reason = reason
        self._gone.set()
        log.warning("forethought mcp-proxy: the daemon link is down (%s); going on as a plain proxy", reason)
        for task in list(self._jobs.values()):
            task.cancel()
        reader = self._reader
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()  # the stream closes: the daemon drops this shim and ends what it waits for from it

    async def aclose(self) -> None:
        """Stop reading jobs and close the connection (the daemon then drops the shim)."""
        if self._reports:  # the reports of cancelled calls go first (each is one short request)
            await asyncio.wait(set(self._reports), timeout=CONNECT_TIMEOUT_S)
            for report in list(self._reports):
                report.cancel()
        self._gone.set()
        for task in [*self._jobs.values(), *([self._reader] if self._reader is not None else [])]:
            task.cancel()
        tasks = [*self._jobs.values(), *([self._reader] if self._reader is not None else [])]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._own_http:
            await self._http.aclose()


class _LinkError(Exception):
    """The daemon could not be reached or answered something unusable."""

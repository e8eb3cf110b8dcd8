"""The link API: the HTTP routes through which shims register, take jobs, claim calls and report them.

Every route needs the daemon's token in :data:`~forethought.mcp.daemon_link.TOKEN_HEADER` (401 without it,
403 with another), and a ``Host`` of the loopback interface (a web page that resolved some name to
127.0.0.1 cannot reach it: 403). Bodies are JSON objects of at most :data:`MAX_BODY` bytes; anything else
answers 400 with a message naming what is wrong, and changes nothing. The protocol is described in
:mod:`forethought.mcp.daemon_link`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forethought.daemon.claims import ClaimDesk
from forethought.daemon.shims import Shim, Shims
from forethought.daemon.token_file import token_matches
from forethought.mcp.daemon_link import KEEPALIVE_S, LINK_PREFIX, TOKEN_HEADER, LinkAnswer
from forethought.serve.http import EventStream, StreamChunks, read_capped

__all__ = ["LinkApi"]

MAX_BODY = 8 << 20
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class LinkApi:
    """The link routes of one daemon (``status`` is a callable giving the daemon's status as JSON)."""

    def __init__(self, token: str, shims: Shims, desk: ClaimDesk, status: Callable[[], Mapping[str, Any]],
                 keepalive_s: float = KEEPALIVE_S) -> None:
        self._token = token
        self._shims = shims
        self._desk = desk
        self._status = status
        self._keepalive_s = keepalive_s

    def routes(self) -> list[Route]:
        def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
            async def endpoint(request: Request) -> Response:
                try:
                    self._check(request)
                    return await handler(request)
                except _Refused as exc:
                    return JSONResponse({"error": str(exc)}, status_code=exc.status)

            return endpoint

        return [Route(f"{LINK_PREFIX}/register", guarded(self._register), methods=["POST"]),
                Route(f"{LINK_PREFIX}/jobs", guarded(self._jobs), methods=["GET"]),
                Route(f"{LINK_PREFIX}/result", guarded(self._result), methods=["POST"]),
                Route(f"{LINK_PREFIX}/claim", guarded(self._claim), methods=["POST"]),
                Route(f"{LINK_PREFIX}/done", guarded(self._done), methods=["POST"]),
                Route(f"{LINK_PREFIX}/status", guarded(self._status_route), methods=["GET"])]

    def _check(self, request: Request) -> None:
        host = (request.headers.get("host") or "").lower()
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if name not in _LOOPBACK_HOSTS:
            raise _Refused(403, "the link API answers requests to the loopback address only")
        given = request.headers.get(TOKEN_HEADER)
        if given is None:
            raise _Refused(401, f"the link API needs the daemon's token in {TOKEN_HEADER}")
        if not token_matches(given, self._token):
            raise _Refused(403, "wrong token")

    async def _body(self, request: Request) -> dict[str, Any]:
        raw = await read_capped(request, MAX_BODY)
        if raw is None:
            raise _Refused(413, f"body over {MAX_BODY} bytes")
        try:
            body = json.loads(raw)
        except ValueError:
            raise _Refused(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise _Refused(400, "the body must be a JSON object")
        return body

    def _shim(self, body: Mapping[str, Any]) -> Shim:
        shim_id = body.get("shim")
        shim = self._shims.get(shim_id) if isinstance(shim_id, str) else None
        if shim is None:
            raise _Refused(404, "no such shim (register first)")
        return shim

    @staticmethod
    def _answer(body: Mapping[str, Any]) -> LinkAnswer:
        try:
            return LinkAnswer.from_json({k: body[k] for k in ("result", "error") if k in body})
        except ValueError as exc:
            raise _Refused(400, str(exc)) from None

    # --- routes ---------------------------------------------------------------------------------------

    async def _register(self, request: Request) -> Response:
        body = await self._body(request)
        names, tools = body.get("names", []), body.get("tools", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _Refused(400, "'names' must be a list of strings")
        if not isinstance(tools, list):
            raise _Refused(400, "'tools' must be the server's tools/list entries")
        info = body.get("server_info")
        own = info.get("name") if isinstance(info, Mapping) else None
        if isinstance(own, str) and own:
            names = [*names, own]
        shim_id = body.get("shim") if isinstance(body.get("shim"), str) else None
        shim = self._shims.register(names, tools, shim_id)
        return JSONResponse({"shim": shim.id, "names": list(shim.names), "tools": len(shim.tools)})

    async def _jobs(self, request: Request) -> Response:
        shim = self._shim({"shim": request.query_params.get("shim")})
        self._shims.streaming(shim)
        return EventStream(self._job_stream(shim))

    async def _job_stream(self, shim: Shim) -> StreamChunks:
        try:
            yield b": linked\n\n"
            while shim.gone is None:
                try:
                    job = await asyncio.wait_for(shim.jobs.get(), self._keepalive_s)
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                yield b"data: " + json.dumps(job).encode() + b"\n\n"
        finally:
            self._shims.drop(shim.id, "its job stream closed")
            self._desk.shim_gone(shim.id)

    async def _result(self, request: Request) -> Response:
        body = await self._body(request)
        shim = self._shim(body)
        job = body.get("job")
        if not isinstance(job, str):
            raise _Refused(400, "'job' must name a job")
        shim.answered(job, self._answer(body))  # a job no longer waited for is dropped
        return Response(status_code=204)

    async def _claim(self, request: Request) -> Response:
        body = await self._body(request)
        shim = self._shim(body)
        name, arguments = body.get("name"), body.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise _Refused(400, "a claim needs 'name' (a string) and 'arguments' (an object)")
        return JSONResponse(await self._desk.claim(shim, name, arguments))

    async def _done(self, request: Request) -> Response:
        body = await self._body(request)
        shim = self._shim(body)
        run = body.get("run")
        if not isinstance(run, str):
            raise _Refused(400, "'run' must name a run")
        if not await self._desk.done(shim, run, self._answer(body)):
            raise _Refused(404, "no such run")
        return Response(status_code=204)

    async def _status_route(self, request: Request) -> Response:
        return JSONResponse(dict(self._status()))

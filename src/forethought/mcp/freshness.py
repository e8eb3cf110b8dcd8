"""When a speculated result may still be served: the runtime validator each upstream tool gets.

The runtime calls a tool's validator when a speculation starts and again when a call claims it; a changed
token makes the speculation stale (the call then goes upstream). The proxy's token has two parts: the
:mod:`~forethought.mcp.writeclock` reading (a write through any proxy sharing the clock changes it), and,
where the policy names a validator for the tool (:class:`~forethought.mcp.effects.ValidatorSpec`), the
result of that read-only call on the same server, sent under the proxy's own request id. A validator call
that fails, errors or does not answer in time makes the speculation unservable, never a client's call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp_types import JSONRPCRequest

from forethought._core.calls import ToolCall
from forethought.mcp.effects import ValidatorSpec
from forethought.mcp.errors import McpProxyError
from forethought.mcp.upstream import UpstreamLink
from forethought.mcp.writeclock import WriteClock

Token = tuple[int, str | None]
PAYLOAD = "payload"
"""The one argument of a proxy tool: the call's arguments as compact, key-sorted JSON."""


class ValidatorFailed(McpProxyError):
    """A validator call got an error or a non-final result: the speculation it guards is not served."""


def freshness_validator(link: UpstreamLink, clock: WriteClock, spec: ValidatorSpec | None,
                        schema: Mapping[str, Any], envelope: Callable[[], Mapping[str, Any]]
                        ) -> Callable[[ToolCall], Awaitable[Token]]:
    """The validator of one tool: the clock's reading and (``spec``) the named validator's result."""

    async def validate(call: ToolCall) -> Token:
        reading = clock.reading()
        if spec is None:
            return reading, None
        payload = call.arguments.get(PAYLOAD)
        arguments = json.loads(payload) if isinstance(payload, str) else {}
        params: dict[str, Any] = {"name": spec.tool, "arguments": spec.arguments_for(arguments, schema)}
        meta = envelope()
        if meta:
            params["_meta"] = dict(meta)
        request = JSONRPCRequest(jsonrpc="2.0", id=link.new_id(), method="tools/call", params=params)
        answer = await link.request(request, validator=True)
        if not answer.servable or answer.result is None:
            raise ValidatorFailed(f"validator {spec.tool} got an error or a non-final result")
        return reading, json.dumps(answer.result, sort_keys=True, default=str)

    return validate

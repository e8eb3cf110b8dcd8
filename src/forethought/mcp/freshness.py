"""The validator a policy names for a tool: a read of the same server whose answer must not change between a
guess's start and its claim.

The core calls a tool's validator when a speculation starts and again when a call claims it; a different
token makes the speculation stale (the call then goes upstream). Writes through this proxy or any proxy
sharing its store are the core's write clock's business (:mod:`~forethought.mcp.sharedclock`); a validator
covers changes no proxy sees, such as a file edited in the user's editor. Where the policy names one
(:class:`~forethought._core.policy.ValidatorSpec`), the token is that read-only call's result, sent under
the proxy's own request id. A validator call that fails, errors or does not answer in time makes the guess
unservable, never a client's call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp_types import JSONRPCRequest

from forethought._core.calls import ToolCall
from forethought._core.policy import ValidatorSpec
from forethought.mcp.errors import McpProxyError
from forethought.mcp.upstream import Kind, UpstreamLink


class ValidatorFailed(McpProxyError):
    """A validator call got an error or a non-final result: the speculation it guards is not served."""


def named_validator(link: UpstreamLink, spec: ValidatorSpec, schema: Mapping[str, Any],
                    envelope: Callable[[], Mapping[str, Any]]) -> Callable[[ToolCall], Awaitable[str]]:
    """The validator of one tool: the result of the read ``spec`` names, for the guessed call's arguments
    (``schema``: the validator tool's input schema, which names the arguments copied by default)."""

    async def validate(call: ToolCall) -> str:
        params: dict[str, Any] = {"name": spec.tool, "arguments": spec.arguments_for(call.arguments, schema)}
        meta = envelope()
        if meta:
            params["_meta"] = dict(meta)
        request = JSONRPCRequest(jsonrpc="2.0", id=link.new_id(), method="tools/call", params=params)
        answer = await link.request(request, Kind.VALIDATOR, tool=call.name)
        if not answer.servable or answer.result is None:
            raise ValidatorFailed(f"validator {spec.tool} got an error or a non-final result")
        return json.dumps(answer.result, sort_keys=True, default=str)

    return validate

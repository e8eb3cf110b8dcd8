"""Which headers cross the daemon, in each direction, and which of them carry credentials.

The daemon is a pass-through: a request goes upstream with the client's own headers (its credentials
included: ``authorization``, ``x-api-key``, and ``anthropic-beta`` / ``anthropic-version``, which Claude
Code's gateway requirements name), and the client gets the upstream's status, headers and body. Only what
belongs to one HTTP hop is dropped (RFC 9110 section 7.6.1: ``connection`` and the headers it names,
``keep-alive``, ``transfer-encoding``, ``te``, ``trailer``, ``upgrade``, ``proxy-*``), plus, on the way up,
``host`` and ``content-length`` (set for the new hop) and, on the way down, ``date`` and ``server`` (the
daemon's HTTP server writes its own). Upstream requests ask for an identity encoding so that the daemon
can read the stream it relays; the bytes relayed are still exactly the ones the upstream sent.

Credentials exist in the daemon only as these headers of a request in flight (and, for a speculator
model's samples, of the step that request began): they are never logged, stored, counted or shown.
:func:`redacted` is the only way a header set is ever rendered (errors, ``doctor``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["CREDENTIAL_HEADERS", "redacted", "request_headers", "response_headers"]

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"})
_DROPPED_REQUEST = HOP_BY_HOP | {"host", "content-length", "accept-encoding"}
_DROPPED_RESPONSE = HOP_BY_HOP | {"date", "server"}  # the daemon's own server sets these two
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "openai-organization", "openai-project",
                                "cookie", "x-goog-api-key", "proxy-authorization"})
"""Headers that carry (or identify) the user's credentials: forwarded, never rendered."""
IDENTITY = "identity"


def _connection_names(headers: Iterable[tuple[str, str]]) -> set[str]:
    named: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            named.update(part.strip().lower() for part in value.split(",") if part.strip())
    return named


def request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The client's request headers as they go upstream (hop headers dropped, identity encoding asked)."""
    pairs = list(headers)
    dropped = _DROPPED_REQUEST | _connection_names(pairs)
    out = [(name, value) for name, value in pairs if name.lower() not in dropped]
    out.append(("accept-encoding", IDENTITY))
    return out


def response_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The upstream's response headers as they go to the client (hop headers dropped)."""
    pairs = list(headers)
    dropped = _DROPPED_RESPONSE | _connection_names(pairs)
    return [(name, value) for name, value in pairs if name.lower() not in dropped]


def redacted(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers safe to show: every credential's value replaced by ``"<redacted>"``."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {name.lower(): ("<redacted>" if name.lower() in CREDENTIAL_HEADERS else value) for name, value in pairs}

"""The link token: a random secret in a file only the user can read, so only the user's shims can link.

The daemon draws 32 random bytes at start and writes ``{"url", "token", "pid"}`` to
:func:`~forethought.mcp.daemon_link.daemon_file` (a directory of mode 0700, the file of mode 0600, written
to a temporary file and renamed into place, so no reader ever sees half of it or a file others can read).
A shim reads it to find the daemon. At exit the daemon removes the file if it still holds its own token (a
newer daemon's file is left alone). :func:`token_matches` compares in constant time.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path

__all__ = ["DaemonTokenFile", "new_token", "token_matches"]

TOKEN_BYTES = 32


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_matches(given: str | None, expected: str) -> bool:
    """Whether ``given`` is the token (constant time in its content)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


class DaemonTokenFile:
    """The file a running daemon announces itself in."""

    def __init__(self, path: Path, url: str, token: str) -> None:
        self.path = path
        self.url = url
        self.token = token

    def write(self) -> None:
        """Write the file atomically, readable by the user only."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(self.path.parent, 0o700)
        data = json.dumps({"url": self.url, "token": self.token, "pid": os.getpid()})
        fd, temp = tempfile.mkstemp(prefix=".daemon-", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(data)
            os.replace(temp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def remove(self) -> None:
        """Remove the file if it is still this daemon's."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and token_matches(data.get("token"), self.token):
            with contextlib.suppress(OSError):
                self.path.unlink()

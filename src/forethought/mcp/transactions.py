"""One ``BEGIN IMMEDIATE`` transaction on a store's SQLite connection: the proxy's tables are shared by every
proxy process on the file, so a writer takes the write lock first and rolls back on any error."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """Run the block in one ``BEGIN IMMEDIATE`` transaction on ``conn`` (autocommit mode): committed when it
    ends, rolled back when it raises (anything, cancellation included)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")

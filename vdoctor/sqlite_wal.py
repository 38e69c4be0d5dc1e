"""SQLite files that several processes open at once: WAL mode, and telling "another connection holds it" apart.

The embedded store (``stores/sqlite.py``) and the query vector file (``embedders/query_file.py``) both use it.
"""

from __future__ import annotations

import sqlite3
import time


def is_busy(error: sqlite3.Error) -> bool:
    """Whether SQLite refused because another connection holds the file ("database is locked")."""
    return isinstance(error, sqlite3.OperationalError) and error.sqlite_errorcode & 0xFF in (
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
    )


def enable_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Put the file in WAL mode, waiting out other connections that open it at the same time.

    Switching the journal mode needs the file to itself, and SQLite answers
    "database is locked" at once, without its busy handler, while another
    connection holds it (e.g. the other subtask's store migrating a new file:
    37 of 200 two-thread opens of a new file failed that way). So it is
    retried here, for up to ``timeout_s`` (the busy timeout of every other statement).
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if not is_busy(e) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)

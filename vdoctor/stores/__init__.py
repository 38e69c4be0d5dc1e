"""Long-term memory (L3) backends, chosen by URL scheme in one closed registry."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs

from vdoctor.errors import ConfigError, StoreError, UnknownStoreScheme
from vdoctor.registry import Registry
from vdoctor.stores.base import MemoryStore, Scored, SimilarQuery
from vdoctor.url_credentials import redact_url, url_scheme

SQLITE_FILE_PREFIX = "sqlite:///"
# SQLAlchemy's URL of a SQLite database in memory, gone when its process ends.
SQLITE_IN_MEMORY = "sqlite://"


class StoreOpener(Protocol):
    """Opens one backend from its URL; ``read_only`` opens it for reads only, as far as the backend allows."""

    def __call__(self, url: str, read_only: bool = False) -> MemoryStore: ...


def sqlite_file(url: str) -> str | None:
    """The file a ``sqlite:///path`` URL names; None for other URLs and for ``sqlite://`` (a database in memory).

    Any other sqlite URL names no file and is a ``ConfigError``: ``sqlite://demo.db`` (a host, no path),
    ``sqlite:demo.db``, ``sqlite:/abs/path``, ``sqlite:///`` and a URL with white space around it or its
    path were read as a database in memory, so a command ran on an empty store and its writes were lost.
    """
    if url_scheme(url) != "sqlite":
        return None
    rest = url.partition("?")[0]
    if rest.lower() == SQLITE_IN_MEMORY:
        return None
    head, path = rest[: len(SQLITE_FILE_PREFIX)], rest[len(SQLITE_FILE_PREFIX) :]
    if head.lower() != SQLITE_FILE_PREFIX:
        path = ""
    if not path or path != path.strip():
        raise ConfigError(
            f"the sqlite URL {redact_url(rest)!r} names no file: write sqlite:///relative/path or "
            "sqlite:////absolute/path (memory:// is a throw-away store in memory)"
        )
    return path


def _open_sqlite(url: str, read_only: bool = False) -> MemoryStore:
    from vdoctor.stores.sqlite import SqliteStore

    # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy reads them;
    # one option, ?synchronous=normal|full (how commits wait for the disk).
    rest, _, query = url.partition("?")
    path = sqlite_file(url) or ""
    options = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(options) - {"synchronous"})
    if unknown:
        raise StoreError(
            f"sqlite store URL {rest}: unknown option {', '.join(unknown)} (the one option is synchronous)"
        )
    synchronous = options.get("synchronous", ["normal"])[-1].lower()
    return SqliteStore(path or ":memory:", read_only=read_only, synchronous=synchronous)


def _open_memory(url: str, read_only: bool = False) -> MemoryStore:
    from vdoctor.stores.memory import InMemoryStore

    # A new, empty store each time: there is nothing a reader could change.
    return InMemoryStore()


def _open_mysql(url: str, read_only: bool = False) -> MemoryStore:
    from vdoctor.stores.mysql import open_mysql

    return open_mysql(url, read_only=read_only)


def _open_doris(url: str, read_only: bool = False) -> MemoryStore:
    from vdoctor.stores.doris import open_doris

    return open_doris(url, read_only=read_only)


def _open_mem0(url: str, read_only: bool = False) -> MemoryStore:
    from vdoctor.stores.mem0 import open_mem0

    return open_mem0(url, read_only=read_only)


STORES: Registry[StoreOpener] = Registry(
    "memory URL scheme",
    {"sqlite": _open_sqlite, "memory": _open_memory, "mysql": _open_mysql, "doris": _open_doris, "mem0": _open_mem0},
    error=UnknownStoreScheme,
    valid_label="valid schemes",
    sort_names=True,
)


def missing_file(url: str) -> str | None:
    """The sqlite file a URL names when it does not exist (opened, it would be created, empty); None otherwise:
    for a file that exists, a store in memory, or another backend. Long-term memory's readers and ``vdoctor
    knowledge search`` ask it."""
    path = sqlite_file(url)
    return path if path is not None and path != ":memory:" and not Path(path).is_file() else None


def _missing(url: str) -> str | None:
    """Why the sqlite file or mem0 folder a URL names is no store yet; None when it is one, and for a server's
    database (its connection says) or a store in memory (new on every open, by choice)."""
    if (absent := missing_file(url)) is not None:
        return f"no such file: {absent}"
    path = sqlite_file(url)
    if path is not None and path != ":memory:":
        return _not_memory(path)
    if url_scheme(url) == "mem0":
        from vdoctor.stores.mem0_folder import MARKER

        folder = url.partition("?")[0][len("mem0:///") :]
        if folder.strip("/") and not (Path(folder) / MARKER).is_file():
            return f"no such mem0 store: {folder} (no {MARKER})"
    return None


def _not_memory(path: str) -> str | None:
    """Why the sqlite file at ``path`` is not a long-term memory store (no ``case_memory`` table: another
    file, as the knowledge base's, where opening it would add the memory's tables); None when it is one."""
    import sqlite3
    from urllib.parse import quote

    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'case_memory'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as e:
        return f"{path} cannot be read as an SQLite database ({e})"
    return None if found else f"{path} holds no long-term memory (no case_memory table: another file?)"


def open_store(url: str, read_only: bool = False, existing: bool = False) -> MemoryStore:
    """Open the backend that the URL's scheme names; unknown schemes list the valid ones.

    ``read_only``: for readers (the memory inspector). SQLite opens the file
    read-only, MySQL/MariaDB sessions are READ ONLY, and the MySQL-protocol
    stores refuse any statement but SELECT before it is sent.

    ``existing``: a sqlite file or mem0 folder that does not exist is a ``StoreError`` instead of a new,
    empty store (a file is created with its folders): for commands that read a store or delete from it,
    where an empty one would report that the vehicle has no records, with exit 0, under a mistyped path.
    """
    if existing and (missing := _missing(url)) is not None:
        raise StoreError(f"no long-term memory store to open: {missing}")
    opener = STORES.for_url(url)
    return opener(url, read_only=True) if read_only else opener(url)


__all__ = ["STORES", "MemoryStore", "Scored", "SimilarQuery", "missing_file", "open_store", "sqlite_file"]

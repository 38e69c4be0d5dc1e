"""Long-term memory (L3) backends, chosen by URL scheme in one closed registry."""

from __future__ import annotations

from collections.abc import Callable

from vdoctor.errors import UnknownStoreScheme
from vdoctor.registry import Registry
from vdoctor.stores.base import MemoryStore, Scored, SimilarQuery


def _open_sqlite(url: str) -> MemoryStore:
    from vdoctor.stores.sqlite import SqliteStore

    # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy reads them.
    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    return SqliteStore(path or ":memory:")


def _open_memory(url: str) -> MemoryStore:
    from vdoctor.stores.memory import InMemoryStore

    return InMemoryStore()


def _open_mysql(url: str) -> MemoryStore:
    from vdoctor.stores.mysql import open_mysql

    return open_mysql(url)


def _open_doris(url: str) -> MemoryStore:
    from vdoctor.stores.doris import open_doris

    return open_doris(url)


def _open_mem0(url: str) -> MemoryStore:
    from vdoctor.stores.mem0 import open_mem0

    return open_mem0(url)


STORES: Registry[Callable[[str], MemoryStore]] = Registry(
    "memory URL scheme",
    {"sqlite": _open_sqlite, "memory": _open_memory, "mysql": _open_mysql, "doris": _open_doris, "mem0": _open_mem0},
    error=UnknownStoreScheme,
    valid_label="valid schemes",
    sort_names=True,
)


def open_store(url: str) -> MemoryStore:
    """Open the backend that the URL's scheme names; unknown schemes list the valid ones."""
    return STORES.for_url(url)(url)


__all__ = ["STORES", "MemoryStore", "Scored", "SimilarQuery", "open_store"]

"""Knowledge-store backends, chosen by URL scheme in one closed registry (``VDOCTOR_KNOWLEDGE_URL``).

- ``sqlite:///path/to/knowledge.db`` (default): embedded, no server;
- ``memory://``: a throw-away in-process store (tests, or no knowledge base).
"""

from __future__ import annotations

from collections.abc import Callable

from vdoctor.errors import UnknownStoreScheme
from vdoctor.knowledge.stores.base import Hit, KnowledgeStore
from vdoctor.registry import Registry
from vdoctor.stores import sqlite_file


def _open_sqlite(url: str) -> KnowledgeStore:
    from vdoctor.knowledge.stores.sqlite import SqliteKnowledgeStore

    return SqliteKnowledgeStore(sqlite_file(url) or ":memory:")


def _open_memory(url: str) -> KnowledgeStore:
    from vdoctor.knowledge.stores.memory import InMemoryKnowledgeStore

    return InMemoryKnowledgeStore()


STORES: Registry[Callable[[str], KnowledgeStore]] = Registry(
    "knowledge URL scheme",
    {"sqlite": _open_sqlite, "memory": _open_memory},
    error=UnknownStoreScheme,
    valid_label="valid schemes",
    sort_names=True,
)
SCHEMES = STORES.names


def open_knowledge_store(url: str) -> KnowledgeStore:
    """Open the backend the URL's scheme names; an unknown scheme lists the valid ones."""
    return STORES.for_url(url)(url)


__all__ = ["SCHEMES", "Hit", "KnowledgeStore", "open_knowledge_store"]

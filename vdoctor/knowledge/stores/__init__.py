"""Knowledge-store backends, chosen by URL scheme in one closed registry (``VDOCTOR_KNOWLEDGE_URL``).

- ``sqlite:///path/to/knowledge.db`` (default): embedded, no server;
- ``memory://``: a throw-away in-process store (tests, or no knowledge base).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from vdoctor.errors import UnknownStoreScheme
from vdoctor.knowledge.stores.base import Hit, KnowledgeStore


def _open_sqlite(url: str) -> KnowledgeStore:
    from vdoctor.knowledge.stores.sqlite import SqliteKnowledgeStore

    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    return SqliteKnowledgeStore(path or ":memory:")


def _open_memory(url: str) -> KnowledgeStore:
    from vdoctor.knowledge.stores.memory import InMemoryKnowledgeStore

    return InMemoryKnowledgeStore()


_REGISTRY: dict[str, Callable[[str], KnowledgeStore]] = {"sqlite": _open_sqlite, "memory": _open_memory}
SCHEMES = tuple(sorted(_REGISTRY))


def open_knowledge_store(url: str) -> KnowledgeStore:
    """Open the backend the URL's scheme names; an unknown scheme lists the valid ones."""
    scheme = urlsplit(url).scheme
    opener = _REGISTRY.get(scheme)
    if opener is None:
        raise UnknownStoreScheme(f"unknown knowledge URL scheme {scheme!r}; valid schemes: {', '.join(SCHEMES)}")
    return opener(url)


__all__ = ["SCHEMES", "Hit", "KnowledgeStore", "open_knowledge_store"]

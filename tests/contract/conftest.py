"""Store backends for the contract suite: one factory per backend.

Add a backend by adding an entry to ``STORE_FACTORIES``; every contract test
then runs against it too. A factory gets the test's ``tmp_path`` and returns a
fresh, empty store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vdoctor.stores import MemoryStore, open_store
from vdoctor.stores.memory import InMemoryStore

STORE_FACTORIES: dict[str, Callable[[Path], MemoryStore]] = {
    "memory": lambda tmp_path: InMemoryStore(),
    # Through the URL registry, as `--memory sqlite:////abs/path.db` would open it.
    "sqlite": lambda tmp_path: open_store(f"sqlite:///{tmp_path / 'memory.db'}"),
}


@pytest.fixture(params=list(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    backend = STORE_FACTORIES[request.param](tmp_path)
    try:
        yield backend
    finally:
        backend.close()

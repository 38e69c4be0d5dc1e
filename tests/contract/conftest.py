"""Store backends for the contract suite: one factory per backend.

Add a backend by adding an entry to ``STORE_FACTORIES``; every contract test
then runs against it too. A factory gets the test's ``tmp_path`` and the
fixture request (to reach service fixtures) and returns a fresh, empty store.

- ``mysql`` runs against a real MariaDB server started for the session
  (tests/services/mariadb.py); it fails, never skips, if the server cannot start.
- ``doris`` runs against a real Doris only when VDOCTOR_DORIS_URL is set.
- ``mem0`` runs a local, in-process Mem0 (the ``mem0`` extra, installed by
  scripts/setup.sh); it fails, never skips, if mem0ai is missing. Its folder
  is on tmpfs (/dev/shm) where the machine has one: every Mem0 add is two
  durable sqlite commits (Qdrant's storage and Mem0's history), ~30 ms each on
  a busy disk, and the suite writes 20,000 records; the suite checks what the
  store does, bench/ measures how fast. Tests that Mem0 cannot pass skip
  themselves on it, naming what Mem0 lacks (``skip_on_mem0``).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.services.doris import DORIS_ENV, DORIS_TEST_DIM, doris_configured
from vdoctor.records import MemoryRecord
from vdoctor.stores import MemoryStore, Scored, SimilarQuery, open_store
from vdoctor.stores.memory import InMemoryStore


class PaddedDoris:
    """The Doris store with the suite's short vectors zero-padded to the table's fixed dimension.

    Doris's ANN index takes vectors of exactly the DDL's ``dim``; the suite uses
    4-dimensional ones. Zero padding keeps every inner product the same; reads
    cut the padding off again. Everything else goes to the real store unchanged.
    """

    def __init__(self, inner: MemoryStore, dim: int) -> None:
        self.inner, self.dim = inner, dim
        self.lengths: dict[tuple[str, str], int] = {}

    def _pad(self, r: MemoryRecord) -> MemoryRecord:
        self.lengths[(r.vin, r.session_id)] = len(r.summary_vec)
        return r.model_copy(update={"summary_vec": r.summary_vec + [0.0] * (self.dim - len(r.summary_vec))})

    def _cut(self, r: MemoryRecord | None) -> MemoryRecord | None:
        if r is None:
            return None
        n = self.lengths.get((r.vin, r.session_id), self.dim)
        return r.model_copy(update={"summary_vec": r.summary_vec[:n]})

    def upsert(self, record: MemoryRecord) -> None:
        self.inner.upsert(self._pad(record))

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        self.inner.upsert_many([self._pad(r) for r in records])

    def _padded(self, query: SimilarQuery) -> SimilarQuery:
        vec = np.zeros(self.dim, dtype=np.float32)
        vec[: len(query.vector)] = query.vector
        return dataclasses.replace(query, vector=vec)

    def similar(self, query: SimilarQuery) -> list[Scored]:
        return [Scored(self._cut(s.record), s.score) for s in self.inner.similar(self._padded(query))]  # type: ignore[arg-type]

    def lexical(self, query: SimilarQuery) -> list[Scored]:
        return [Scored(self._cut(s.record), s.score) for s in self.inner.lexical(self._padded(query))]  # type: ignore[arg-type]

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        dense, lexical = self.inner.channels(self._padded(query), dense_k, lexical_k)  # type: ignore[attr-defined]
        return (
            [Scored(self._cut(s.record), s.score) for s in dense],  # type: ignore[arg-type]
            [Scored(self._cut(s.record), s.score) for s in lexical],  # type: ignore[arg-type]
        )

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in ("get", "own_history", "history", "by_prompt_version", "find_duplicate"):

            def cut(*args: Any) -> Any:
                out = attr(*args)
                return [self._cut(r) for r in out] if isinstance(out, list) else self._cut(out)

            return cut
        return attr


def _mem0(tmp_path: Path, request: pytest.FixtureRequest) -> MemoryStore:
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="vdoctor-mem0-", dir=shm)) if shm.is_dir() else tmp_path / "mem0"
    if folder.parent == shm:
        request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    # Through the URL registry, as `--memory mem0:////abs/dir` would open it.
    return open_store(f"mem0:///{folder}")


def _doris(request: pytest.FixtureRequest) -> MemoryStore:
    return PaddedDoris(open_store(request.getfixturevalue("doris_url")), DORIS_TEST_DIM)  # type: ignore[return-value]


STORE_FACTORIES: dict[str, Callable[[Path, pytest.FixtureRequest], MemoryStore]] = {
    "memory": lambda tmp_path, request: InMemoryStore(),
    # Through the URL registry, as `--memory sqlite:////abs/path.db` would open it.
    "sqlite": lambda tmp_path, request: open_store(f"sqlite:///{tmp_path / 'memory.db'}"),
    "mysql": lambda tmp_path, request: open_store(request.getfixturevalue("mariadb_url")),
    "doris": lambda tmp_path, request: _doris(request),
    "mem0": _mem0,
}

_PARAMS = [
    "memory",
    "sqlite",
    "mysql",
    pytest.param("doris", marks=pytest.mark.skipif(not doris_configured(), reason=f"{DORIS_ENV} not set")),
    "mem0",
]


def skip_on_mem0(store: MemoryStore, gap: str) -> None:
    """Skip the calling test on the mem0 backend, naming what Mem0 cannot do (listed in the README)."""
    from vdoctor.stores.mem0 import Mem0Store

    if isinstance(store, Mem0Store):
        pytest.skip(f"mem0 gap: {gap}")


@pytest.fixture(params=_PARAMS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    backend = STORE_FACTORIES[request.param](tmp_path, request)
    try:
        yield backend
    finally:
        backend.close()

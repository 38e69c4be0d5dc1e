"""The memory inspector over a mem0:// folder opened read-only: every page as over the reference store.

The same fleet (merges, rechecks, an overturned verdict, a superseded
milestone, a soft delete) is written into a Mem0 folder and into the
in-memory reference store; the inspector's JSON for each page must be the same
on both, and the folder is not written by serving it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from inspector.app import create_app
from inspector.security import Scrubber
from inspector.views import Inspector
from tests.unit.test_inspector_app import PAGES, fleet
from tests.unit.test_mem0_store import snapshot
from tests.unit.test_recall_explain import EMB
from vdoctor.knowledge import load_pack
from vdoctor.memory.recall import SessionRecall
from vdoctor.stores import MemoryStore, open_store
from vdoctor.stores.audit import audit_reads

pytestmark = pytest.mark.unit


def client(store: MemoryStore) -> TestClient:
    ins = Inspector(store, audit_reads(store), SessionRecall(store, EMB, load_pack()), "store")
    app = create_app(ins, None, True, Scrubber([]))
    return TestClient(app, base_url="http://127.0.0.1:8080", follow_redirects=False)  # type: ignore[arg-type]


def without_write_times(data: Any) -> Any:
    """The JSON without ``updated_at``: the wall-clock time of each write, which differs between the two stores."""
    if isinstance(data, dict):
        return {k: without_write_times(v) for k, v in data.items() if k != "updated_at"}
    if isinstance(data, list):
        return [without_write_times(v) for v in data]
    return data


def test_every_page_over_a_read_only_mem0_folder_is_the_reference_stores(tmp_path: Path) -> None:
    reference = fleet()
    url = f"mem0:///{tmp_path / 'memory'}"
    writer = open_store(url)
    try:
        fleet(writer)
    finally:
        writer.close()
    before = snapshot(tmp_path / "memory")
    store = open_store(url, read_only=True)
    try:
        ours, theirs = client(store), client(reference)
        for path in PAGES:
            assert ours.get(path).status_code == 200, path
            got, expected = ours.get("/api" + path), theirs.get("/api" + path)
            assert got.status_code == 200, (path, got.text[:300])
            assert without_write_times(got.json()) == without_write_times(expected.json()), path
    finally:
        store.close()
    assert snapshot(tmp_path / "memory") == before

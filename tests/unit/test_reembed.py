"""``memory reembed``: stale versions are re-embedded in batches, resumably, with progress; nothing else changes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.contract.test_store_contract import T0, VIN_A, VIN_B, VIN_C, rec
from vdoctor.embedders import embedder_id
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.errors import StoreError
from vdoctor.memory.reembed import ReembedReport, reembed
from vdoctor.retrieval.text import record_dense_text
from vdoctor.stores.base import SimilarQuery, StaleVersion
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit


def _store() -> InMemoryStore:
    store = InMemoryStore()
    for i, vin in enumerate([VIN_B, VIN_C, VIN_A]):
        store.upsert(rec(vin, hours=i, recheck_ok=True, alert_text=f"电池压差过大 {i}", embedder="old/4"))
    first = rec(VIN_B, hours=10, recheck_ok=True, alert_text="冷却液温度过高", embedder="")
    store.upsert(first)
    store.upsert(first.model_copy(update={"concluded_at": T0 + timedelta(days=3), "summary": "merged"}))  # archives
    return store


def test_reembed_rewrites_every_stale_version_with_the_text_a_case_is_found_by() -> None:
    store = _store()
    new = HashingEmbedder(4)
    target = embedder_id(new)
    assert store.count_stale(target) == 5  # 4 current + 1 archived
    seen: list[int] = []
    report = reembed(store, new, batch=2, progress=lambda r: seen.append(r.rewritten))
    assert (report.stale_at_start, report.rewritten, report.skipped) == (5, 5, 0)
    assert seen == [2, 4, 5]  # progress after every batch
    assert store.count_stale(target) == 0
    got = store.get(VIN_B, rec(VIN_B, hours=10).session_id)
    assert got is not None and got.embedder == target and got.summary == "merged"
    assert got.summary_vec == pytest.approx([float(x) for x in new.embed([record_dense_text(got)])[0]], abs=1e-6)
    # The store now searches the set with the new model's query vectors.
    q = SimilarQuery(VIN_A, got.series, new.embed_queries(["冷却液"])[0], 5, T0 + timedelta(days=30), embedder=target)
    assert {s.record.vin for s in store.similar(q)} == {VIN_B, VIN_C}
    assert "re-embedded 5 of 5" in report.render()


def test_reembed_is_resumable_a_stopped_run_goes_on_where_it_stopped() -> None:
    store = _store()
    new = HashingEmbedder(4)
    first = reembed(store, new, batch=2, limit=3)
    assert first.rewritten == 3 and store.count_stale(embedder_id(new)) == 2
    second = reembed(store, new, batch=2)
    assert (second.stale_at_start, second.rewritten) == (2, 2)
    assert reembed(store, new).rewritten == 0  # nothing left: a no-op


def test_reembed_gives_up_when_nothing_listed_can_be_written() -> None:
    class Busy(InMemoryStore):
        def set_vectors(self, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
            return 0  # every version changed between listing and writing

    store = Busy()
    store.upsert(rec(VIN_B, recheck_ok=True, embedder="old/4"))
    reports: list[ReembedReport] = []
    with pytest.raises(StoreError, match="3 times in a row"):
        reembed(store, HashingEmbedder(4), progress=reports.append)
    assert len(reports) == 3 and reports[-1].skipped == 3  # one report object, updated per round

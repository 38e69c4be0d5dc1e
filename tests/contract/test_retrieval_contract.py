"""The retrieval channels every store backend serves (issue 15), run over every backend.

- ``lexical``: BM25 of the query's tokens over each record's indexed text (the
  alert text as reported, codes, root cause, fix, summary), among exactly the
  records ``similar`` would consider (same series, other vehicles, verified and
  valid as of the session's time, each in its version current then);
- a search over vectors another embedder made is refused (``EmbedderMismatch``);
- re-embedding (``count_stale``, ``stale_versions``, ``set_vectors``) rewrites
  vectors of current and archived versions in place, changing nothing else.

Which record ranks first is worked out by hand from which query tokens each
record holds; BM25's exact values differ between backends (their corpus
statistics differ: README, *Hybrid retrieval*), so only orders and
memberships are compared.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from tests.contract.test_store_contract import E1, LATE, T0, VIN_A, VIN_B, VIN_C, query, rec, unit
from vdoctor.records import MemoryRecord
from vdoctor.stores import MemoryStore, SimilarQuery
from vdoctor.stores.base import EmbedderMismatch

pytestmark = pytest.mark.contract

VIN_D = "LSVAU2180N2100003"
E2 = [0.0, 1.0, 0.0, 0.0]
PACK = "电池包单体压差过大"  # battery pack cell voltage spread too high
COOLANT = "冷却液温度过高"  # coolant temperature too high


def ask(store: MemoryStore, text: str, k: int = 10, asking: str = VIN_A, **kw: Any) -> list[MemoryRecord]:
    q = query(E1, k=k, exclude_vin=asking, **kw)
    return [s.record for s in store.lexical(SimilarQuery(q.exclude_vin, q.series, q.vector, q.k, q.as_of, text=text))]


def test_lexical_finds_a_case_by_the_symptom_as_reported_in_other_words(store: MemoryStore) -> None:
    pack = rec(VIN_B, recheck_ok=True, alert_text=PACK, root_cause="weak cell group", dtc_codes=["P0A7F"])
    coolant = rec(VIN_C, recheck_ok=True, alert_text=COOLANT, root_cause="thermostat stuck", dtc_codes=["P0217"])
    store.upsert_many([pack, coolant])
    # "电芯压差大" shares 压, 差, 压差, 大 with the pack case and nothing with the coolant one.
    assert [r.vin for r in ask(store, "电芯压差大")] == [VIN_B]
    assert [r.vin for r in ask(store, "coolant too hot, thermostat")] == [VIN_C]  # by its root cause
    assert [r.vin for r in ask(store, "P0217")] == [VIN_C]  # by its code
    # A record comes back whole, with what it is found by.
    [found] = ask(store, "电芯压差大")
    assert found.alert_text == PACK and found.dtc_codes == ["P0A7F"] and found.source == ""


def test_lexical_ranks_the_record_with_more_of_the_rarer_terms_first(store: MemoryStore) -> None:
    store.upsert_many(
        [
            rec(VIN_B, recheck_ok=True, alert_text="电池压差过大 单体压差", root_cause="weak cell group"),
            rec(VIN_C, recheck_ok=True, alert_text="电池温度过高", root_cause="cooling fan failed"),
            rec(VIN_D, recheck_ok=True, alert_text="电池报警", root_cause="sensor fault"),
        ]
    )
    # All three share 电, 池, 电池; only B has 压, 差, 压差 (twice): B first, then the others.
    found = ask(store, "电池压差")
    assert found[0].vin == VIN_B and {r.vin for r in found} == {VIN_B, VIN_C, VIN_D}
    assert [r.vin for r in ask(store, "电池压差", k=1)] == [VIN_B]


def test_lexical_applies_the_same_filters_as_similar(store: MemoryStore) -> None:
    store.upsert_many(
        [
            rec(VIN_A, recheck_ok=True, alert_text=PACK),  # the asking vehicle's own
            rec(VIN_B, recheck_ok=None, alert_text=PACK),  # not verified
            rec(VIN_C, recheck_ok=True, alert_text=PACK, series="EV-B"),  # another series
            rec(VIN_D, recheck_ok=True, alert_text=PACK, valid=False),  # invalidated
        ]
    )
    assert ask(store, PACK) == []
    store.upsert(rec("LSVAU2180N2100004", hours=5, recheck_ok=True, alert_text=PACK))
    assert [r.vin for r in ask(store, PACK)] == ["LSVAU2180N2100004"]
    assert ask(store, PACK, as_of=T0 + timedelta(hours=4)) == []  # concluded after the session opened
    assert ask(store, "") == [] and ask(store, "the of and") == []  # no token, no search


def test_lexical_sees_each_record_in_its_version_current_then(store: MemoryStore) -> None:
    first = rec(VIN_B, recheck_ok=True, alert_text=PACK)
    store.upsert(first)
    # The same fault again within 30 days: a merge replaces the conclusion, the first version is kept.
    store.upsert(first.model_copy(update={"concluded_at": T0 + timedelta(days=5), "alert_text": COOLANT,
                                          "recheck_ok": None, "verified_ts": None}))  # fmt: skip
    day = T0 + timedelta(days=1)
    assert [r.alert_text for r in ask(store, "压差", as_of=day)] == [PACK]
    assert ask(store, "压差", as_of=LATE) == [] and ask(store, "冷却液", as_of=LATE) == []  # new one unverified
    store.set_recheck(VIN_B, first.session_id, True, T0 + timedelta(days=6))
    assert [r.alert_text for r in ask(store, "冷却液", as_of=LATE)] == [COOLANT]


def test_alert_text_and_embedder_round_trip(store: MemoryStore) -> None:
    r = rec(VIN_B, recheck_ok=True, alert_text="下雨后报绝缘故障 'quoted' \\\\ ;--", embedder="use-multilingual-v3/4")
    store.upsert(r)
    got = store.get(VIN_B, r.session_id)
    assert got is not None and (got.alert_text, got.embedder) == (r.alert_text, r.embedder)
    [similar] = store.similar(query(E1))
    assert (similar.record.alert_text, similar.record.embedder) == (r.alert_text, r.embedder)


def test_a_search_over_vectors_of_another_embedder_is_refused(store: MemoryStore) -> None:
    store.upsert_many([rec(VIN_B, recheck_ok=True, embedder="model-one/4")])
    q = query(E1)
    same = SimilarQuery(q.exclude_vin, q.series, q.vector, q.k, q.as_of, embedder="model-one/4")
    assert [s.record.vin for s in store.similar(same)] == [VIN_B]
    other = SimilarQuery(q.exclude_vin, q.series, q.vector, q.k, q.as_of, embedder="model-two/4")
    with pytest.raises(EmbedderMismatch, match="model-one/4.*model-two/4.*vdoctor memory reembed"):
        store.similar(other)


def test_a_search_over_vectors_of_another_dimension_is_refused(
    store: MemoryStore, request: pytest.FixtureRequest
) -> None:
    if "doris" in request.node.callspec.id:
        pytest.skip("Doris's ANN index refuses vectors of another dimension itself (the suite pads vectors to it)")
    store.upsert(rec(VIN_B, recheck_ok=True))
    with pytest.raises(EmbedderMismatch, match="dimension 4, the query one of 3"):
        store.similar(SimilarQuery(VIN_A, "EV-A", np.asarray([1.0, 0.0, 0.0], dtype=np.float32), 5, LATE))


def test_reembed_rewrites_current_and_archived_vectors_in_place(store: MemoryStore) -> None:
    first = rec(VIN_B, recheck_ok=True, alert_text=PACK, embedder="old/4")
    store.upsert(first)
    merged = first.model_copy(update={"concluded_at": T0 + timedelta(days=5), "summary": "merged case",
                                      "recheck_ok": None, "verified_ts": None})  # fmt: skip
    store.upsert(merged)  # the first version goes to the archive
    store.set_recheck(VIN_B, first.session_id, True, T0 + timedelta(days=6))
    store.upsert(rec(VIN_C, recheck_ok=True, embedder="new/4"))  # already the new model's
    assert store.count_stale("new/4") == 2
    stale = store.stale_versions("new/4", 10)
    assert sorted((v.archived, v.version_from, v.embedder) for v in stale) == [
        (False, T0 + timedelta(days=5), "old/4"),
        (True, T0, "old/4"),
    ]
    archived = next(v for v in stale if v.archived)
    assert archived.text.startswith(PACK + "\nP0A7F\n")  # what is embedded: the indexed text
    assert len(store.stale_versions("new/4", 1)) == 1
    before = store.get(VIN_B, first.session_id)
    new = {False: unit(0.0, 1.0, 0.0, 0.0), True: unit(0.0, 0.0, 1.0, 0.0)}
    assert store.set_vectors([(v, new[v.archived]) for v in stale], "new/4") == 2
    assert store.count_stale("new/4") == 0 and store.stale_versions("new/4", 10) == []
    after = store.get(VIN_B, first.session_id)
    assert after is not None and before is not None
    assert after.summary_vec == pytest.approx(new[False]) and after.embedder == "new/4"
    # Nothing else changed: same version, same event times, same content.
    skip = {"summary_vec", "embedder", "updated_at"}
    assert after.model_dump(exclude=skip) == before.model_dump(exclude=skip)
    # The archived version carries its new vector too, as of a time it held.
    q = query(unit(0.0, 0.0, 1.0, 0.0), as_of=T0 + timedelta(days=1))
    named = SimilarQuery(q.exclude_vin, q.series, q.vector, q.k, q.as_of, embedder="new/4")
    hits = {s.record.vin: s for s in store.similar(named)}
    assert hits[VIN_B].record.summary == first.summary and hits[VIN_B].score == pytest.approx(1.0, abs=1e-5)
    now = query(E2)
    now = SimilarQuery(now.exclude_vin, now.series, now.vector, now.k, now.as_of, embedder="new/4")
    assert [s.record.vin for s in store.similar(now)] == [VIN_B, VIN_C]  # the new current vector is E2


def test_a_version_rewritten_since_it_was_listed_is_left_alone(store: MemoryStore) -> None:
    r = rec(VIN_B, recheck_ok=True, embedder="old/4")
    store.upsert(r)
    [stale] = store.stale_versions("new/4", 10)
    store.upsert(r.model_copy(update={"summary": "rewritten meanwhile", "embedder": "other/4"}))
    assert store.set_vectors([(stale, E2)], "new/4") == 0
    got = store.get(VIN_B, r.session_id)
    assert got is not None and got.summary_vec == pytest.approx(E1) and got.embedder == "other/4"


def test_both_channels_asked_together_give_what_each_gives_alone(store: MemoryStore) -> None:
    # Recall asks both channels at once (``channels``); a backend that reads their winners once must still
    # give each channel's own hits, order and scores: overlapping winners, one channel's only, an archived
    # version, a case verified after the session's time.
    merged = rec(VIN_D, recheck_ok=True, alert_text=COOLANT, root_cause="thermostat stuck", summary_vec=E2)
    store.upsert_many(
        [
            rec(VIN_B, recheck_ok=True, alert_text=PACK, root_cause="weak cell group"),
            rec(VIN_C, 1, recheck_ok=True, alert_text=COOLANT, root_cause="fan failed", summary_vec=E2),
            rec(VIN_C, 2, recheck_ok=True, alert_text="电池包 压差", summary_vec=unit(1.0, 1.0, 0.0, 0.0)),
            merged,
        ]
    )
    store.upsert(merged.model_copy(update={"concluded_at": merged.concluded_at + timedelta(hours=5)}))
    store.set_recheck(VIN_B, rec(VIN_B).session_id, True, LATE + timedelta(days=1))
    for text, at in ((PACK + " 冷却液", LATE), ("电芯压差", LATE + timedelta(days=2)), ("", LATE), ("无关", LATE)):
        for dense_k, lexical_k in ((5, 5), (1, 2), (2, 0), (0, 3)):
            q = query(unit(1.0, 0.2, 0.0, 0.0), as_of=at)
            asked = SimilarQuery(q.exclude_vin, q.series, q.vector, 0, q.as_of, text=text)
            dense, lexical = store.channels(asked, dense_k, lexical_k)
            alone_dense = store.similar(dataclasses.replace(asked, k=dense_k))
            alone_lexical = store.lexical(dataclasses.replace(asked, k=lexical_k)) if text else []
            assert [(s.record, s.score) for s in dense] == [(s.record, s.score) for s in alone_dense], (text, at)
            assert [(s.record, s.score) for s in lexical] == [(s.record, s.score) for s in alone_lexical], (text, at)
    with pytest.raises(EmbedderMismatch):
        store.channels(dataclasses.replace(query(E1), text=PACK, embedder="model-two/4"), 5, 5)

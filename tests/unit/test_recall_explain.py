"""A recall explained: the same recall as the job's, and every record's fate worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vdoctor.embedders import embedder_id
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import load_pack
from vdoctor.memory.explain import NEAREST_REMOVED, Outcome, explain_recall, recall_json
from vdoctor.memory.recall import W_CODES, SessionRecall
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES
from vdoctor.stores.memory import InMemoryStore
from vdoctor.tokens import EstimatingCounter

pytestmark = pytest.mark.unit

EMB = HashingEmbedder()
T = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
ASKER = "LSVAU2180N2183294"
SYMPTOM = "battery cell voltage difference too large"


def vin(n: int) -> str:
    return f"LSVAU2180N21{n:05d}"


def rec(v: str, days: float, text: str = "", **overrides: Any) -> MemoryRecord:
    at = T + timedelta(days=days)
    summary = text or f"{at:%Y-%m-%d %H:%M} | concluded P0A7F | P2 conf 0.80; confirmed cell_voltage_diff_mv=187>=100"
    data: dict[str, Any] = {
        "vin": v,
        "session_id": f"{v}-{at:%Y%m%dT%H%M%S}",
        "series": "EV-A",
        "concluded_at": at,
        "summary": summary,
        "summary_vec": [float(x) for x in EMB.embed([summary])[0]],
        "root_cause": "weak cell group self-discharges",
        "fix_action": "balance the pack; replace the module",
        "priority": "P2",
        "dtc_codes": ["P0A7F"],
        "recheck_ok": True,
        "prompt_version": "case-summary-v3",
        "embedder": embedder_id(EMB),
    }
    data.update(overrides)
    return MemoryRecord(**data)


def fleet() -> tuple[InMemoryStore, dict[str, MemoryRecord]]:
    store = InMemoryStore()
    named = {
        # The asking vehicle's own records.
        "own_recent": rec(ASKER, -3),
        "own_future": rec(ASKER, 4),
        "own_old": rec(ASKER, -800),
        "own_scrapped": rec(
            ASKER,
            -20,
            dtc_codes=["P0AA6"],
            root_cause="insulation fault",
            valid=False,
            invalid_ts=T - timedelta(days=10),
        ),  # fmt: skip
        # Other vehicles of the series.
        "verified_late": rec(vin(1), -5, verified_ts=T + timedelta(days=2)),
        "failed": rec(vin(2), -5, recheck_ok=False),
        "pending": rec(vin(3), -5, recheck_ok=None),
        "invalidated": rec(vin(4), -5, valid=False, invalid_ts=T - timedelta(days=1)),
        "future": rec(vin(5), 3),
        "other_series": rec(vin(6), -5, series="ICE-C"),
    }
    # Verified cases a session at T may be given: the dense channel's top-50 of them, and 4 more that
    # neither channel ranks there (another fault: no word of the query, a vector farther away).
    for n in range(DENSE_CANDIDATES):
        named[f"ok{n}"] = rec(vin(100 + n), -1 - n, f"{T:%Y-%m-%d} | concluded P0A7F | case {n} " + "x" * (n % 7))
    away = [-float(x) for x in EMB.embed([f"{SYMPTOM} P0A7F"])[0]]  # pointing away from the query
    for n in range(4):
        named[f"far{n}"] = rec(vin(200 + n), -2 - n, f"{T:%Y-%m-%d} | concluded U0100 | lost communication {n}",
                               dtc_codes=["U0100"], root_cause="CAN harness chafed", fix_action="repair the harness",
                               summary_vec=away)  # fmt: skip
    for r in named.values():
        store.upsert(r)
    # A merge after T: at T the record's first version holds, which the session is given.
    merged = named["ok0"]
    again = rec(merged.vin, 6).model_copy(update={"session_id": merged.session_id, "merged_sessions": ["later"]})
    store.upsert(again)
    return store, named


@pytest.fixture
def explained() -> Any:
    store, named = fleet()
    recall = SessionRecall(store, EMB, load_pack(), budget=600, counter=EstimatingCounter())
    return explain_recall(recall, store, ASKER, "EV-A", SYMPTOM, ["P0A7F"], T), recall, named


def test_the_explanation_is_the_jobs_recall(explained: Any) -> None:
    ex, recall, _ = explained
    plain = recall.for_alert(ASKER, "EV-A", SYMPTOM, ["P0A7F"], T)
    assert recall_json(ASKER, T, ex.recall) == recall_json(ASKER, T, plain)
    out = ex.to_dict()
    assert {k: out[k] for k in ("vin", "as_of", "tokens", "own", "similar", "text")} == recall_json(ASKER, T, plain)
    chosen_similar = [(e.record.vin, e.record.session_id) for e in ex.candidates if e.outcome is Outcome.CHOSEN]
    assert sorted(chosen_similar) == sorted((r.vin, r.session_id) for r in plain.similar)
    chosen_own = [e.record.session_id for e in ex.own if e.outcome is Outcome.CHOSEN]
    assert chosen_own == [r.session_id for r in plain.own]


def test_own_history_outcomes(explained: Any) -> None:
    ex, _, named = explained
    fate = {e.record.session_id: (e.outcome, e.detail) for e in ex.own}
    assert fate[named["own_recent"].session_id][0] is Outcome.CHOSEN
    assert fate[named["own_future"].session_id][0] is Outcome.NOT_CONCLUDED
    assert fate[named["own_old"].session_id][0] is Outcome.OUTSIDE_WINDOW
    assert fate[named["own_scrapped"].session_id] == (Outcome.INVALIDATED, "invalid from 2026-11-21 00:00")
    assert len(ex.own) == 4


def test_candidates_carry_their_named_scores_and_fates(explained: Any) -> None:
    ex, _, named = explained
    # The union of both channels' top candidates of the 54 a session at T may be given.
    assert len(ex.candidates) == DENSE_CANDIDATES
    outcomes = [e.outcome for e in ex.candidates]
    # Ordered by the rerank over all candidates: the reranker's top-5 first, then the rest.
    assert set(outcomes[5:]) == {Outcome.BELOW_RERANK_TOP}
    assert set(outcomes[:5]) <= {Outcome.CHOSEN, Outcome.OVER_BUDGET} and Outcome.CHOSEN in outcomes[:5]
    reranks = [e.scores["rerank"] for e in ex.candidates]
    assert reranks == sorted(reranks, reverse=True)
    for e in ex.candidates:
        s = e.scores
        # Each channel's score, the fused one, and the rerank's code term.
        assert {"lexical.bm25", "dense.cosine", "fused", "retrieval"} <= set(s)
        assert s["fused"] == s["retrieval"] and 0.0 <= s["fused"] <= 1.0 + 1e-9
        assert s["lexical.bm25"] > 0  # every candidate shares P0A7F and cell/voltage words with the query
        assert s["rerank.codes"] == pytest.approx(W_CODES * 1.0)  # P0A7F on both sides
        assert s["rerank"] == pytest.approx(s["retrieval"] + s["rerank.codes"])
        assert e.tokens is not None and e.tokens > 0
    # Over the budget: in the reranker's top-5 but left out of the 600-token block.
    over = [e for e in ex.candidates if e.outcome is Outcome.OVER_BUDGET]
    given = [e for e in ex.candidates if e.outcome is Outcome.CHOSEN]
    assert over and len(given) + len(over) == 5 and len(given) == len(ex.recall.similar)
    # The merged record as its version of T: its first version, closed by the merge after T.
    merged = named["ok0"]
    [entry] = [e for e in ex.candidates + ex.removed.get(Outcome.BELOW_CANDIDATES, []) if e.key[0] == merged.vin]
    assert (entry.version_from, entry.version_to) == (merged.concluded_at, T + timedelta(days=6))
    assert entry.record.merged_sessions == []


def test_the_filters_that_removed_the_others(explained: Any) -> None:
    ex, _, named = explained
    assert ex.removed_counts == {
        Outcome.OWN_VEHICLE: 4,
        Outcome.NOT_CONCLUDED: 1,
        Outcome.INVALIDATED: 1,
        Outcome.NOT_VERIFIED: 3,
        Outcome.BELOW_CANDIDATES: 4,
    }
    detail = {e.record.vin: e.detail for es in ex.removed.values() for e in es}
    assert detail[vin(1)] == "verified 2026-12-03 00:00, after T"
    assert detail[vin(2)] == "recheck failed 2026-11-26 00:00"
    assert detail[vin(3)] == "recheck pending"
    assert ex.other_series == 1
    # Below both channels' top: the other fault's cases, each no nearer than the 50th dense score.
    assert {e.record.vin for e in ex.removed[Outcome.BELOW_CANDIDATES]} == {vin(200 + n) for n in range(4)}
    floor = sorted((e.scores["dense.cosine"] for e in ex.candidates), reverse=True)[DENSE_CANDIDATES - 1]
    assert all(e.scores["vector"] <= floor + 1e-5 for e in ex.removed[Outcome.BELOW_CANDIDATES])
    assert all(len(es) <= NEAREST_REMOVED for es in ex.removed.values())
    # Every version of the series, the merged record's two included.
    assert ex.scanned == 4 + 6 - 1 + DENSE_CANDIDATES + 4 + 1

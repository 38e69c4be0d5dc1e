"""Golden SQL of the event-time fleet's recalls on Doris (which cannot run here).

The diagnosis engine replays tests/fleets/event_time.py against the Doris
backend over a recording connection (no rows come back: the statements are
what is checked). Every session's recall must ask Doris for what was true at
the session's own time: the own-history reads and both ANN searches (current
and archived versions) carry the opening alert's ``ts`` in every event-time
filter, before the top-k.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.fleets import event_time as fleet
from tests.services.doris import DORIS_TEST_DIM as VECTOR_DIM
from tests.unit.test_doris_sql import AS_OF, AS_OF_ARCHIVED, RCOLS, FakeError, Recorder
from tests.unit.test_engine import Harness
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import load_pack
from vdoctor.memory.recall import OWN_HISTORY_LIMIT
from vdoctor.models.offline import OfflineModel
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES, LEXICAL_CANDIDATES
from vdoctor.retrieval.tokens import query_terms
from vdoctor.stores.doris import DorisDialect
from vdoctor.stores.sqlbase import SqlStore, parse_url

pytestmark = pytest.mark.unit

OWN = f"SELECT {RCOLS} FROM case_memory WHERE vin = %s AND concluded_at >= %s AND {AS_OF} ORDER BY"
OWN_ARCHIVED = f"SELECT {RCOLS} FROM case_history WHERE vin = %s AND concluded_at >= %s AND {AS_OF_ARCHIVED} ORDER BY"
ANN_WHERE = "WHERE series = %s AND vin <> %s AND recheck_ok = TRUE AND verified_ts <= %s AND "


def test_every_session_asks_doris_for_what_was_true_when_it_opened() -> None:
    conn = Recorder()
    store = SqlStore(parse_url("doris://root@127.0.0.1:9030/fleet", 9030), DorisDialect(), lambda: conn, (FakeError,))
    engine = DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(dim=VECTOR_DIM),
                             pack=load_pack())  # fmt: skip
    h = Harness(engine)
    sessions = 0
    for event in fleet.events():
        start = len(conn.calls)
        h.send(event)
        if event["type"] != "alert":
            continue
        sessions += 1
        opened = datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).replace(tzinfo=None)
        calls: list[tuple[str, Any]] = conn.calls[start:]
        if calls[0][0].endswith("FROM case_memory WHERE vin = %s AND session_id = %s"):
            # Whether another session's case holds the new session's id (a vehicle with no session in state).
            assert calls[0][1][0] == event["vin"]
            calls = calls[1:]
        recall = calls[:6]
        own, own_archived, ann, ann_archived, bm25, bm25_archived = recall
        window = opened - timedelta(days=730)
        # One record more than recall keeps: it leaves the opening session's own case out (``recall.own_history``).
        assert own[0].startswith(OWN) and own[1] == [event["vin"], window, *[opened] * 3, OWN_HISTORY_LIMIT + 1]
        assert own_archived[0].startswith(OWN_ARCHIVED) and own_archived[1][2:6] == [opened] * 4
        for (sql, params), table, filters, times in (
            (ann, "case_memory", AS_OF, 4),
            (ann_archived, "case_history", AS_OF_ARCHIVED, 5),
        ):
            assert "inner_product_approximate(summary_vec, [" in sql
            assert f"FROM {table} {ANN_WHERE}{filters} ORDER BY score DESC LIMIT %s" in sql
            assert params == [fleet.SERIES, event["vin"], *[opened] * times, DENSE_CANDIDATES]
        # The lexical channel: the same filters, the alert's tokens on the inverted index, BM25 score().
        terms = " ".join(query_terms(event["alert_text"]))
        for (sql, params), table, filters, times in (
            (bm25, "case_memory", AS_OF, 4),
            (bm25_archived, "case_history", AS_OF_ARCHIVED, 5),
        ):
            assert ", score() AS score FROM" in sql
            match = " AND search_tokens MATCH_ANY %s ORDER BY score DESC LIMIT %s"
            assert f"FROM {table} {ANN_WHERE}{filters}{match}" in sql
            assert params[: 2 + times] == [fleet.SERIES, event["vin"], *[opened] * times]
            assert params[-1] == LEXICAL_CANDIDATES and params[-2].startswith(terms)
    assert sessions == sum(e["type"] == "alert" for e in fleet.events())

"""Golden tests of every statement the Doris backend sends.

Doris cannot run here, so a recording connection captures the SQL text and
the bound parameters of each call and answers with canned rows. The expected
statements are written out by hand from sql/doris/ and the Doris manual
(NOTES.md): the same SQL runs against a real Doris in the contract suite when
VDOCTOR_DORIS_URL is set.
"""

from __future__ import annotations

import json
import math
import re
import struct
import traceback
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from tests.services.doris import DORIS_TEST_DIM as VECTOR_DIM
from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores import open_store
from vdoctor.stores.base import EmbedderMismatch, SimilarQuery, StaleVersion
from vdoctor.stores.doris import DorisDialect
from vdoctor.stores.sqlbase import COLUMN_LIST, SqlStore, parse_url, schema_files, split_statements, vector_literal
from vdoctor.stores.sqltypes import statement_batches

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
SID = f"{VIN}-20261101T081530"
AT = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
NAIVE_AT = datetime(2026, 11, 1, 8, 15, 30)  # DATETIME columns hold UTC without a zone
COLS = (
    "vin, session_id, series, concluded_at, summary, summary_vec, root_cause, fix_action, "
    "priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, kind, merged_sessions, source, omitted, "
    "opened_ts, verified_ts, invalid_ts, alert_text, embedder"
)
# An upsert writes the record, the tokens of its indexed text, and where its current version starts.
WCOLS = COLS + ", search_tokens, version_from"
# Recall reads leave the summary source out; archived versions have none, and keep the tokens.
RCOLS = COLS.replace(", source,", ", '' AS source,")
ARCH = COLS.replace(" source,", "") + ", search_tokens"
LATER = datetime(2026, 11, 11, 8, 15, 30, tzinfo=UTC)
NAIVE_LATER = LATER.replace(tzinfo=None)
# The event-time filters of a read as of T (every %s is T): current versions, then archived ones.
AS_OF = "version_from <= %s AND concluded_at <= %s AND (invalid_ts IS NULL OR invalid_ts > %s)"
AS_OF_ARCHIVED = AS_OF + " AND version_to > %s"
CURRENT = (
    "SELECT vin, session_id, version_from, recheck_ok, verified_ts, merged_sessions <> '[]', "
    "concluded_at FROM case_memory WHERE "
)
ARCHIVE = (
    f"INSERT INTO case_history ({ARCH}, version_from, version_to) SELECT {ARCH}, version_from, %s FROM case_memory "
    "WHERE vin = %s AND session_id = %s"
)


class FakeError(Exception):
    pass


class Recorder:
    """A DB-API connection that records (sql, params) and replays canned result sets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.results: list[list[tuple[Any, ...]]] = []

    def cursor(self) -> Recorder:
        return self

    def execute(self, sql: str, params: Any = None) -> int:
        self.calls.append((sql, None if params is None else list(params)))
        return 0

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.results.pop(0) if self.results else []

    @property
    def rowcount(self) -> int:
        return 0

    def close(self) -> None:
        pass


def vec(first: float = 1.0) -> list[float]:
    v = [0.0] * VECTOR_DIM
    v[0] = first
    return v


def record(**overrides: Any) -> MemoryRecord:
    data: dict[str, Any] = {
        "vin": VIN,
        "session_id": SID,
        "series": "EV-A",
        "concluded_at": AT,
        "summary": "2026-11-01 08:15 | P0A7F | cell_voltage_diff_mv=187",
        "summary_vec": vec(),
        "root_cause": "weak cell",
        "fix_action": "balance",
        "priority": "P2",
        "dtc_codes": ["P0A7F"],
        "recheck_ok": None,
        "prompt_version": "case-summary-v1",
        "updated_at": AT,
    }
    data.update(overrides)
    return MemoryRecord(**data)


def row_of(r: MemoryRecord) -> tuple[Any, ...]:
    """A row as Doris returns it over the MySQL protocol: arrays as text, booleans as 0/1."""
    return (
        r.vin, r.session_id, r.series, r.concluded_at.replace(tzinfo=None), r.summary,
        "[" + ", ".join(str(x) for x in r.summary_vec) + "]", r.root_cause, r.fix_action, r.priority,
        '["P0A7F"]', None if r.recheck_ok is None else int(r.recheck_ok), r.prompt_version, int(r.valid),
        r.updated_at.replace(tzinfo=None), r.kind.value, "[]", r.source, json.dumps(r.omitted), naive(r.opened_ts),
        naive(r.verified_ts), naive(r.invalid_ts), r.alert_text, r.embedder,
    )  # fmt: skip


def naive(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=None)


@pytest.fixture
def conn() -> Recorder:
    return Recorder()


@pytest.fixture
def store(conn: Recorder) -> SqlStore:
    return SqlStore(
        parse_url("doris://root:s3cret@127.0.0.1:9030/fleet", 9030), DorisDialect(), lambda: conn, (FakeError,)
    )


def test_column_list_is_the_table_order() -> None:
    assert COLUMN_LIST == COLS


def test_upsert_reads_the_current_version_then_inserts_with_the_vector_as_a_literal(
    store: SqlStore, conn: Recorder
) -> None:
    store.upsert(record(opened_ts=AT, alert_text="电池压差大", embedder="use-multilingual-v3/512"))
    literal = "[1.0," + ",".join(["0.0"] * (VECTOR_DIM - 1)) + "]"
    marks = ", ".join(["%s"] * 5 + [literal] + ["%s"] * 19)
    # The indexed text (alert text, codes, cause, fix, summary) as tokens: Chinese characters and their
    # pairs, English words and numbers lower-cased.
    tokens = "电 池 压 差 大 电池 池压 压差 差大 p0a7f weak cell balanc 2026 11 01 08 15 p0a7f cell voltag diff mv 187"
    assert conn.calls == [
        (CURRENT + "(vin = %s AND session_id = %s)", [VIN, SID]),
        (
            f"INSERT INTO case_memory ({WCOLS}) VALUES ({marks})",
            [VIN, SID, "EV-A", NAIVE_AT, "2026-11-01 08:15 | P0A7F | cell_voltage_diff_mv=187",
             "weak cell", "balance", "P2", '["P0A7F"]', None, "case-summary-v1", True, NAIVE_AT, "final", "[]", "",
             "[]", NAIVE_AT, None, None, "电池压差大", "use-multilingual-v3/512", tokens, NAIVE_AT],
        ),
    ]  # fmt: skip


def test_upsert_many_is_one_read_and_one_multi_row_insert(store: SqlStore, conn: Recorder) -> None:
    store.upsert_many([record(), record(session_id=SID + "x", summary_vec=vec(-1.0))])
    assert len(conn.calls) == 2
    assert conn.calls[0] == (
        CURRENT + "(vin = %s AND session_id = %s) OR (vin = %s AND session_id = %s)",
        [VIN, SID, VIN, SID + "x"],
    )
    sql, params = conn.calls[1]
    assert sql.startswith(f"INSERT INTO case_memory ({WCOLS}) VALUES (")
    assert sql.count("), (") == 1
    assert "[1.0,0.0," in sql and "[-1.0,0.0," in sql
    assert params is not None and len(params) == 2 * 24  # 25 columns, the vector inline


def test_a_large_upsert_is_split_into_inserts_within_the_default_packet_limit(store: SqlStore, conn: Recorder) -> None:
    # Doris's default max_allowed_packet is 16 MB, as MySQL's: 100 records with 60,000-character Chinese
    # sources are ~18 MB of values. Each INSERT stays under 8 MB; every record goes once, in order.
    source = "电池包单体压差" * 8_000 + "电池包单体"
    records = [record(session_id=f"{VIN}-20261101T08{i:04d}", source=source) for i in range(100)]
    store.upsert_many(records)
    inserts = [(sql, params) for sql, params in conn.calls if sql.startswith("INSERT INTO case_memory")]
    assert len(inserts) > 1
    for sql, params in inserts:
        size = len(sql.encode()) + sum(len(p.encode()) if isinstance(p, str) else 32 for p in params)
        assert size < 8 * 1024 * 1024
    sent = [p for _, params in inserts for p in params if isinstance(p, str) and p.startswith(f"{VIN}-2026")]
    assert sent == [r.session_id for r in records]


def test_statement_batches_bound_rows_and_bytes_and_keep_a_large_row_alone() -> None:
    rows: list[list[object]] = [["x" * 100], ["y" * 100], [b"z" * 10], ["w" * 1000], [1, None, 2.5]]
    # statement_bytes: text 2 x its UTF-8 bytes + 2, bytes 2 x + 10, anything else 32.
    assert statement_batches(rows, max_rows=2, max_bytes=10_000) == [[0, 1], [2, 3], [4]]
    assert statement_batches(rows, max_rows=10, max_bytes=500) == [[0, 1, 2], [3], [4]]  # 202 + 202 + 30; 2002 alone
    assert statement_batches([], max_rows=10) == []


def test_a_merge_archives_the_version_it_replaces_first(store: SqlStore, conn: Recorder) -> None:
    conn.results.append([(VIN, SID, NAIVE_AT, 1, NAIVE_AT, 0, NAIVE_AT)])  # verified at its conclusion
    store.upsert(record(concluded_at=LATER, merged_sessions=[SID + "b"]))
    assert len(conn.calls) == 3 and conn.calls[0][0].startswith(CURRENT)
    assert conn.calls[1] == (ARCHIVE, [NAIVE_LATER, VIN, SID])  # closed where the new version starts
    assert conn.calls[2][0].startswith(f"INSERT INTO case_memory ({WCOLS}) VALUES (")
    assert conn.calls[2][1] is not None and conn.calls[2][1][-1] == NAIVE_LATER  # version_from


def test_a_rewrite_of_the_same_version_archives_nothing(store: SqlStore, conn: Recorder) -> None:
    conn.results.append([(VIN, SID, NAIVE_LATER, 1, NAIVE_LATER, 0, NAIVE_AT)])  # a version that started later
    store.upsert(record())  # concluded before it: a re-run, rewritten in place
    assert [c[0][:22] for c in conn.calls] == [CURRENT[:22], "INSERT INTO case_memor"]
    assert conn.calls[1][1] is not None and conn.calls[1][1][-1] == NAIVE_LATER  # the version keeps its start


def test_similar_runs_the_ann_function_over_both_tables_with_the_filters_before_top_k(
    store: SqlStore, conn: Recorder
) -> None:
    current = record(vin="LSVAU2180N2100001", recheck_ok=True)
    archived = record(vin="LSVAU2180N2100002", recheck_ok=True, summary="an earlier version")
    conn.results.extend([[(*row_of(current), 0.75)], [(*row_of(archived), 0.9)]])
    q = np.zeros(VECTOR_DIM, dtype=np.float32)
    q[1] = 1.0
    found = store.similar(SimilarQuery(exclude_vin=VIN, series="EV-A", vector=q, k=20, as_of=LATER))
    literal = "[0.0,1.0," + ",".join(["0.0"] * (VECTOR_DIM - 2)) + "]"
    head = f"SELECT {RCOLS}, inner_product_approximate(summary_vec, {literal}) AS score FROM "
    where = "WHERE series = %s AND vin <> %s AND recheck_ok = TRUE AND verified_ts <= %s AND "
    assert conn.calls == [
        (f"{head}case_memory {where}{AS_OF} ORDER BY score DESC LIMIT %s", ["EV-A", VIN, *[NAIVE_LATER] * 4, 20]),
        (f"{head}case_history {where}{AS_OF_ARCHIVED} ORDER BY score DESC LIMIT %s",
         ["EV-A", VIN, *[NAIVE_LATER] * 5, 20]),
    ]  # fmt: skip
    # Merged by score; each record as the session knew it.
    assert [(s.record.vin, s.record.recheck_ok, s.score) for s in found] == [
        ("LSVAU2180N2100002", True, 0.9),
        ("LSVAU2180N2100001", True, 0.75),
    ]
    assert found[1].record.summary_vec == vec() and found[1].record.concluded_at == AT


def test_lexical_matches_the_query_tokens_on_the_inverted_index_ranked_by_bm25_score(
    store: SqlStore, conn: Recorder
) -> None:
    current = record(vin="LSVAU2180N2100001", recheck_ok=True)
    archived = record(vin="LSVAU2180N2100002", recheck_ok=True, summary="an earlier version")
    conn.results.extend([[(*row_of(current), 3.5)], [(*row_of(archived), 1.25)]])
    q = np.zeros(VECTOR_DIM, dtype=np.float32)
    query = SimilarQuery(VIN, "EV-A", q, 50, as_of=LATER, text="电芯压差 cells")
    found = store.lexical(query)
    head = f"SELECT {RCOLS}, score() AS score FROM "
    where = "WHERE series = %s AND vin <> %s AND recheck_ok = TRUE AND verified_ts <= %s AND "
    match = " AND search_tokens MATCH_ANY %s ORDER BY score DESC LIMIT %s"
    # The query's distinct tokens, space-joined: the index's analyzer splits on whitespace only.
    terms = "电 芯 压 差 电芯 芯压 压差 cell"
    assert conn.calls == [
        (f"{head}case_memory {where}{AS_OF}{match}", ["EV-A", VIN, *[NAIVE_LATER] * 4, terms, 50]),
        (f"{head}case_history {where}{AS_OF_ARCHIVED}{match}", ["EV-A", VIN, *[NAIVE_LATER] * 5, terms, 50]),
    ]
    assert [(s.record.vin, s.score) for s in found] == [("LSVAU2180N2100001", 3.5), ("LSVAU2180N2100002", 1.25)]


def test_a_query_without_tokens_asks_nothing(store: SqlStore, conn: Recorder) -> None:
    q = np.zeros(VECTOR_DIM, dtype=np.float32)
    assert store.lexical(SimilarQuery(VIN, "EV-A", q, 50, as_of=LATER, text="the, and ... !")) == []
    assert conn.calls == []


def test_similar_refuses_what_another_embedder_made(store: SqlStore, conn: Recorder) -> None:
    other = record(vin="LSVAU2180N2100001", recheck_ok=True, embedder="hash-ngram-v1/256")
    conn.results.extend([[(*row_of(other), 0.75)], []])
    q = np.zeros(VECTOR_DIM, dtype=np.float32)
    with pytest.raises(EmbedderMismatch, match="hash-ngram-v1/256, the query by use-multilingual-v3/512"):
        store.similar(SimilarQuery(VIN, "EV-A", q, 20, as_of=LATER, embedder="use-multilingual-v3/512"))


def test_reembed_lists_stale_versions_and_partially_updates_their_vectors(store: SqlStore, conn: Recorder) -> None:
    conn.results.extend(
        [[(4,)], [(1,)], [(VIN, SID, NAIVE_AT, "电池压差大", '["P0A7F"]', "weak cell", "balance", "s", "")]]
    )
    assert store.count_stale("use-multilingual-v3/512") == 5
    [stale] = store.stale_versions("use-multilingual-v3/512", 1)
    assert stale.text == "电池压差大\nP0A7F\nweak cell\nbalance\ns" and stale.version_from == AT
    assert not stale.archived and stale.embedder == ""
    archived = StaleVersion(VIN, SID, LATER, True, "t", "")
    gone = StaleVersion(VIN, SID + "x", AT, False, "t", "")  # re-written by someone else since it was listed
    conn.calls.clear()
    conn.results.extend([[(VIN, SID, NAIVE_AT, ""), (VIN, SID + "x", NAIVE_AT, "other/512")], [], [], [],
                         [(VIN, SID, NAIVE_LATER, "")]])  # fmt: skip
    rows = [(stale, [0.5, 0.5]), (gone, [0.5, 0.5]), (archived, [1.0, 0.0])]
    assert store.set_vectors(rows, "use-multilingual-v3/512") == 2
    one = "(vin = %s AND session_id = %s AND version_from = %s)"
    assert conn.calls == [
        (f"SELECT vin, session_id, version_from, embedder FROM case_memory WHERE {one} OR {one}",
         [VIN, SID, NAIVE_AT, VIN, SID + "x", NAIVE_AT]),
        ("SET enable_unique_key_partial_update = true", None),
        ("INSERT INTO case_memory (vin, session_id, summary_vec, embedder) VALUES (%s, %s, [0.5,0.5], %s)",
         [VIN, SID, "use-multilingual-v3/512"]),
        ("SET enable_unique_key_partial_update = false", None),
        (f"SELECT vin, session_id, version_from, embedder FROM case_history WHERE {one}", [VIN, SID, NAIVE_LATER]),
        ("SET enable_unique_key_partial_update = true", None),
        ("INSERT INTO case_history (vin, session_id, version_from, summary_vec, embedder) "
         "VALUES (%s, %s, %s, [1.0,0.0], %s)", [VIN, SID, NAIVE_LATER, "use-multilingual-v3/512"]),
        ("SET enable_unique_key_partial_update = false", None),
    ]  # fmt: skip


def test_retokenize_reads_in_key_order_and_partially_updates_the_versions_still_as_read(
    store: SqlStore, conn: Recorder
) -> None:
    codes = '["P0A7F"]'
    old = "电 池 压 差 大 电池 池压 压差 差大 p0a7f weak cell balance"  # what the earlier stemmer wrote
    conn.results.extend([
        [(VIN, SID, NAIVE_AT, "电池压差大", codes, "weak cell", "balance", "s", old),
         (VIN, SID + "x", NAIVE_AT, "", "[]", "", "", "old case", "old case")],  # already this tokeniser's
        [(VIN, SID, NAIVE_AT)], [], [], [],  # still as read: written
        [],  # no more current rows
        [(VIN, SID, NAIVE_LATER, "电池压差大", codes, "weak cell", "balance", "s", old)],
        [],  # replaced since it was read: left to its writer
        [],
    ])  # fmt: skip
    seen: list[tuple[int, int]] = []
    # Three versions read; one already current, one replaced after it was read: one written.
    assert store.retokenize(batch=2, progress=lambda c, r: seen.append((c, r))) == (3, 1)
    assert seen == [(2, 1), (3, 1)]
    one = "(vin = %s AND session_id = %s AND version_from = %s)"
    columns = "SELECT vin, session_id, version_from, alert_text, dtc_codes, root_cause, fix_action, summary, "
    order = "ORDER BY vin, session_id, version_from LIMIT %s"
    first = columns + "search_tokens FROM {} " + order
    # The next page starts after the last key read (never at an offset that a write meanwhile would shift).
    after = columns + ("search_tokens FROM {} WHERE vin > %s OR (vin = %s AND (session_id > %s OR "
                       "(session_id = %s AND version_from > %s))) ") + order  # fmt: skip
    fresh = "电 池 压 差 大 电池 池压 压差 差大 p0a7f weak cell balanc"
    assert conn.calls == [
        (first.format("case_memory"), [2]),
        (f"SELECT vin, session_id, version_from FROM case_memory WHERE {one}", [VIN, SID, NAIVE_AT]),
        ("SET enable_unique_key_partial_update = true", None),
        ("INSERT INTO case_memory (vin, session_id, search_tokens) VALUES (%s, %s, %s)", [VIN, SID, fresh]),
        ("SET enable_unique_key_partial_update = false", None),
        (after.format("case_memory"), [VIN, VIN, SID + "x", SID + "x", NAIVE_AT, 2]),
        (first.format("case_history"), [2]),
        (f"SELECT vin, session_id, version_from FROM case_history WHERE {one}", [VIN, SID, NAIVE_LATER]),
        (after.format("case_history"), [VIN, VIN, SID, SID, NAIVE_LATER, 2]),
    ]  # fmt: skip


def test_similar_drops_what_a_faulty_server_returns_from_after_the_session(store: SqlStore, conn: Recorder) -> None:
    future = record(vin="LSVAU2180N2100001", recheck_ok=True, verified_ts=LATER)
    conn.results.extend([[(*row_of(future), 0.75)], []])
    q = np.zeros(VECTOR_DIM, dtype=np.float32)
    assert store.similar(SimilarQuery(VIN, "EV-A", q, 20, as_of=AT)) == []


def test_a_first_recheck_reads_the_version_then_partially_updates_and_resets(store: SqlStore, conn: Recorder) -> None:
    conn.results.extend([[(VIN, SID, NAIVE_AT, None, None, 0, NAIVE_AT)], [], [], []])
    assert store.set_recheck(VIN, SID, True, LATER) is True
    assert [c[0] for c in conn.calls] == [
        CURRENT + "(vin = %s AND session_id = %s)",
        "SET enable_unique_key_partial_update = true",
        "INSERT INTO case_memory (vin, session_id, recheck_ok, verified_ts, version_from, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        "SET enable_unique_key_partial_update = false",
    ]
    params = conn.calls[2][1]
    assert params[:5] == [VIN, SID, True, NAIVE_LATER, NAIVE_AT]  # verified at its event time; same version
    assert isinstance(params[5], datetime) and params[5].tzinfo is None


def test_an_overturned_verdict_archives_the_version_first(store: SqlStore, conn: Recorder) -> None:
    conn.results.append([(VIN, SID, NAIVE_AT, 1, NAIVE_AT, 0, NAIVE_AT)])
    assert store.set_recheck(VIN, SID, False, LATER) is True
    assert conn.calls[1] == (ARCHIVE, [NAIVE_LATER, VIN, SID])
    assert conn.calls[3][1][:5] == [VIN, SID, False, NAIVE_LATER, NAIVE_LATER]  # a new version from then


def test_the_same_verdict_again_writes_nothing(store: SqlStore, conn: Recorder) -> None:
    conn.results.append([(VIN, SID, NAIVE_AT, 1, NAIVE_AT, 0, NAIVE_AT)])
    assert store.set_recheck(VIN, SID, True, LATER) is True
    assert len(conn.calls) == 1


def test_set_recheck_of_an_unknown_session_writes_nothing(store: SqlStore, conn: Recorder) -> None:
    assert store.set_recheck(VIN, SID, False, LATER) is False
    assert [c[0] for c in conn.calls] == [CURRENT + "(vin = %s AND session_id = %s)"]


def test_a_recheck_from_before_a_merged_session_concluded_writes_nothing(store: SqlStore, conn: Recorder) -> None:
    # The record took in a later session of the same fault, concluded at LATER: a verdict from before is stale.
    conn.results.append([(VIN, SID, NAIVE_LATER, None, None, 1, NAIVE_LATER)])
    assert store.set_recheck(VIN, SID, True, AT) is False
    assert len(conn.calls) == 1
    conn.results.append([(VIN, SID, NAIVE_LATER, None, None, 1, NAIVE_LATER)])
    assert store.set_recheck(VIN, SID, True, LATER) is True  # from its conclusion on, a verdict counts
    assert any(sql.startswith("INSERT INTO case_memory (vin, session_id, recheck_ok") for sql, _ in conn.calls[2:])


def test_soft_delete_partially_updates_each_live_key_from_its_event_time(store: SqlStore, conn: Recorder) -> None:
    conn.results.extend([[(SID, NAIVE_AT), (SID + "b", NAIVE_LATER)], [], [], []])
    assert store.soft_delete(VIN, AT + timedelta(days=1)) == 2
    assert [c[0] for c in conn.calls] == [
        "SELECT session_id, version_from FROM case_memory WHERE vin = %s "
        "AND (valid = TRUE OR (invalid_ts > %s AND version_from <= %s))",
        "SET enable_unique_key_partial_update = true",
        "INSERT INTO case_memory (vin, session_id, valid, invalid_ts, updated_at) "
        "VALUES (%s, %s, %s, %s, %s), (%s, %s, %s, %s, %s)",
        "SET enable_unique_key_partial_update = false",
    ]
    params = conn.calls[2][1]
    # Never before the version it ends: the second record's version started later.
    assert params[0:4] == [VIN, SID, False, NAIVE_AT + timedelta(days=1)]
    assert params[5:9] == [VIN, SID + "b", False, NAIVE_LATER]


def test_the_partial_update_setting_is_reset_even_when_the_insert_fails(conn: Recorder) -> None:
    class Failing(Recorder):
        def execute(self, sql: str, params: Any = None) -> int:
            super().execute(sql, params)
            if sql.startswith("INSERT"):
                raise FakeError("(1105, 'errCode = 2, detailMessage = too many versions')")
            return 0

    failing = Failing()
    failing.results.append([(VIN, SID, NAIVE_AT, None, None, 0, NAIVE_AT)])
    store = SqlStore(parse_url("doris://root@h:9030/fleet", 9030), DorisDialect(), lambda: failing, (FakeError,))
    with pytest.raises(StoreError, match="too many versions"):
        store.set_recheck(VIN, SID, True, LATER)
    assert failing.calls[-1][0] == "SET enable_unique_key_partial_update = false"


class Dropping(Recorder):
    """A connection the server drops at the first statement starting with ``drop_at`` (MySQL client error 2013)."""

    def __init__(self, drop_at: str) -> None:
        super().__init__()
        self.drop_at = drop_at

    def execute(self, sql: str, params: Any = None) -> int:
        super().execute(sql, params)
        if self.drop_at and sql.startswith(self.drop_at):
            self.drop_at = ""
            raise FakeError(2013, "Lost connection to MySQL server during query")
        return 0


def test_a_partial_update_cut_off_is_not_sent_again_on_a_connection_without_the_mode() -> None:
    # On a new connection the INSERT would be a full-row write: Doris's partial-update mode is per session.
    opened: list[Recorder] = []

    def connect() -> Recorder:
        conn: Recorder = Dropping("INSERT") if not opened else Recorder()
        if not opened:
            conn.results.append([(VIN, SID, NAIVE_AT, None, None, 0, NAIVE_AT)])  # the current version, read first
        opened.append(conn)
        return conn

    store = SqlStore(parse_url("doris://root@h:9030/fleet", 9030), DorisDialect(), connect, (FakeError,))
    with pytest.raises(StoreError, match="Lost connection"):
        store.set_recheck(VIN, SID, True, LATER)
    for conn in opened:
        mode = False
        for sql, _ in conn.calls:
            if sql.startswith("SET enable_unique_key_partial_update"):
                mode = sql.endswith("true")
            elif sql.startswith("INSERT"):
                assert mode, f"an INSERT sent without the partial-update mode on its connection: {sql}"
    assert [sql for sql, _ in opened[0].calls if sql.startswith("INSERT")] != []
    # The mode is set back on whichever connection the sequence ends on, and the dropped one is not reused.
    assert [sql for sql, _ in opened[1].calls] == ["SET enable_unique_key_partial_update = false"]
    assert len(opened) == 2


def test_a_statement_on_its_own_reconnects_once_when_the_connection_drops() -> None:
    opened: list[Recorder] = []

    def connect() -> Recorder:
        conn: Recorder = Dropping("SELECT") if not opened else Recorder()
        if opened:
            conn.results.append([(3,)])
        opened.append(conn)
        return conn

    store = SqlStore(parse_url("doris://root@h:9030/fleet", 9030), DorisDialect(), connect, (FakeError,))
    assert store.query("SELECT COUNT(*) FROM case_memory") == [(3,)]
    assert len(opened) == 2


def test_reads_are_plain_selects_with_bound_values(store: SqlStore, conn: Recorder) -> None:
    since = datetime(2024, 11, 1, tzinfo=UTC)
    conn.results.extend([[row_of(record())], [], [], [], [], [], [(7,)]])
    got = store.get(VIN, SID)
    assert got is not None and got.summary_vec == vec() and got.valid is True and got.recheck_ok is None
    store.own_history(VIN, since, 10, as_of=LATER)
    store.history(VIN)
    store.by_prompt_version("case-summary-v1", 50)
    store.find_duplicate(VIN, "weak cell", since)
    assert store.count() == 7
    naive = since.replace(tzinfo=None)
    own = "WHERE vin = %s AND concluded_at >= %s AND "
    newest = " ORDER BY concluded_at DESC, session_id DESC"
    assert conn.calls == [
        (f"SELECT {COLS} FROM case_memory WHERE vin = %s AND session_id = %s", [VIN, SID]),
        (f"SELECT {RCOLS} FROM case_memory {own}{AS_OF}{newest} LIMIT %s", [VIN, naive, *[NAIVE_LATER] * 3, 10]),
        (f"SELECT {RCOLS} FROM case_history {own}{AS_OF_ARCHIVED}{newest} LIMIT %s",
         [VIN, naive, *[NAIVE_LATER] * 4, 10]),
        (f"SELECT {COLS} FROM case_memory WHERE vin = %s{newest}", [VIN]),
        (
            f"SELECT {COLS} FROM case_memory WHERE prompt_version = %s AND valid = TRUE ORDER BY vin, session_id "
            "LIMIT %s",
            ["case-summary-v1", 50],
        ),
        (
            f"SELECT {COLS} FROM case_memory WHERE vin = %s AND valid = TRUE AND root_cause = %s "
            f"AND concluded_at >= %s{newest} LIMIT 1",
            [VIN, "weak cell", naive],
        ),
        ("SELECT COUNT(*) FROM case_memory", None),
    ]  # fmt: skip


def test_a_duplicate_bounded_above_is_one_more_bound_value(store: SqlStore, conn: Recorder) -> None:
    since, until = datetime(2024, 11, 1, tzinfo=UTC), datetime(2024, 11, 20, tzinfo=UTC)
    conn.results.append([])
    assert store.find_duplicate(VIN, "weak cell", since, until=until) is None
    assert conn.calls == [
        (
            f"SELECT {COLS} FROM case_memory WHERE vin = %s AND valid = TRUE AND root_cause = %s "
            "AND concluded_at >= %s AND concluded_at <= %s ORDER BY concluded_at DESC, session_id DESC LIMIT 1",
            [VIN, "weak cell", since.replace(tzinfo=None), until.replace(tzinfo=None)],
        )
    ]


HAS_COLUMN = (
    "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = %s AND table_name = %s AND column_name = %s"
)
EVENT_COLUMNS = ("opened_ts", "verified_ts", "invalid_ts", "version_from")
# 002 also adds omitted (a column 001 gained later) to tables made before it.
ADDED_COLUMNS = ("omitted", *EVENT_COLUMNS)
# 003 adds what a record is found by, to both tables.
RETRIEVAL_COLUMNS = ("alert_text", "embedder", "search_tokens")
ADDED_003 = [(t, c) for t in ("case_memory", "case_history") for c in RETRIEVAL_COLUMNS]


class Schema(Recorder):
    """A database that has the columns in ``present``: column lookups answer from it."""

    def __init__(self, present: set[tuple[str, str]]) -> None:
        super().__init__()
        self.present = present

    def execute(self, sql: str, params: Any = None) -> int:
        super().execute(sql, params)
        if sql == HAS_COLUMN:
            self.results.insert(0, [(int((params[1], params[2]) in self.present),)])
        return 0


def _init(present: set[tuple[str, str]]) -> tuple[list[str], Schema]:
    conn = Schema(present)
    store = SqlStore(parse_url("doris://root@h:9030/fleet", 9030), DorisDialect(), lambda: conn, (FakeError,))
    return store.init_schema(512), conn


def test_init_applies_the_versioned_ddl_in_order() -> None:
    applied, conn = _init(set())
    assert applied == ["001_case_memory.sql", "002_event_time.sql", "003_retrieval.sql", "004_filter_indexes.sql"]
    sqls = [c[0] for c in conn.calls]
    ddl = sqls[0]
    assert ddl.startswith("CREATE TABLE IF NOT EXISTS case_memory (")
    for clause in (
        "summary_vec ARRAY<FLOAT> NOT NULL",
        "INDEX idx_vin (vin) USING INVERTED",
        "USING ANN PROPERTIES",
        '"index_type" = "hnsw"',
        '"metric_type" = "inner_product"',
        '"dim" = "512"',  # the embedder's dimension, as init was asked for
        "UNIQUE KEY (vin, session_id)",
        "DISTRIBUTED BY HASH (vin)",
        '"enable_unique_key_merge_on_write" = "true"',
    ):
        assert clause in ddl, clause
    # Each new column: looked up, then added (one column per statement: Doris has no ADD COLUMN IF NOT EXISTS).
    for i, column in enumerate(ADDED_COLUMNS):
        assert conn.calls[1 + 2 * i] == (HAS_COLUMN, ["fleet", "case_memory", column])
        assert sqls[2 + 2 * i].startswith(f"ALTER TABLE case_memory ADD COLUMN {column} ")
    assert sqls[4] == "ALTER TABLE case_memory ADD COLUMN opened_ts DATETIME NULL"
    rest = sqls[1 + 2 * len(ADDED_COLUMNS) :]
    for column in ("concluded_at", "verified_ts", "invalid_ts", "version_from"):
        assert f"CREATE INDEX IF NOT EXISTS idx_{column} ON case_memory ({column}) USING INVERTED" in rest
    backfill = next(x for x in rest if x.startswith("UPDATE"))
    assert backfill.endswith("WHERE version_from IS NULL")  # rows of older versions only: safe to run again
    for assignment in ("version_from = concluded_at", "GREATEST(concluded_at, updated_at)", "ELSE concluded_at END"):
        assert assignment in backfill
    history = next(x for x in rest if x.startswith("CREATE TABLE IF NOT EXISTS case_history ("))
    for clause in (
        "UNIQUE KEY (vin, session_id, version_from)",
        "version_to DATETIME NOT NULL",
        "USING ANN PROPERTIES",
        '"dim" = "512"',
        "INDEX idx_version_to (version_to) USING INVERTED",
        '"enable_unique_key_merge_on_write" = "true"',
    ):
        assert clause in history, clause
    # The key columns come first, as Doris requires.
    assert history.index("version_from DATETIME") < history.index("version_to") < history.index("series")
    # 003: a whitespace analyzer for the pre-tokenised text, the columns, and their inverted indexes.
    after = sqls[sqls.index(history) + 1 :]
    assert after[0].startswith("CREATE INVERTED INDEX TOKENIZER IF NOT EXISTS vdoctor_whitespace PROPERTIES (")
    assert '"type" = "char_group"' in after[0] and '"tokenize_on_chars" = "[whitespace]"' in after[0]
    assert after[1].startswith("CREATE INVERTED INDEX ANALYZER IF NOT EXISTS vdoctor_tokens PROPERTIES (")
    assert '"tokenizer" = "vdoctor_whitespace"' in after[1]
    added = [tuple(x.split()[2:6:3]) for x in after if x.startswith("ALTER TABLE")]
    assert added == ADDED_003
    for table in ("case_memory", "case_history"):
        index = f"CREATE INDEX IF NOT EXISTS idx_search_tokens ON {table} (search_tokens) USING INVERTED PROPERTIES ("
        assert any(x.startswith(index) and '"analyzer" = "vdoctor_tokens"' in x for x in after), table
        assert f"CREATE INDEX IF NOT EXISTS idx_embedder ON {table} (embedder) USING INVERTED" in after


def _indexed_columns(ddl: list[str]) -> dict[str, set[str]]:
    """Table -> the columns with an index, from the CREATE TABLE and CREATE INDEX statements init ran."""
    indexed: dict[str, set[str]] = {}
    for sql in ddl:
        table = re.match(r"CREATE TABLE IF NOT EXISTS (\w+) \(", sql)
        if table:
            indexed.setdefault(table[1], set()).update(re.findall(r"\bINDEX \w+ \((\w+)\) USING (?:INVERTED|ANN)", sql))
        added = re.match(r"CREATE INDEX IF NOT EXISTS \w+ ON (\w+) \((\w+)\) USING INVERTED", sql)
        if added:
            indexed.setdefault(added[1], set()).add(added[2])
    return indexed


def test_every_column_a_similar_case_search_filters_on_has_an_index_in_both_tables() -> None:
    # Doris filters before the ANN top-k only where every filter column has an index; one without makes it
    # scan the whole series exactly (NOTES.md). The filters are read from the statements the store sends.
    _, schema = _init(set())
    indexed = _indexed_columns([sql for sql, _ in schema.calls])
    conn = Recorder()
    store = SqlStore(parse_url("doris://root@h:9030/fleet", 9030), DorisDialect(), lambda: conn, (FakeError,))
    query = SimilarQuery(VIN, "EV-A", np.ones(VECTOR_DIM, dtype=np.float32), 20, as_of=LATER, text="电芯压差 cells")
    store.similar(query)
    store.lexical(query)
    filtered: dict[str, set[str]] = {}
    for sql, _ in conn.calls:
        table, where = re.search(r"FROM (\w+) WHERE (.*?) ORDER BY", sql).groups()  # type: ignore[union-attr]
        filtered.setdefault(table, set()).update(re.findall(r"(\w+) (?:=|<>|<=|>=|<|>|IS NULL|MATCH_ANY) ", where))
    assert set(filtered) == {"case_memory", "case_history"}
    assert "recheck_ok" in filtered["case_memory"] and "version_to" in filtered["case_history"]
    for table, columns in filtered.items():
        assert columns <= indexed[table], f"{table}: filtered on without an index: {sorted(columns - indexed[table])}"


def test_init_again_skips_the_columns_that_exist() -> None:
    every = {("case_memory", c) for c in ADDED_COLUMNS} | set(ADDED_003)
    _, conn = _init(every)
    assert not [c for c in conn.calls if c[0].startswith("ALTER TABLE")]
    assert sum(c[0] == HAS_COLUMN for c in conn.calls) == len(ADDED_COLUMNS) + len(ADDED_003)


def test_init_refuses_a_dimension_out_of_range(store: SqlStore, conn: Recorder) -> None:
    with pytest.raises(StoreError, match="vector dimension 0 is out of range"):
        store.init_schema(0)
    assert conn.calls == []


def test_ddl_files_split_into_statements() -> None:
    for dialect in ("doris", "mysql"):
        files = schema_files(dialect)
        # Doris alone needs 004: its ANN search filters through secondary indexes.
        extra = ["004_filter_indexes.sql"] if dialect == "doris" else []
        assert [f.name for f in files] == ["001_case_memory.sql", "002_event_time.sql", "003_retrieval.sql", *extra]
        statements = split_statements(files[0].read_text())
        assert len(statements) == 1 and not statements[0].endswith(";")
        later = split_statements(files[1].read_text())
        assert [x.split(" ADD COLUMN ")[1].split()[0] for x in later if x.startswith("ALTER")] == list(ADDED_COLUMNS)
        assert all(not x.endswith(";") for x in later)
        retrieval = split_statements(files[2].read_text())
        added = [tuple(x.split()[2:6:3]) for x in retrieval if x.startswith("ALTER")]
        assert added == ADDED_003, dialect
        assert all(not x.endswith(";") for x in retrieval)
    assert split_statements("-- c\nCREATE A (x INT);\n\nCREATE B (y INT);\n") == [
        "CREATE A (x INT)",
        "CREATE B (y INT)",
    ]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1); DROP TABLE case_memory; --", None, True])
def test_array_literals_are_built_only_from_finite_numbers(bad: Any) -> None:
    with pytest.raises(StoreError):
        vector_literal([0.5, bad])
    with pytest.raises(StoreError):
        vector_literal([])
    assert vector_literal([0.5, -1, np.float32(0.25)]) == "[0.5,-1.0,0.25]"


def test_a_vector_of_another_dimension_than_the_index_says_what_to_do() -> None:
    """Doris refuses an array of the wrong size for the ANN index; the error points at the migration."""

    class Refusing(Recorder):
        def execute(self, sql: str, params: Any = None) -> int:
            super().execute(sql, params)
            if sql.startswith("INSERT"):
                raise FakeError("(1105, 'errCode = 2, detailMessage = vector dim mismatch: array size 2, dim 256')")
            return 0

    store = SqlStore(parse_url("doris://root@h:9030/fleet", 9030), DorisDialect(), lambda: Refusing(), (FakeError,))
    with pytest.raises(StoreError, match="another embedder's dimension: see the README, Changing the embedder"):
        store.upsert(record(summary_vec=[1.0, 0.0]))


@pytest.mark.parametrize(
    "url",
    [
        "doris://root:pw@127.0.0.1:9030/fleet;DROP",
        "doris://root:pw@127.0.0.1:9030/",
        "doris://root:pw@:9030/fleet",
        "doris://root:pw@127.0.0.1:9030/fleet?table=users",
        "doris://root:pw@127.0.0.1:notaport/fleet",
    ],
)
def test_bad_urls_are_refused_without_echoing_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_url(url, 9030)
    assert "pw" not in str(err.value)


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("mysql://root:Pq7/abcSECRET@db.example:3306/vd", "Pq7/abcSECRET"),
        ("doris://vd:Xy7#kQ9SECRET@db.example:9030/vd", "Xy7#kQ9SECRET"),
        ("doris://vd:Zw4?mN8SECRET@db.example:9030/vd", "Zw4?mN8SECRET"),
        ("doris://vd:Rt5/9030SECRET@db.example:notaport/vd", "Rt5/9030SECRET"),
    ],
)
def test_a_password_with_an_unescaped_delimiter_is_refused_without_showing_any_of_it(url: str, password: str) -> None:
    # A URL parser ends the host part at the first / ? or #, and reads the password's first part as the port.
    with pytest.raises(ConfigError) as err:
        parse_url(url, 9030)
    shown = str(err.value) + "".join(traceback.format_exception(err.value))
    for piece in re.split(r"[/#?]", password):
        assert piece not in shown
    # The URL is shown from its last @ on, with what to do.
    assert f"memory URL {url.split('://')[0]}://db.example:" in str(err.value) and "percent-encode" in str(err.value)


def test_percent_encoded_specials_and_a_bare_at_sign_read_as_the_password() -> None:
    assert parse_url("mysql://root:Pq7%2Fabc%23x%3Fy@db.example:3306/vd", 3306).password == "Pq7/abc#x?y"
    info = parse_url("doris://vd:p@ss@db.example/vd", 9030)  # the host starts after the last @, as urlsplit reads it
    assert (info.user, info.password, info.host, info.port, info.database) == ("vd", "p@ss", "db.example", 9030, "vd")
    assert parse_url("mysql://db.example/vd", 3306).user == "root"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        # Port 0 was read as no port: the store connected to 3306 and its messages said so.
        ("mysql://root:pw@127.0.0.1:0/vd", r"memory URL mysql://127\.0\.0\.1:0/vd: the port must be 1 to 65535"),
        ("doris://root:pw@fe:0/vd", r"the port must be 1 to 65535 \(leave it out for 9030\)"),
        # An empty user was read as root.
        ("mysql://:pw@db.example/vd", r"memory URL mysql://db\.example/vd: the user is empty"),
        ("doris://@fe/vd", "the user is empty"),
        # Unknown options were dropped without a word (a sqlite URL refuses them).
        ("mysql://root:pw@db/vd?charset=bad&x=1", r"unknown option charset, x \(the one option is table\)"),
        ("doris://root:pw@fe/vd?tabel=case_memory", r"unknown option tabel \(the one option is table\)"),
    ],
)
def test_a_port_of_0_an_empty_user_and_unknown_options_are_refused(url: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as err:
        parse_url(url, 9030 if url.startswith("doris") else 3306)
    assert "pw" not in str(err.value)


def test_the_known_option_and_a_url_without_credentials_still_read() -> None:
    info = parse_url("doris://vd:pw@fe:9031/fleet?table=case_memory", 9030)
    assert (info.user, info.port, info.database, info.table) == ("vd", 9031, "fleet", "case_memory")
    assert (parse_url("mysql://db/vd", 3306).user, parse_url("mysql://db/vd", 3306).port) == ("root", 3306)


def test_a_password_pymysql_cannot_send_is_refused_without_quoting_it() -> None:
    # pymysql sends the password as Latin-1: a euro sign would fail in the driver, naming it and its position.
    url = "mysql://root:xyz%E2%82%ACSECRET@db:3306/vd"
    with pytest.raises(ConfigError, match="outside Latin-1") as err:
        parse_url(url, 3306)
    assert "SECRET" not in str(err.value) and "xyz" not in str(err.value) and "\u20ac" not in str(err.value)
    assert "SECRET" not in "".join(traceback.format_exception(err.value))
    # Latin-1 beyond ASCII is fine, percent-encoded as UTF-8.
    assert parse_url("mysql://root:p%C3%A9ss@db:3306/vd", 3306).password == "p\u00e9ss"


def test_a_password_a_url_parser_refuses_is_not_quoted_on_the_way_to_its_backend() -> None:
    # urlsplit refuses an authority with a character that NFKC folds into / @ : (here ℀, "a/c"), quoting it
    # whole in a ValueError; the store registry reads the scheme alone, and parse_url never parses the password.
    url = "doris://vd:Ab\u2100SECRET@db.example:9030/vd"
    with pytest.raises(ConfigError, match="outside Latin-1") as err:
        open_store(url)
    assert "SECRET" not in "".join(traceback.format_exception(err.value))


def test_driver_errors_are_wrapped_without_the_password() -> None:
    class Refusing(Recorder):
        def execute(self, sql: str, params: Any = None) -> int:
            raise FakeError("(1045, \"Access denied for user 'root' using password s3cret\")")

    store = SqlStore(
        parse_url("doris://root:s3cret@127.0.0.1:9030/fleet", 9030), DorisDialect(), lambda: Refusing(), (FakeError,)
    )
    with pytest.raises(StoreError) as err:
        store.count()
    assert "s3cret" not in str(err.value)
    assert "doris://root:***@127.0.0.1:9030/fleet" in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert "s3cret" not in repr(store.info)


@pytest.mark.parametrize("raw", [struct.pack("<4f", 0.5, -1.0, 2.0, 3.25), b"\xff\xfe", b"[1, 2", '["a"]', b"{}"])
def test_a_vector_that_is_not_dorises_array_is_a_store_error(raw: object) -> None:
    """A MySQL/MariaDB store's packed floats read through a doris:// URL raised UnicodeDecodeError out of
    `vdoctor memory history` (found by an audit)."""
    with pytest.raises(StoreError, match="not Doris's array of floats: is the URL's server a MySQL/MariaDB store"):
        DorisDialect().decode_vec(raw)
    assert DorisDialect().decode_vec(b"[0.5, -1, 2.0]") == [0.5, -1.0, 2.0]

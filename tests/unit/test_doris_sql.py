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
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import SimilarQuery
from vdoctor.stores.doris import VECTOR_DIM, DorisDialect
from vdoctor.stores.sqlbase import COLUMN_LIST, SqlStore, parse_url, schema_files, split_statements, vector_literal

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
SID = f"{VIN}-20261101T081530"
AT = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
NAIVE_AT = datetime(2026, 11, 1, 8, 15, 30)  # DATETIME columns hold UTC without a zone
COLS = (
    "vin, session_id, series, concluded_at, summary, summary_vec, root_cause, fix_action, "
    "priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, kind, merged_sessions, source, omitted"
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
        r.updated_at.replace(tzinfo=None), r.kind.value, "[]", r.source, json.dumps(r.omitted),
    )  # fmt: skip


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


def test_upsert_is_a_plain_insert_with_the_vector_as_a_literal(store: SqlStore, conn: Recorder) -> None:
    store.upsert(record())
    literal = "[1.0," + ",".join(["0.0"] * (VECTOR_DIM - 1)) + "]"
    marks = "%s, %s, %s, %s, %s, " + literal + ", %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s"
    assert conn.calls == [
        (
            f"INSERT INTO case_memory ({COLS}) VALUES ({marks})",
            [VIN, SID, "EV-A", NAIVE_AT, "2026-11-01 08:15 | P0A7F | cell_voltage_diff_mv=187",
             "weak cell", "balance", "P2", '["P0A7F"]', None, "case-summary-v1", True, NAIVE_AT, "final", "[]", "",
             "[]"],
        )
    ]  # fmt: skip


def test_upsert_many_is_one_multi_row_insert(store: SqlStore, conn: Recorder) -> None:
    store.upsert_many([record(), record(session_id=SID + "x", summary_vec=vec(-1.0))])
    assert len(conn.calls) == 1
    sql, params = conn.calls[0]
    assert sql.startswith(f"INSERT INTO case_memory ({COLS}) VALUES (")
    assert sql.count("), (") == 1
    assert "[1.0,0.0," in sql and "[-1.0,0.0," in sql
    assert params is not None and len(params) == 2 * 17  # 18 columns, the vector inline


def test_similar_uses_the_ann_function_with_filters_before_top_k(store: SqlStore, conn: Recorder) -> None:
    hit = record(vin="LSVAU2180N2100001", recheck_ok=True)
    conn.results.append([(*row_of(hit), 0.75)])
    q = np.zeros(VECTOR_DIM, dtype=np.float32)
    q[1] = 1.0
    found = store.similar(SimilarQuery(exclude_vin=VIN, series="EV-A", vector=q, k=20))
    literal = "[0.0,1.0," + ",".join(["0.0"] * (VECTOR_DIM - 2)) + "]"
    assert conn.calls == [
        (
            f"SELECT {COLS}, inner_product_approximate(summary_vec, {literal}) AS score FROM case_memory "
            "WHERE series = %s AND recheck_ok = TRUE AND valid = TRUE AND vin <> %s ORDER BY score DESC LIMIT %s",
            ["EV-A", VIN, 20],
        )
    ]
    assert [(s.record.vin, s.record.recheck_ok, s.score) for s in found] == [("LSVAU2180N2100001", True, 0.75)]
    assert found[0].record.summary_vec == vec()
    assert found[0].record.concluded_at == AT


def test_set_recheck_checks_the_key_then_partially_updates_and_resets(store: SqlStore, conn: Recorder) -> None:
    conn.results.extend([[(1,)], [], [], []])
    assert store.set_recheck(VIN, SID, True) is True
    sqls = [c[0] for c in conn.calls]
    assert sqls == [
        "SELECT COUNT(*) FROM case_memory WHERE vin = %s AND session_id = %s",
        "SET enable_unique_key_partial_update = true",
        "INSERT INTO case_memory (vin, session_id, recheck_ok, updated_at) VALUES (%s, %s, %s, %s)",
        "SET enable_unique_key_partial_update = false",
    ]
    assert conn.calls[0][1] == [VIN, SID]
    params = conn.calls[2][1]
    assert params[:3] == [VIN, SID, True] and isinstance(params[3], datetime) and params[3].tzinfo is None


def test_set_recheck_of_an_unknown_session_writes_nothing(store: SqlStore, conn: Recorder) -> None:
    conn.results.append([(0,)])
    assert store.set_recheck(VIN, SID, False) is False
    assert [c[0] for c in conn.calls] == ["SELECT COUNT(*) FROM case_memory WHERE vin = %s AND session_id = %s"]


def test_soft_delete_partially_updates_valid_for_each_live_key(store: SqlStore, conn: Recorder) -> None:
    conn.results.extend([[(SID,), (SID + "b",)], [], [], []])
    assert store.soft_delete(VIN) == 2
    assert [c[0] for c in conn.calls] == [
        "SELECT session_id FROM case_memory WHERE vin = %s AND valid = TRUE",
        "SET enable_unique_key_partial_update = true",
        "INSERT INTO case_memory (vin, session_id, valid, updated_at) VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)",
        "SET enable_unique_key_partial_update = false",
    ]
    params = conn.calls[2][1]
    assert params[0:3] == [VIN, SID, False] and params[4:7] == [VIN, SID + "b", False]


def test_the_partial_update_setting_is_reset_even_when_the_insert_fails(conn: Recorder) -> None:
    class Failing(Recorder):
        def execute(self, sql: str, params: Any = None) -> int:
            super().execute(sql, params)
            if sql.startswith("INSERT"):
                raise FakeError("(1105, 'errCode = 2, detailMessage = too many versions')")
            return 0

    failing = Failing()
    failing.results.append([(1,)])
    store = SqlStore(parse_url("doris://root@h:9030/fleet", 9030), DorisDialect(), lambda: failing, (FakeError,))
    with pytest.raises(StoreError, match="too many versions"):
        store.set_recheck(VIN, SID, True)
    assert failing.calls[-1][0] == "SET enable_unique_key_partial_update = false"


def test_reads_are_plain_selects_with_bound_values(store: SqlStore, conn: Recorder) -> None:
    since = datetime(2024, 11, 1, tzinfo=UTC)
    conn.results.extend([[row_of(record())], [], [], [], [], [(7,)]])
    got = store.get(VIN, SID)
    assert got is not None and got.summary_vec == vec() and got.valid is True and got.recheck_ok is None
    store.own_history(VIN, since, 10)
    store.history(VIN)
    store.by_prompt_version("case-summary-v1", 50)
    store.find_duplicate(VIN, "weak cell", since)
    assert store.count() == 7
    naive = since.replace(tzinfo=None)
    assert conn.calls == [
        (f"SELECT {COLS} FROM case_memory WHERE vin = %s AND session_id = %s", [VIN, SID]),
        (
            f"SELECT {COLS} FROM case_memory WHERE vin = %s AND valid = TRUE AND concluded_at >= %s "
            "ORDER BY concluded_at DESC, session_id DESC LIMIT %s",
            [VIN, naive, 10],
        ),
        (f"SELECT {COLS} FROM case_memory WHERE vin = %s ORDER BY concluded_at DESC, session_id DESC", [VIN]),
        (
            f"SELECT {COLS} FROM case_memory WHERE prompt_version = %s AND valid = TRUE ORDER BY vin, session_id "
            "LIMIT %s",
            ["case-summary-v1", 50],
        ),
        (
            f"SELECT {COLS} FROM case_memory WHERE vin = %s AND valid = TRUE AND root_cause = %s "
            "AND concluded_at >= %s ORDER BY concluded_at DESC, session_id DESC LIMIT 1",
            [VIN, "weak cell", naive],
        ),
        ("SELECT COUNT(*) FROM case_memory", None),
    ]


def test_init_applies_the_versioned_ddl(store: SqlStore, conn: Recorder) -> None:
    assert store.init_schema() == ["001_case_memory.sql"]
    assert len(conn.calls) == 1
    ddl = conn.calls[0][0]
    assert ddl.startswith("CREATE TABLE IF NOT EXISTS case_memory (")
    for clause in (
        "summary_vec ARRAY<FLOAT> NOT NULL",
        "INDEX idx_vin (vin) USING INVERTED",
        "USING ANN PROPERTIES",
        '"index_type" = "hnsw"',
        '"metric_type" = "inner_product"',
        f'"dim" = "{VECTOR_DIM}"',
        "UNIQUE KEY (vin, session_id)",
        "DISTRIBUTED BY HASH (vin)",
        '"enable_unique_key_merge_on_write" = "true"',
    ):
        assert clause in ddl, clause


def test_ddl_files_split_into_statements() -> None:
    for dialect in ("doris", "mysql"):
        files = schema_files(dialect)
        assert [f.name for f in files] == ["001_case_memory.sql"]
        statements = split_statements(files[0].read_text())
        assert len(statements) == 1 and not statements[0].endswith(";")
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


def test_wrong_dimension_is_refused_before_any_sql(store: SqlStore, conn: Recorder) -> None:
    with pytest.raises(StoreError, match="256"):
        store.upsert(record(summary_vec=[1.0, 0.0]))
    assert conn.calls == []


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

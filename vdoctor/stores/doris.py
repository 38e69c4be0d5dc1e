"""The Apache Doris L3 backend (``doris://user:password@host:9030/db``), for production fleets.

The shared SQL code path (``sqlbase``) with the Doris dialect (Doris >= 4.1.4,
schema in ``sql/doris/``):

- upsert: a plain multi-row INSERT; the UNIQUE KEY (vin, session_id)
  merge-on-write table replaces the whole row for a key;
- similar cases: ``inner_product_approximate`` on the HNSW index over
  normalised vectors, with the filters (series, other vehicles, and the
  event-time filters of the asking session's time, each column with an
  inverted index so that Doris filters before the top-k) in the WHERE clause;
  once over current versions (``case_memory``) and once over archived ones
  (``case_history``, its own ANN index), merged by score;
- recheck and soft delete: partial-update INSERTs of the key columns plus the
  changed columns (``enable_unique_key_partial_update``), reset afterwards so a
  reused connection never carries the setting into a full-row write; a
  version a write replaces is archived first by an INSERT ... SELECT.

pymysql refuses list parameters and Doris has no server-side prepared
statements: vectors go into SQL as array literals built by ``vector_literal``
from validated finite floats; every other value is a bound parameter.
"""

from __future__ import annotations

import json
from datetime import datetime

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import Scored, SimilarQuery
from vdoctor.stores.mysql import connect
from vdoctor.stores.sqlbase import (
    AS_OF,
    AS_OF_ARCHIVED,
    COLUMNS,
    RECALL_COLUMN_LIST,
    VERIFIED,
    WRITE_COLUMN_LIST,
    WRITE_COLUMNS,
    RowUpdate,
    SqlStore,
)
from vdoctor.stores.sqltypes import as_of_params, naive_utc, parse_url, vector_literal

try:
    import pymysql  # type: ignore[import-untyped]
except ImportError as e:  # pragma: no cover - pymysql is a declared dependency
    raise ConfigError("the doris backend needs pymysql: pip install 'pymysql>=1.1'") from e

DEFAULT_PORT = 9030
# Doris builds one HNSW graph per segment: few, large INSERTs, not many tiny ones.
BATCH_ROWS = 1000
# The dimension of summary_vec in sql/doris/001_case_memory.sql.
VECTOR_DIM = 256
_VEC = COLUMNS.index("summary_vec")


class _Literal:
    """A pre-validated SQL literal that goes into the statement text, not a parameter."""

    def __init__(self, text: str) -> None:
        self.text = text


class DorisDialect:
    name = "doris"
    # An INSERT into a UNIQUE KEY merge-on-write table replaces the row with the same key.
    replace_verb = "INSERT"

    def encode_vec(self, vector: list[float]) -> object:
        if len(vector) != VECTOR_DIM:
            raise StoreError(
                f"doris store: summary_vec has {len(vector)} dimensions; the table's ANN index expects {VECTOR_DIM}"
            )
        return _Literal(vector_literal(vector))

    def decode_vec(self, raw: object) -> list[float]:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return [float(x) for x in json.loads(text)]

    def upsert(self, store: SqlStore, rows: list[tuple[MemoryRecord, datetime]]) -> None:
        for start in range(0, len(rows), BATCH_ROWS):
            values, params = [], []
            for record, version_from in rows[start : start + BATCH_ROWS]:
                row = store.to_params(record, version_from)
                literal = row.pop(_VEC)
                if not isinstance(literal, _Literal):
                    raise StoreError("doris store: summary_vec was not encoded as a literal")
                marks = ["%s"] * (len(WRITE_COLUMNS) - 1)
                marks.insert(_VEC, literal.text)
                values.append("(" + ", ".join(marks) + ")")
                params.extend(row)
            store.run(f"INSERT INTO {store.table} ({WRITE_COLUMN_LIST}) VALUES " + ", ".join(values), params)

    def similar(self, store: SqlStore, query: SimilarQuery) -> list[Scored]:
        """ANN top-k over current and over archived versions, each filtered before its top-k; merged by score."""
        literal = vector_literal(query.vector.tolist())
        found: list[Scored] = []
        for table, archived in ((store.table, False), (store.history_table, True)):
            rows = store.query(
                f"SELECT {RECALL_COLUMN_LIST}, inner_product_approximate(summary_vec, {literal}) AS score "
                f"FROM {table} WHERE series = %s AND vin <> %s AND {VERIFIED} AND "
                f"{AS_OF_ARCHIVED if archived else AS_OF} ORDER BY score DESC LIMIT %s",
                [
                    query.series,
                    query.exclude_vin,
                    naive_utc(query.as_of),
                    *as_of_params(query.as_of, archived),
                    int(query.k),
                ],
            )
            found += [Scored(store.from_row(r), float(r[len(COLUMNS)])) for r in rows]
        # At most one version of a record holds at a time, so the two lists never name a record twice.
        found.sort(key=lambda s: -s.score)
        return found[: query.k]

    def _partial_update(self, store: SqlStore, columns: list[str], rows: list[list[object]]) -> None:
        """INSERT only the key plus ``columns``; the other columns keep their stored values."""
        marks = "(" + ", ".join(["%s"] * (2 + len(columns))) + ")"
        sql = f"INSERT INTO {store.table} (vin, session_id, {', '.join(columns)}) VALUES " + ", ".join(
            [marks] * len(rows)
        )
        with store.locked():
            store.run("SET enable_unique_key_partial_update = true")
            try:
                store.run(sql, [p for row in rows for p in row])
            finally:
                store.run("SET enable_unique_key_partial_update = false")

    def update(self, store: SqlStore, rows: list[RowUpdate]) -> None:
        # The store read every key first (a partial update of an absent key would insert a half-empty row).
        columns = list(rows[0][2])
        self._partial_update(store, columns, [[vin, sid, *(values[c] for c in columns)] for vin, sid, values in rows])


def open_doris(url: str, read_only: bool = False) -> SqlStore:
    """``read_only``: SELECTs only, refused in the client (Doris has no read-only sessions; for a
    reader that cannot write at all, give it a user with SELECT_PRIV alone)."""
    info = parse_url(url, DEFAULT_PORT)
    # Doris has no MySQL-protocol prepared statements; pymysql interpolates
    # client-side, and autocommit makes every INSERT its own load.
    return SqlStore(
        info, DorisDialect(), lambda: connect(info, found_rows=False), (pymysql.MySQLError,), read_only=read_only
    )

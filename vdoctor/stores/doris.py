"""The Apache Doris L3 backend (``doris://user:password@host:9030/db``), for production fleets.

The shared SQL code path (``sqlbase``) with the Doris dialect (Doris >= 4.1.4,
schema in ``sql/doris/``):

- upsert: a plain multi-row INSERT; the UNIQUE KEY (vin, session_id)
  merge-on-write table replaces the whole row for a key;
- similar cases: ``inner_product_approximate`` on the HNSW index over
  normalised vectors, with the filters applied before the top-k;
- recheck and soft delete: partial-update INSERTs of the key columns plus the
  changed columns (``enable_unique_key_partial_update``), reset afterwards so a
  reused connection never carries the setting into a full-row write.

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
from vdoctor.stores.sqlbase import COLUMN_LIST, COLUMNS, SqlStore, naive_utc, parse_url, vector_literal

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

    def encode_vec(self, vector: list[float]) -> object:
        if len(vector) != VECTOR_DIM:
            raise StoreError(
                f"doris store: summary_vec has {len(vector)} dimensions; the table's ANN index expects {VECTOR_DIM}"
            )
        return _Literal(vector_literal(vector))

    def decode_vec(self, raw: object) -> list[float]:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return [float(x) for x in json.loads(text)]

    def upsert(self, store: SqlStore, records: list[MemoryRecord]) -> None:
        for start in range(0, len(records), BATCH_ROWS):
            rows, params = [], []
            for record in records[start : start + BATCH_ROWS]:
                values = store.to_params(record)
                literal = values.pop(_VEC)
                if not isinstance(literal, _Literal):
                    raise StoreError("doris store: summary_vec was not encoded as a literal")
                marks = ["%s"] * (len(COLUMNS) - 1)
                marks.insert(_VEC, literal.text)
                rows.append("(" + ", ".join(marks) + ")")
                params.extend(values)
            store.run(f"INSERT INTO {store.table} ({COLUMN_LIST}) VALUES " + ", ".join(rows), params)

    def similar(self, store: SqlStore, query: SimilarQuery) -> list[Scored]:
        literal = vector_literal(query.vector.tolist())
        rows = store.query(
            f"SELECT {COLUMN_LIST}, inner_product_approximate(summary_vec, {literal}) AS score "
            f"FROM {store.table} WHERE series = %s AND recheck_ok = TRUE AND valid = TRUE AND vin <> %s "
            "ORDER BY score DESC LIMIT %s",
            (query.series, query.exclude_vin, int(query.k)),
        )
        return [Scored(store.from_row(r), float(r[len(COLUMNS)])) for r in rows]

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

    def set_recheck(self, store: SqlStore, vin: str, session_id: str, ok: bool, now: datetime) -> bool:
        # A partial update of an absent key would insert a half-empty row: check first.
        found = store.query(f"SELECT COUNT(*) FROM {store.table} WHERE vin = %s AND session_id = %s", (vin, session_id))
        if int(found[0][0]) == 0:
            return False
        self._partial_update(store, ["recheck_ok", "updated_at"], [[vin, session_id, ok, naive_utc(now)]])
        return True

    def soft_delete(self, store: SqlStore, vin: str, now: datetime) -> int:
        keys = store.query(f"SELECT session_id FROM {store.table} WHERE vin = %s AND valid = TRUE", (vin,))
        if not keys:
            return 0
        stamp = naive_utc(now)
        self._partial_update(store, ["valid", "updated_at"], [[vin, k[0], False, stamp] for k in keys])
        return len(keys)


def open_doris(url: str) -> SqlStore:
    info = parse_url(url, DEFAULT_PORT)
    # Doris has no MySQL-protocol prepared statements; pymysql interpolates
    # client-side, and autocommit makes every INSERT its own load.
    return SqlStore(info, DorisDialect(), lambda: connect(info, found_rows=False), (pymysql.MySQLError,))

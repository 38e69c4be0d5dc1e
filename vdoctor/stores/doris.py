"""The Apache Doris L3 backend (``doris://user:password@host:9030/db``), for production fleets.

The shared SQL code path (``sqlbase``) with the Doris dialect (Doris >= 4.1.4,
schema in ``sql/doris/``):

- upsert: a plain multi-row INSERT; the UNIQUE KEY (vin, session_id)
  merge-on-write table replaces the whole row for a key;
- similar cases, dense channel: ``inner_product_approximate`` on the HNSW
  index over normalised vectors, with the filters (series, other vehicles,
  and the event-time filters of the asking session's time, each column with
  an inverted index so that Doris filters before the top-k) in the WHERE
  clause; once over current versions (``case_memory``) and once over archived
  ones (``case_history``, its own ANN index), merged by score;
- similar cases, lexical channel: ``search_tokens MATCH_ANY '<query tokens>'``
  on the inverted index of the pre-tokenised text (a whitespace analyzer:
  the tokens are ``retrieval.tokens``', as in every backend), ranked by
  ``score()`` (BM25, over Doris's own statistics), with the same filters;
  current and archived versions merged by score;
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
from collections.abc import Sequence
from datetime import datetime

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.tokens import query_terms
from vdoctor.stores.base import Scored, SimilarQuery, StaleVersion, check_embedders
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
    TokenUpdate,
)
from vdoctor.stores.sqltypes import as_of_params, naive_utc, parse_url, statement_batches, to_utc, vector_literal

try:
    import pymysql  # type: ignore[import-untyped]
except ImportError as e:  # pragma: no cover - pymysql is a declared dependency
    raise ConfigError("the doris backend needs pymysql: pip install 'pymysql>=1.1'") from e

DEFAULT_PORT = 9030
# Doris builds one HNSW graph per segment: few, large INSERTs, not many tiny ones (each
# within ``sqltypes.MAX_STATEMENT_BYTES`` of values, under the default max_allowed_packet).
BATCH_ROWS = 1000
_VEC = COLUMNS.index("summary_vec")


class _Literal:
    """A pre-validated SQL literal that goes into the statement text, not a parameter."""

    def __init__(self, text: str) -> None:
        self.text = text


class DorisDialect:
    name = "doris"
    # An INSERT into a UNIQUE KEY merge-on-write table replaces the row with the same key.
    replace_verb = "INSERT"

    def encode_vec(self, vector: Sequence[float]) -> object:
        # The ANN index's "dim" (set by memory init from the embedder) is checked by Doris itself;
        # SqlStore's error says what a dimension mismatch means.
        return _Literal(vector_literal(vector))

    def decode_vec(self, raw: object) -> list[float]:
        """A vector column as Doris returns it (its JSON array as text); anything else (a MySQL/MariaDB store's
        packed floats, read through a ``doris://`` URL) is a ``StoreError`` that says so, not a traceback."""
        try:
            text = raw.decode() if isinstance(raw, bytes) else str(raw)
            values = json.loads(text)
            if isinstance(values, list):
                return [float(x) for x in values]
        except (UnicodeDecodeError, ValueError, TypeError):
            pass
        raise StoreError(
            "doris store: a summary_vec that is not Doris's array of floats: is the URL's server a "
            "MySQL/MariaDB store (mysql://)?"
        )

    def upsert(self, store: SqlStore, rows: list[tuple[MemoryRecord, datetime]]) -> None:
        encoded: list[tuple[str, list[object]]] = []  # each row's vector literal and its other values
        for record, version_from in rows:
            row = store.to_params(record, version_from)
            literal = row.pop(_VEC)
            if not isinstance(literal, _Literal):
                raise StoreError("doris store: summary_vec was not encoded as a literal")
            encoded.append((literal.text, row))
        # Few, large INSERTs, each within the packet a server accepts (a record's source may be 64,000 characters).
        for batch in statement_batches([[text, *row] for text, row in encoded], BATCH_ROWS):
            values, params = [], []
            for text, row in (encoded[i] for i in batch):
                marks = ["%s"] * (len(WRITE_COLUMNS) - 1)
                marks.insert(_VEC, text)
                values.append("(" + ", ".join(marks) + ")")
                params.extend(row)
            store.run(f"INSERT INTO {store.table} ({WRITE_COLUMN_LIST}) VALUES " + ", ".join(values), params)

    def similar(self, store: SqlStore, query: SimilarQuery) -> list[Scored]:
        """ANN top-k over current and over archived versions, each filtered before its top-k; merged by score.

        The ANN index holds vectors of one dimension (Doris refuses others), and
        the embedder of what it returns is checked (``EmbedderMismatch``).
        """
        literal = vector_literal(query.vector.tolist())
        found = self._top(store, query, f"inner_product_approximate(summary_vec, {literal})", "")
        check_embedders(query, {s.record.embedder for s in found})
        return found

    def lexical(self, store: SqlStore, query: SimilarQuery) -> list[Scored]:
        """BM25 (``score()``) top-k of the inverted index over current and archived versions, merged by score."""
        terms = query_terms(query.text)
        if not terms:
            return []
        return self._top(store, query, "score()", " AND search_tokens MATCH_ANY %s", " ".join(terms))

    def _top(self, store: SqlStore, query: SimilarQuery, score: str, match: str, *match_args: object) -> list[Scored]:
        found: list[Scored] = []
        for table, archived in ((store.table, False), (store.history_table, True)):
            rows = store.query(
                f"SELECT {RECALL_COLUMN_LIST}, {score} AS score "
                f"FROM {table} WHERE series = %s AND vin <> %s AND {VERIFIED} AND "
                f"{AS_OF_ARCHIVED if archived else AS_OF}{match} ORDER BY score DESC LIMIT %s",
                [
                    query.series,
                    query.exclude_vin,
                    naive_utc(query.as_of),
                    *as_of_params(query.as_of, archived),
                    *match_args,
                    int(query.k),
                ],
            )
            found += [Scored(store.from_row(r), float(r[len(COLUMNS)])) for r in rows]
        # At most one version of a record holds at a time, so the two lists never name a record twice.
        found.sort(key=lambda s: -s.score)
        return found[: query.k]

    def set_vectors(self, store: SqlStore, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        """Partial-update INSERTs of each version's key, vector and embedder (current and archived apart).

        A partial update has no WHERE: the versions still as listed (same start,
        same embedder) are read first, and only those are written.
        """
        done = 0
        for archived in (False, True):
            listed = [(v, vec) for v, vec in rows if v.archived is archived]
            if not listed:
                continue
            table = store.history_table if archived else store.table
            one = "(vin = %s AND session_id = %s AND version_from = %s)"
            still = {
                (vin, sid, to_utc(start))
                for vin, sid, start, model in store.query(
                    f"SELECT vin, session_id, version_from, embedder FROM {table} WHERE "
                    + " OR ".join([one] * len(listed)),
                    [x for v, _ in listed for x in (v.vin, v.session_id, naive_utc(v.version_from))],
                )
                if any(
                    (v.vin, v.session_id, v.version_from, v.embedder) == (vin, sid, to_utc(start), model or "")
                    for v, _ in listed
                )
            }
            batch = [(v, vec) for v, vec in listed if (v.vin, v.session_id, v.version_from) in still]
            if not batch:
                continue
            done += len(batch)
            keys = "vin, session_id, version_from" if archived else "vin, session_id"
            values, params = [], []
            for version, vector in batch:
                literal = self.encode_vec(vector)
                if not isinstance(literal, _Literal):
                    raise StoreError("doris store: summary_vec was not encoded as a literal")
                key = [version.vin, version.session_id] + ([naive_utc(version.version_from)] if archived else [])
                values.append("(" + ", ".join(["%s"] * len(key)) + f", {literal.text}, %s)")
                params += [*key, embedder]
            _partial_insert(store, f"INSERT INTO {table} ({keys}, summary_vec, embedder) VALUES " + ", ".join(values),
                            params)  # fmt: skip
        return done

    def set_tokens(self, store: SqlStore, table: str, archived: bool, rows: list[TokenUpdate]) -> int:
        """A partial-update INSERT of each version's key and tokens, for the versions still as read.

        A partial update has no WHERE: the listed keys are read again first, and a version that a write
        replaced meanwhile (another ``version_from``) is left to its writer, who wrote its tokens.
        """
        one = "(vin = %s AND session_id = %s AND version_from = %s)"
        still = {
            (vin, sid, to_utc(start))
            for vin, sid, start in store.query(
                f"SELECT vin, session_id, version_from FROM {table} WHERE " + " OR ".join([one] * len(rows)),
                [x for vin, sid, start, _ in rows for x in (vin, sid, naive_utc(start))],
            )
        }
        batch = [row for row in rows if row[:3] in still]
        if not batch:
            return 0
        keys = ["vin", "session_id"] + (["version_from"] if archived else [])
        marks = "(" + ", ".join(["%s"] * (len(keys) + 1)) + ")"
        sql = f"INSERT INTO {table} ({', '.join(keys)}, search_tokens) VALUES " + ", ".join([marks] * len(batch))
        params = [
            x
            for vin, sid, start, tokens in batch
            for x in [vin, sid, *([naive_utc(start)] if archived else []), tokens]
        ]
        _partial_insert(store, sql, params)
        return len(batch)

    def _partial_update(self, store: SqlStore, columns: list[str], rows: list[list[object]]) -> None:
        """INSERT only the key plus ``columns``; the other columns keep their stored values."""
        marks = "(" + ", ".join(["%s"] * (2 + len(columns))) + ")"
        sql = f"INSERT INTO {store.table} (vin, session_id, {', '.join(columns)}) VALUES " + ", ".join(
            [marks] * len(rows)
        )
        _partial_insert(store, sql, [p for row in rows for p in row])

    def update(self, store: SqlStore, rows: list[RowUpdate]) -> None:
        # The store read every key first (a partial update of an absent key would insert a half-empty row).
        columns = list(rows[0][2])
        self._partial_update(store, columns, [[vin, sid, *(values[c] for c in columns)] for vin, sid, values in rows])


def _partial_insert(store: SqlStore, sql: str, params: Sequence[object]) -> None:
    """Run an INSERT as a partial update (only its columns change) on one connection, the mode set around it."""
    with store.locked():
        store.run("SET enable_unique_key_partial_update = true")
        try:
            store.run(sql, params)
        finally:
            store.run("SET enable_unique_key_partial_update = false")


def open_doris(url: str, read_only: bool = False) -> SqlStore:
    """``read_only``: SELECTs only, refused in the client (Doris has no read-only sessions; for a
    reader that cannot write at all, give it a user with SELECT_PRIV alone)."""
    info = parse_url(url, DEFAULT_PORT)
    # Doris has no MySQL-protocol prepared statements; pymysql interpolates
    # client-side, and autocommit makes every INSERT its own load.
    return SqlStore(
        info, DorisDialect(), lambda: connect(info, found_rows=False), (pymysql.MySQLError,), read_only=read_only
    )

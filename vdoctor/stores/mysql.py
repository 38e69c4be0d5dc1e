"""The MySQL/MariaDB L3 backend (``mysql://user:password@host:3306/db``), for teams without Doris.

The shared SQL code path (``sqlbase``) with the MySQL dialect: vectors are
float32 blobs (MariaDB 10.11 has no vector type), and both retrieval
channels filter in SQL (series, other vehicles, verified and valid as of the
asking session's event time, over current and archived versions) and score
in the client, exactly: the dense channel the candidates' vectors, the
lexical one BM25 over the candidates' ``search_tokens`` (the filtered set is
BM25's corpus). FULLTEXT indexes were not used: InnoDB leaves out tokens
shorter than ``innodb_ft_min_token_size`` (3 by default, a server setting:
every Chinese character and character pair of our tokens), and ranks by its
own weighting rather than BM25, so results would differ from the other
backends'; the client already reads the filtered set for the dense channel. The schema is ``sql/mysql/``,
applied by ``vdoctor memory init``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from vdoctor.errors import ConfigError
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.bm25 import Bm25Corpus, top_scored
from vdoctor.retrieval.tokens import query_terms
from vdoctor.stores.base import Scored, SimilarQuery, StaleVersion, check_dimensions, check_embedders
from vdoctor.stores.sqlbase import (
    AS_OF,
    AS_OF_ARCHIVED,
    COLUMNS,
    RECALL_COLUMN_LIST,
    VERIFIED,
    WRITE_COLUMN_LIST,
    WRITE_COLUMNS,
    ConnInfo,
    RowUpdate,
    SqlStore,
    TokenUpdate,
)
from vdoctor.stores.sqltypes import as_of_params, naive_utc, parse_url, statement_batches

try:
    import pymysql  # type: ignore[import-untyped]
except ImportError as e:  # pragma: no cover - pymysql is a declared dependency
    raise ConfigError("the mysql backend needs pymysql: pip install 'pymysql>=1.1'") from e

DEFAULT_PORT = 3306
CONNECT_TIMEOUT_S = 10
# One multi-row statement per this many records at most, and within
# ``sqltypes.MAX_STATEMENT_BYTES`` of values (half the servers' default
# max_allowed_packet: a record's summary source may be 64,000 characters).
BATCH_ROWS = 500
# (vin, session_id, version_from, archived): one version of a record.
_Key = tuple[str, str, Any, bool]


class MySqlDialect:
    name = "mysql"
    replace_verb = "REPLACE"

    def encode_vec(self, vector: Sequence[float]) -> object:
        return np.asarray(vector, dtype=np.float32).tobytes()

    def decode_vec(self, raw: object) -> list[float]:
        data = raw if isinstance(raw, bytes | bytearray | memoryview) else str(raw).encode("latin-1")
        return list(np.frombuffer(bytes(data), dtype=np.float32).tolist())

    def upsert(self, store: SqlStore, rows: list[tuple[MemoryRecord, datetime]]) -> None:
        marks = "(" + ", ".join(["%s"] * len(WRITE_COLUMNS)) + ")"
        encoded = [store.to_params(r, version_from) for r, version_from in rows]
        # Each statement within the packet a server accepts (a record's source may be 64,000 characters).
        for batch in statement_batches(encoded, BATCH_ROWS):
            params = [p for i in batch for p in encoded[i]]
            # REPLACE: a row with the same (vin, session_id) is replaced whole.
            store.run(
                f"REPLACE INTO {store.table} ({WRITE_COLUMN_LIST}) VALUES " + ", ".join([marks] * len(batch)), params
            )

    def _filtered(self, store: SqlStore, query: SimilarQuery, columns: str) -> list[tuple[_Key, tuple[Any, ...]]]:
        """``columns`` of every version the query may see (both tables, as of its time), with its key."""
        found: list[tuple[_Key, tuple[Any, ...]]] = []
        for table, archived in ((store.table, False), (store.history_table, True)):
            rows = store.query(
                f"SELECT vin, session_id, version_from, {columns} FROM {table} "
                f"WHERE series = %s AND vin <> %s AND {VERIFIED} AND {AS_OF_ARCHIVED if archived else AS_OF}",
                [query.series, query.exclude_vin, naive_utc(query.as_of), *as_of_params(query.as_of, archived)],
            )
            found += [((str(r[0]), str(r[1]), r[2], archived), tuple(r[3:])) for r in rows]
        return found

    def _fetch(self, store: SqlStore, query: SimilarQuery, winners: dict[_Key, float]) -> list[Scored]:
        """The winning versions' records (every filter applied again), best score first."""
        records: list[Scored] = []
        for archived in (False, True):
            wanted = [key for key in winners if key[3] is archived]
            if not wanted:
                continue
            table = store.history_table if archived else store.table
            one = "(vin = %s AND session_id = %s AND version_from = %s)"
            rows = store.query(
                f"SELECT {RECALL_COLUMN_LIST}, version_from FROM {table} WHERE ({' OR '.join([one] * len(wanted))}) "
                f"AND series = %s AND vin <> %s AND {VERIFIED} AND {AS_OF_ARCHIVED if archived else AS_OF}",
                [
                    *[x for key in wanted for x in key[:3]],
                    query.series,
                    query.exclude_vin,
                    naive_utc(query.as_of),
                    *as_of_params(query.as_of, archived),
                ],
            )
            for r in rows:
                key = (str(r[0]), str(r[1]), r[len(COLUMNS)], archived)
                records.append(Scored(store.from_row(r[: len(COLUMNS)]), winners[key]))
        records.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
        return records

    def similar(self, store: SqlStore, query: SimilarQuery) -> list[Scored]:
        """Filter in SQL (both tables, as of the query's time), score in the client, then fetch the top k."""
        vector = query.vector.astype(np.float32)
        rows = self._filtered(store, query, "embedder, summary_vec")
        blobs = [bytes(extra[1]) for _, extra in rows]
        check_dimensions(query, {len(b) // 4 for b in blobs})
        check_embedders(query, {str(extra[0] or "") for _, extra in rows})
        if not rows:
            return []
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rows), -1)
        scores = matrix @ vector
        k = min(query.k, len(rows))
        best = np.argpartition(-scores, k - 1)[:k] if len(rows) > k else np.arange(len(rows))
        return self._fetch(store, query, {rows[i][0]: float(scores[i]) for i in best})

    def lexical(self, store: SqlStore, query: SimilarQuery) -> list[Scored]:
        """BM25 in the client over the versions the query may see (the filtered set is the corpus)."""
        terms = query_terms(query.text)
        rows = self._filtered(store, query, "search_tokens")
        if not rows or not terms:
            return []
        scores = Bm25Corpus([str(extra[0] or "").split() for _, extra in rows]).scores(terms)
        return self._fetch(store, query, {rows[i][0]: score for i, score in top_scored(scores, query.k)})

    def set_vectors(self, store: SqlStore, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        done = 0
        for version, vector in rows:
            table = store.history_table if version.archived else store.table
            _, count = store.run(
                f"UPDATE {table} SET summary_vec = %s, embedder = %s "
                "WHERE vin = %s AND session_id = %s AND version_from = %s AND embedder = %s",
                [self.encode_vec(vector), embedder, version.vin, version.session_id,
                 naive_utc(version.version_from), version.embedder],
            )  # fmt: skip
            done += count
        return done

    def set_tokens(self, store: SqlStore, table: str, archived: bool, rows: list[TokenUpdate]) -> int:
        done = 0
        for vin, session_id, version_from, tokens in rows:
            _, count = store.run(
                f"UPDATE {table} SET search_tokens = %s WHERE vin = %s AND session_id = %s AND version_from = %s",
                [tokens, vin, session_id, naive_utc(version_from)],
            )
            done += count
        return done

    def update(self, store: SqlStore, rows: list[RowUpdate]) -> None:
        for vin, session_id, values in rows:
            sets = ", ".join(f"{column} = %s" for column in values)
            store.run(
                f"UPDATE {store.table} SET {sets} WHERE vin = %s AND session_id = %s",
                [*values.values(), vin, session_id],
            )


def open_mysql(url: str, read_only: bool = False) -> SqlStore:
    """``read_only``: every connection's session is READ ONLY as well, so the server refuses writes too."""
    info = parse_url(url, DEFAULT_PORT)
    return SqlStore(
        info, MySqlDialect(), lambda: connect(info, read_only=read_only), (pymysql.MySQLError,), read_only=read_only
    )


def connect(
    info: ConnInfo, found_rows: bool = True, read_only: bool = False, database: bool = True
) -> pymysql.connections.Connection:
    """A pymysql connection for a MySQL-protocol store (autocommit, utf8mb4, a connect timeout).

    ``found_rows``: UPDATE reports matched rows, not changed ones (MySQL/MariaDB;
    the Doris backend does not use it). ``read_only``: the session's
    transactions are READ ONLY (MySQL/MariaDB; Doris has no such mode).
    ``database=False``: to the server alone, for creating the URL's database
    (``scripts/doris_schema.py``).
    """
    return pymysql.connect(
        init_command="SET SESSION TRANSACTION READ ONLY" if read_only else None,
        host=info.host,
        port=info.port,
        user=info.user,
        password=info.password,
        database=info.database if database else None,
        charset="utf8mb4",
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT_S,
        client_flag=pymysql.constants.CLIENT.FOUND_ROWS if found_rows else 0,
    )

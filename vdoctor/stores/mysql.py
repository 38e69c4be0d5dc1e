"""The MySQL/MariaDB L3 backend (``mysql://user:password@host:3306/db``), for teams without Doris.

The shared SQL code path (``sqlbase``) with the MySQL dialect: vectors are
float32 blobs (MariaDB 10.11 has no vector type), and similar-case search
filters in SQL (series, other vehicles, verified and valid as of the asking
session's event time, over current and archived versions) and scores the
candidates' vectors in the client, exactly. The schema is ``sql/mysql/``,
applied by ``vdoctor memory init``.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from vdoctor.errors import ConfigError
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import Scored, SimilarQuery, top_k
from vdoctor.stores.sqlbase import (
    AS_OF,
    AS_OF_ARCHIVED,
    RECALL_COLUMN_LIST,
    VERIFIED,
    WRITE_COLUMN_LIST,
    WRITE_COLUMNS,
    ConnInfo,
    RowUpdate,
    SqlStore,
)
from vdoctor.stores.sqltypes import as_of_params, naive_utc, parse_url

try:
    import pymysql  # type: ignore[import-untyped]
except ImportError as e:  # pragma: no cover - pymysql is a declared dependency
    raise ConfigError("the mysql backend needs pymysql: pip install 'pymysql>=1.1'") from e

DEFAULT_PORT = 3306
CONNECT_TIMEOUT_S = 10
# One multi-row statement per this many records keeps packets well below
# max_allowed_packet (a 256-float vector is 1 KB).
BATCH_ROWS = 500


class MySqlDialect:
    name = "mysql"
    replace_verb = "REPLACE"

    def encode_vec(self, vector: list[float]) -> object:
        return np.asarray(vector, dtype=np.float32).tobytes()

    def decode_vec(self, raw: object) -> list[float]:
        data = raw if isinstance(raw, bytes | bytearray | memoryview) else str(raw).encode("latin-1")
        return [float(x) for x in np.frombuffer(bytes(data), dtype=np.float32)]

    def upsert(self, store: SqlStore, rows: list[tuple[MemoryRecord, datetime]]) -> None:
        marks = "(" + ", ".join(["%s"] * len(WRITE_COLUMNS)) + ")"
        for start in range(0, len(rows), BATCH_ROWS):
            batch = rows[start : start + BATCH_ROWS]
            params = [p for r, version_from in batch for p in store.to_params(r, version_from)]
            # REPLACE: a row with the same (vin, session_id) is replaced whole.
            store.run(
                f"REPLACE INTO {store.table} ({WRITE_COLUMN_LIST}) VALUES " + ", ".join([marks] * len(batch)), params
            )

    def similar(self, store: SqlStore, query: SimilarQuery) -> list[Scored]:
        """Filter in SQL (both tables, as of the query's time), score in the client, then fetch the top k."""
        vector = query.vector.astype(np.float32)
        keys: list[tuple[str, str, object, bool]] = []  # (vin, session_id, version_from, archived)
        blobs: list[bytes] = []
        for table, archived in ((store.table, False), (store.history_table, True)):
            rows = store.query(
                f"SELECT vin, session_id, version_from, summary_vec FROM {table} "
                f"WHERE series = %s AND vin <> %s AND {VERIFIED} AND {AS_OF_ARCHIVED if archived else AS_OF}",
                [query.series, query.exclude_vin, naive_utc(query.as_of), *as_of_params(query.as_of, archived)],
            )
            keys += [(str(r[0]), str(r[1]), r[2], archived) for r in rows]
            blobs += [bytes(r[3]) for r in rows]
        if not keys:
            return []
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(keys), -1)
        if matrix.shape[1] != vector.shape[0]:
            return []
        scores = matrix @ vector
        k = min(query.k, len(keys))
        best = np.argpartition(-scores, k - 1)[:k] if len(keys) > k else np.arange(len(keys))
        records = []
        for archived in (False, True):
            wanted = [keys[i] for i in best if keys[i][3] is archived]
            if not wanted:
                continue
            table = store.history_table if archived else store.table
            one = "(vin = %s AND session_id = %s AND version_from = %s)"
            records += [
                store.from_row(r)
                for r in store.query(
                    f"SELECT {RECALL_COLUMN_LIST} FROM {table} WHERE ({' OR '.join([one] * len(wanted))}) "
                    f"AND series = %s AND vin <> %s AND {VERIFIED} AND {AS_OF_ARCHIVED if archived else AS_OF}",
                    [
                        *[x for key in wanted for x in key[:3]],
                        query.series,
                        query.exclude_vin,
                        naive_utc(query.as_of),
                        *as_of_params(query.as_of, archived),
                    ],
                )
            ]
        if not records:
            return []
        return top_k(records, np.asarray([r.summary_vec for r in records], dtype=np.float32), vector, query.k)

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


def connect(info: ConnInfo, found_rows: bool = True, read_only: bool = False) -> pymysql.connections.Connection:
    """A pymysql connection for a MySQL-protocol store (autocommit, utf8mb4, a connect timeout).

    ``found_rows``: UPDATE reports matched rows, not changed ones (MySQL/MariaDB;
    the Doris backend does not use it). ``read_only``: the session's
    transactions are READ ONLY (MySQL/MariaDB; Doris has no such mode).
    """
    return pymysql.connect(
        init_command="SET SESSION TRANSACTION READ ONLY" if read_only else None,
        host=info.host,
        port=info.port,
        user=info.user,
        password=info.password,
        database=info.database,
        charset="utf8mb4",
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT_S,
        client_flag=pymysql.constants.CLIENT.FOUND_ROWS if found_rows else 0,
    )

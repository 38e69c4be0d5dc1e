"""The MySQL/MariaDB L3 backend (``mysql://user:password@host:3306/db``), for teams without Doris.

The shared SQL code path (``sqlbase``) with the MySQL dialect: vectors are
float32 blobs (MariaDB 10.11 has no vector type), and similar-case search
filters in SQL (series, verified, valid, other vehicles) and scores the
candidates' vectors in the client, exactly. The schema is ``sql/mysql/``,
applied by ``vdoctor memory init``.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from vdoctor.errors import ConfigError
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import Scored, SimilarQuery, top_k
from vdoctor.stores.sqlbase import COLUMN_LIST, COLUMNS, ConnInfo, SqlStore, naive_utc, parse_url

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

    def encode_vec(self, vector: list[float]) -> object:
        return np.asarray(vector, dtype=np.float32).tobytes()

    def decode_vec(self, raw: object) -> list[float]:
        data = raw if isinstance(raw, bytes | bytearray | memoryview) else str(raw).encode("latin-1")
        return [float(x) for x in np.frombuffer(bytes(data), dtype=np.float32)]

    def upsert(self, store: SqlStore, records: list[MemoryRecord]) -> None:
        row = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
        for start in range(0, len(records), BATCH_ROWS):
            batch = records[start : start + BATCH_ROWS]
            params = [p for r in batch for p in store.to_params(r)]
            # REPLACE: a row with the same (vin, session_id) is replaced whole.
            store.run(f"REPLACE INTO {store.table} ({COLUMN_LIST}) VALUES " + ", ".join([row] * len(batch)), params)

    def similar(self, store: SqlStore, query: SimilarQuery) -> list[Scored]:
        rows = store.query(
            f"SELECT vin, session_id, summary_vec FROM {store.table} "
            "WHERE series = %s AND recheck_ok = TRUE AND valid = TRUE AND vin <> %s",
            (query.series, query.exclude_vin),
        )
        if not rows:
            return []
        keys = [(str(r[0]), str(r[1])) for r in rows]
        matrix = np.frombuffer(b"".join(bytes(r[2]) for r in rows), dtype=np.float32).reshape(len(rows), -1)
        vector = query.vector.astype(np.float32)
        if matrix.shape[1] != vector.shape[0]:
            return []
        scores = matrix @ vector
        k = min(query.k, len(keys))
        best = np.argpartition(-scores, k - 1)[:k] if len(keys) > k else np.arange(len(keys))
        wanted = {keys[i]: float(scores[i]) for i in best}
        pairs = ", ".join(["(%s, %s)"] * len(wanted))
        found = store.query(
            f"SELECT {COLUMN_LIST} FROM {store.table} WHERE (vin, session_id) IN ({pairs}) "
            "AND series = %s AND recheck_ok = TRUE AND valid = TRUE AND vin <> %s",
            [*[x for key in wanted for x in key], query.series, query.exclude_vin],
        )
        records = [store.from_row(r) for r in found]
        if not records:
            return []
        return top_k(records, np.asarray([r.summary_vec for r in records], dtype=np.float32), vector, query.k)

    def set_recheck(self, store: SqlStore, vin: str, session_id: str, ok: bool, now: datetime) -> bool:
        # rowcount counts rows found, not only changed ones (CLIENT.FOUND_ROWS).
        _, n = store.run(
            f"UPDATE {store.table} SET recheck_ok = %s, updated_at = %s WHERE vin = %s AND session_id = %s",
            (ok, naive_utc(now), vin, session_id),
        )
        return n > 0

    def soft_delete(self, store: SqlStore, vin: str, now: datetime) -> int:
        _, n = store.run(
            f"UPDATE {store.table} SET valid = FALSE, updated_at = %s WHERE vin = %s AND valid = TRUE",
            (naive_utc(now), vin),
        )
        return n


def open_mysql(url: str) -> SqlStore:
    info = parse_url(url, DEFAULT_PORT)
    return SqlStore(info, MySqlDialect(), lambda: connect(info), (pymysql.MySQLError,))


def connect(info: ConnInfo, found_rows: bool = True) -> pymysql.connections.Connection:
    """A pymysql connection for a MySQL-protocol store (autocommit, utf8mb4, a connect timeout).

    ``found_rows``: UPDATE reports matched rows, not changed ones (MySQL/MariaDB;
    the Doris backend does not use it).
    """
    return pymysql.connect(
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

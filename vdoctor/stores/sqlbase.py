"""The SQL code path shared by the MySQL-protocol backends (``mysql`` and ``doris``).

Both speak the MySQL protocol through one DB-API driver (pymysql, imported
only in each backend's module). Everything but a handful of dialect
statements is the same SQL: reads, filters, ordering, dedup and
prompt-version lookups. A ``Dialect`` supplies the rest: how a vector is
written and read, the upsert statement, the similar-case search, and the
recheck / soft-delete updates.

All values are bound as driver parameters. The only text spliced into SQL is
the table name, taken from an allow-list, and (Doris) array literals built by
``vector_literal`` from validated finite floats.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import Scored, SimilarQuery

log = logging.getLogger(__name__)

# Connections a store keeps open at most. The diagnosis operator runs up to 64
# vehicles at once per subtask; with one connection their recalls and writes
# queued behind each other's network round trips.
POOL_SIZE = 8
# Identifiers are never taken from input as-is: the table comes from this list.
ALLOWED_TABLES = ("case_memory",)
DEFAULT_TABLE = "case_memory"
_DB_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# Where versioned DDL lives: sql/<dialect>/NNN_name.sql at the repository root.
SQL_DIR = Path(__file__).resolve().parents[2] / "sql"

COLUMNS = (
    "vin",
    "session_id",
    "series",
    "concluded_at",
    "summary",
    "summary_vec",
    "root_cause",
    "fix_action",
    "priority",
    "dtc_codes",
    "recheck_ok",
    "prompt_version",
    "valid",
    "updated_at",
    "kind",
    "merged_sessions",
    "source",
    "omitted",
)
COLUMN_LIST = ", ".join(COLUMNS)


@dataclass(frozen=True)
class ConnInfo:
    """A parsed ``scheme://user:password@host:port/db`` URL; ``redacted`` is safe to print."""

    scheme: str
    host: str
    port: int
    user: str
    password: str
    database: str
    table: str

    @property
    def redacted(self) -> str:
        who = f"{self.user}:***@" if self.password else f"{self.user}@"
        return f"{self.scheme}://{who}{self.host}:{self.port}/{self.database}"

    def __repr__(self) -> str:  # never show the password, even in tracebacks
        return f"ConnInfo({self.redacted!r}, table={self.table!r})"


def parse_url(url: str, default_port: int) -> ConnInfo:
    """Parse and validate a MySQL-protocol store URL; errors never echo the password."""
    try:
        parts = urlsplit(url)
        port = parts.port or default_port
    except ValueError as e:
        raise ConfigError(f"invalid memory URL (expected scheme://user:password@host:port/db): {e}") from None
    database = parts.path.lstrip("/")
    safe = f"{parts.scheme}://{parts.hostname or ''}:{port}/{database}"
    if not parts.hostname:
        raise ConfigError(f"memory URL {safe} has no host")
    if not _DB_NAME_RE.match(database):
        raise ConfigError(f"memory URL {safe}: the database name must match {_DB_NAME_RE.pattern}")
    table = parse_qs(parts.query).get("table", [DEFAULT_TABLE])[0]
    if table not in ALLOWED_TABLES:
        raise ConfigError(f"memory URL {safe}: table {table!r} is not one of {', '.join(ALLOWED_TABLES)}")
    return ConnInfo(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        database=database,
        table=table,
    )


def vector_literal(vector: Sequence[float]) -> str:
    """An SQL array literal ``[0.1,-0.2,...]`` from finite floats only (anything else raises)."""
    parts = []
    for x in vector:
        if isinstance(x, bool) or not isinstance(x, int | float | np.floating | np.integer):
            raise StoreError(f"a vector holds a {type(x).__name__}, not a number; refusing to build an SQL literal")
        value = float(x)
        if not math.isfinite(value):
            raise StoreError("a vector holds a non-finite value; refusing to build an SQL literal from it")
        parts.append(repr(value))
    if not parts:
        raise StoreError("refusing to build an SQL literal from an empty vector")
    return "[" + ",".join(parts) + "]"


def to_utc(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise StoreError(f"expected a DATETIME from the store, got {type(value).__name__}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def naive_utc(value: datetime) -> datetime:
    """DATETIME columns hold UTC without a zone."""
    return value.astimezone(UTC).replace(tzinfo=None)


def to_bool(value: object) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true")
    return bool(value)


class Cursor(Protocol):
    rowcount: int

    def execute(self, query: str, args: Any = ...) -> Any: ...

    def fetchall(self) -> Any: ...

    def close(self) -> Any: ...


class Connection(Protocol):
    def cursor(self) -> Any: ...

    def close(self) -> Any: ...


class Dialect(Protocol):
    """The statements that differ between MySQL/MariaDB and Doris."""

    name: str

    def encode_vec(self, vector: list[float]) -> object: ...

    def decode_vec(self, raw: object) -> list[float]: ...

    def upsert(self, store: SqlStore, records: list[MemoryRecord]) -> None: ...

    def similar(self, store: SqlStore, query: SimilarQuery) -> list[Scored]: ...

    def set_recheck(self, store: SqlStore, vin: str, session_id: str, ok: bool, now: datetime) -> bool: ...

    def soft_delete(self, store: SqlStore, vin: str, now: datetime) -> int: ...


class SqlStore:
    """One MemoryStore over a MySQL-protocol connection; the dialect supplies what differs."""

    def __init__(
        self,
        info: ConnInfo,
        dialect: Dialect,
        connect: Callable[[], Connection],
        driver_errors: tuple[type[BaseException], ...],
    ) -> None:
        self.info = info
        self.dialect = dialect
        self.table = info.table
        self._connect = connect
        self._errors = driver_errors
        # Idle connections; ``_open`` counts idle ones plus those lent out.
        self._idle: list[Connection] = []
        self._open = 0
        self._pool = threading.Condition()
        self._held = threading.local()
        with self._guard("connect"):
            self._idle.append(connect())
            self._open = 1

    # -- plumbing ------------------------------------------------------------------------

    def _describe(self, e: BaseException) -> str:
        text = str(e)
        if self.info.password:
            text = text.replace(self.info.password, "***")
        if "1146" in text or "doesn't exist" in text or "does not exist" in text:
            text += f" (create the schema: vdoctor memory init --memory {self.info.redacted})"
        return text

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except self._errors as e:
            where = f"{self.dialect.name} store {self.info.redacted}"
            # `from None`: the driver's exception (and its arguments) stays out of the chain.
            raise StoreError(f"{where}: {what} failed: {self._describe(e)}") from None

    @contextmanager
    def _lease(self) -> Iterator[_Lease]:
        """A connection for this thread: the one it holds (``locked``), or one from the pool."""
        held: _Lease | None = getattr(self._held, "lease", None)
        if held is not None:
            yield held
            return
        with self._pool:
            while not self._idle and self._open >= POOL_SIZE:
                self._pool.wait()
            if self._idle:
                lease = _Lease(self._idle.pop())
            else:
                lease = _Lease(None)  # connected on first use, outside the pool's lock
                self._open += 1
        try:
            yield lease
        finally:
            with self._pool:
                if lease.conn is None:
                    self._open -= 1
                else:
                    self._idle.append(lease.conn)
                self._pool.notify()

    def run(self, sql: str, params: Sequence[object] | None = None) -> tuple[list[tuple[Any, ...]], int]:
        """Run one statement; returns (rows, rowcount). Reconnects once on a dropped connection."""
        with self._lease() as lease, self._guard(sql.split(None, 1)[0].lower()):
            for attempt in (1, 2):
                try:
                    if lease.conn is None:
                        lease.conn = self._connect()
                    cur = lease.conn.cursor()
                    try:
                        cur.execute(sql, params)
                        rows = list(cur.fetchall() or [])
                        return rows, int(cur.rowcount)
                    finally:
                        cur.close()
                except self._errors as e:
                    if attempt == 2 or not _is_disconnect(e):
                        raise
                    log.warning("%s store %s: connection lost; reconnecting", self.dialect.name, self.info.redacted)
                    _close_quietly(lease.conn)
                    lease.conn = None
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold one connection for a sequence of statements that share session state."""
        with self._lease() as lease:
            self._held.lease = lease
            try:
                yield
            finally:
                self._held.lease = None

    def query(self, sql: str, params: Sequence[object] | None = None) -> list[tuple[Any, ...]]:
        return self.run(sql, params)[0]

    def from_row(self, row: Sequence[Any]) -> MemoryRecord:
        vin, sid, series, concluded, summary, vec, cause, fix, prio, codes = row[:10]
        ok, pv, valid, upd, kind, merged, src, om = row[10:18]
        return MemoryRecord(
            vin=vin,
            session_id=sid,
            series=series,
            concluded_at=to_utc(concluded),
            summary=summary,
            summary_vec=self.dialect.decode_vec(vec),
            root_cause=cause,
            fix_action=fix,
            priority=prio,
            dtc_codes=json.loads(codes),
            recheck_ok=to_bool(ok),
            prompt_version=pv,
            valid=bool(to_bool(valid)),
            updated_at=to_utc(upd),
            kind=kind,
            merged_sessions=json.loads(merged),
            source=src or "",
            omitted=json.loads(om or "[]"),
        )

    def to_params(self, r: MemoryRecord) -> list[object]:
        return [
            r.vin,
            r.session_id,
            r.series,
            naive_utc(r.concluded_at),
            r.summary,
            self.dialect.encode_vec(r.summary_vec),
            r.root_cause,
            r.fix_action,
            r.priority,
            json.dumps(r.dtc_codes),
            r.recheck_ok,
            r.prompt_version,
            r.valid,
            naive_utc(r.updated_at),
            r.kind.value,
            json.dumps(r.merged_sessions),
            r.source,
            json.dumps(r.omitted),
        ]

    def _select(self, where: str, params: Sequence[object], tail: str = "") -> list[MemoryRecord]:
        rows = self.query(f"SELECT {COLUMN_LIST} FROM {self.table} WHERE {where}{tail}", params)
        return [self.from_row(r) for r in rows]

    # -- the MemoryStore interface -----------------------------------------------------

    def upsert(self, record: MemoryRecord) -> None:
        self.dialect.upsert(self, [record])

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        if records:
            self.dialect.upsert(self, records)

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        found = self._select("vin = %s AND session_id = %s", (vin, session_id))
        return found[0] if found else None

    def own_history(self, vin: str, since: datetime, limit: int) -> list[MemoryRecord]:
        return self._select(
            "vin = %s AND valid = TRUE AND concluded_at >= %s",
            (vin, naive_utc(since), int(limit)),
            " ORDER BY concluded_at DESC, session_id DESC LIMIT %s",
        )

    def similar(self, query: SimilarQuery) -> list[Scored]:
        if query.k <= 0:
            return []
        return self.dialect.similar(self, query)

    def set_recheck(self, vin: str, session_id: str, ok: bool) -> bool:
        return self.dialect.set_recheck(self, vin, session_id, ok, _now())

    def soft_delete(self, vin: str) -> int:
        return self.dialect.soft_delete(self, vin, _now())

    def history(self, vin: str) -> list[MemoryRecord]:
        return self._select("vin = %s", (vin,), " ORDER BY concluded_at DESC, session_id DESC")

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        return self._select(
            "prompt_version = %s AND valid = TRUE", (prompt_version, int(limit)), " ORDER BY vin, session_id LIMIT %s"
        )

    def prompt_versions(self) -> list[str]:
        rows = self.query(f"SELECT DISTINCT prompt_version FROM {self.table} WHERE valid = TRUE", ())
        return sorted(str(r[0]) for r in rows)

    def find_duplicate(self, vin: str, root_cause: str, since: datetime) -> MemoryRecord | None:
        found = self._select(
            "vin = %s AND valid = TRUE AND root_cause = %s AND concluded_at >= %s",
            (vin, root_cause, naive_utc(since)),
            " ORDER BY concluded_at DESC, session_id DESC LIMIT 1",
        )
        return found[0] if found else None

    def count(self) -> int:
        return int(self.query(f"SELECT COUNT(*) FROM {self.table}")[0][0])

    def close(self) -> None:
        """Close the idle connections (a statement still running keeps its own until it ends)."""
        with self._pool:
            idle, self._idle = self._idle, []
            self._open -= len(idle)
        for conn in idle:
            _close_quietly(conn)

    # -- schema ------------------------------------------------------------------------------

    def init_schema(self) -> list[str]:
        """Apply sql/<dialect>/*.sql in order (idempotent DDL); returns the files applied."""
        applied = []
        for path in schema_files(self.dialect.name):
            for statement in split_statements(path.read_text(encoding="utf-8")):
                self.run(statement)
            applied.append(path.name)
        return applied


def schema_files(dialect: str) -> list[Path]:
    folder = SQL_DIR / dialect
    files = sorted(folder.glob("[0-9][0-9][0-9]_*.sql"))
    if not files:
        raise StoreError(f"no DDL files in {folder} (expected NNN_name.sql)")
    return files


def split_statements(text: str) -> list[str]:
    """Split a DDL file on ';' at line ends; ``--`` comment lines are dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    out = []
    for chunk in "\n".join(lines).split(";\n"):
        statement = chunk.strip().rstrip(";").strip()
        if statement:
            out.append(statement)
    return out


@dataclass
class _Lease:
    """A pooled connection lent to one thread; None until connected, or after it was dropped."""

    conn: Connection | None


def _close_quietly(conn: Connection | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing a broken connection may fail any way
            pass


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _is_disconnect(e: BaseException) -> bool:
    # MySQL client error codes: 2006 server has gone away, 2013 lost connection,
    # 0 / InterfaceError on a closed socket.
    code = e.args[0] if e.args and isinstance(e.args[0], int) else None
    return code in (0, 2006, 2013) or type(e).__name__ == "InterfaceError"

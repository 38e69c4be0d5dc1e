"""The SQL code path shared by the MySQL-protocol backends (``mysql`` and ``doris``).

Both speak the MySQL protocol through one DB-API driver (pymysql, imported
only in each backend's module). Everything but a handful of dialect
statements is the same SQL: reads, filters, ordering, dedup and
prompt-version lookups, and the event-time rules of every write (``base``:
read the record's current version, archive it into ``case_history`` when the
write replaces it, then write). A ``Dialect`` supplies the rest: how a vector
is written and read, the upsert statement, the similar-case search, and how
some columns of existing rows are updated.

A record's version current at event time T is its row in ``case_memory``
when ``version_from <= T``, else its row in ``case_history`` whose span
``[version_from, version_to)`` holds T; the as-of filters are in every recall
query's WHERE clause.

All values are bound as driver parameters. The only text spliced into SQL is
the table name, taken from an allow-list, and (Doris) array literals built by
``vector_literal`` from validated finite floats.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.text import dense_text, search_tokens
from vdoctor.stores.base import (
    Scored,
    SimilarQuery,
    StaleVersion,
    effective_at,
    newest_first,
    recheck_write,
    separate_channels,
    stale_recheck,
    upsert_version_from,
)
from vdoctor.stores.sqlaudit import SqlAudit
from vdoctor.stores.sqlschema import apply_schema, schema_files, split_statements
from vdoctor.stores.sqltypes import (
    ConnInfo,
    as_of_params,
    maybe_naive,
    maybe_utc,
    naive_utc,
    parse_url,
    to_bool,
    to_utc,
    vector_literal,
)

log = logging.getLogger(__name__)

# Connections a store keeps open at most. The diagnosis operator runs up to 64
# vehicles at once per subtask; with one connection their recalls and writes
# queued behind each other's network round trips.
POOL_SIZE = 8
# Keys per read of current versions (an OR of key pairs: both dialects take it).
_KEYS_PER_READ = 500
# Each table's archive of replaced versions (sql/<dialect>/002_event_time.sql).
HISTORY_TABLES = {"case_memory": "case_history"}

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
    "opened_ts",
    "verified_ts",
    "invalid_ts",
    "alert_text",
    "embedder",
)
COLUMN_LIST = ", ".join(COLUMNS)
# An upsert also writes the tokens the lexical channel searches, and where the record's current version starts.
WRITE_COLUMNS = (*COLUMNS, "search_tokens", "version_from")
WRITE_COLUMN_LIST = ", ".join(WRITE_COLUMNS)
# What an archived version keeps (no summary source: only current versions are re-extracted).
ARCHIVED_COLUMNS = (*(c for c in COLUMNS if c != "source"), "search_tokens")
# Recall reads, and reads of archived versions, leave the source out (in record column order).
RECALL_COLUMN_LIST = COLUMN_LIST.replace(", source,", ", '' AS source,")
# A version current at T (one bound parameter per %s, all T), not invalidated at or before T.
AS_OF = "version_from <= %s AND concluded_at <= %s AND (invalid_ts IS NULL OR invalid_ts > %s)"
AS_OF_ARCHIVED = AS_OF + " AND version_to > %s"
# A milestone (kind) is left out by ``SimilarQuery.admits`` on the rows found, not here: every column a
# Doris search filters on needs an index, and only records written before rechecks of milestones were
# refused can be one that is verified.
VERIFIED = "recheck_ok = TRUE AND verified_ts <= %s"


class Cursor(Protocol):
    rowcount: int

    def execute(self, query: str, args: Any = ...) -> Any: ...

    def fetchall(self) -> Any: ...

    def close(self) -> Any: ...


class Connection(Protocol):
    def cursor(self) -> Any: ...

    def close(self) -> Any: ...


@dataclass(frozen=True)
class Current:
    """What a write needs to know of a record's current version."""

    version_from: datetime
    recheck_ok: bool | None
    verified_ts: datetime | None
    # Whether the record holds merged sessions, and its conclusion (``stale_recheck``).
    merged: bool
    concluded_at: datetime


# (vin, session_id, {column: value}): some columns of one existing row.
RowUpdate = tuple[str, str, dict[str, object]]
# One version's new lexical tokens: (vin, session_id, version_from, search_tokens).
TokenUpdate = tuple[str, str, datetime, str]


class Dialect(Protocol):
    """The statements that differ between MySQL/MariaDB and Doris."""

    name: str
    # How a row replaces the one with the same key: REPLACE (MySQL) or INSERT (a Doris UNIQUE KEY table).
    replace_verb: str

    def encode_vec(self, vector: Sequence[float]) -> object: ...

    def decode_vec(self, raw: object) -> list[float]: ...

    def upsert(self, store: SqlStore, rows: list[tuple[MemoryRecord, datetime]]) -> None:
        """Write whole rows: each record with where its current version starts."""
        ...

    def similar(self, store: SqlStore, query: SimilarQuery) -> list[Scored]: ...

    def lexical(self, store: SqlStore, query: SimilarQuery) -> list[Scored]: ...

    def set_vectors(self, store: SqlStore, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        """Replace versions' vectors in place (``MemoryStore.set_vectors``)."""
        ...

    def update(self, store: SqlStore, rows: list[RowUpdate]) -> None:
        """Set the same columns of existing rows (every update names the same columns)."""
        ...

    def set_tokens(self, store: SqlStore, table: str, archived: bool, rows: list[TokenUpdate]) -> int:
        """Replace versions' ``search_tokens`` in place, each only while its version is still the one read;
        returns how many were written."""
        ...


class SqlStore(SqlAudit):
    """One MemoryStore over a MySQL-protocol connection; the dialect supplies what differs.

    ``read_only``: SELECTs only, anything else refused before it is sent (the memory inspector).
    """

    def __init__(
        self,
        info: ConnInfo,
        dialect: Dialect,
        connect: Callable[[], Connection],
        driver_errors: tuple[type[BaseException], ...],
        read_only: bool = False,
    ) -> None:
        self.info = info
        self.read_only = read_only
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
        text = self.info.redact(str(e))
        if "1146" in text or "doesn't exist" in text or "does not exist" in text:
            text += f" (create the schema: vdoctor memory init --memory {self.info.redacted})"
        elif "dim" in text.lower() and ("array" in text.lower() or "vector" in text.lower()):
            text += (
                " (the table's vector index was made for another embedder's dimension: see the README, "
                "Changing the embedder)"
            )
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
        """Run one statement; returns (rows, rowcount). Reconnects once on a dropped connection.

        Not within ``locked``: a statement of a held sequence is not run again on a new connection,
        where the sequence's session state (Doris's partial-update mode) is gone. The connection is
        dropped and the error raised; the caller's retry (``stores.retry``) runs the sequence again.
        """
        verb = sql.split(None, 1)[0].lower()
        if self.read_only and verb != "select":
            raise StoreError(f"{self.dialect.name} store {self.info.redacted} is open read-only: refusing {verb}")
        in_sequence = getattr(self._held, "lease", None) is not None
        with self._lease() as lease, self._guard(verb):
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
                    if not _is_disconnect(e):
                        raise
                    # A dropped connection never goes back to the pool, nor serves the rest of a sequence.
                    _close_quietly(lease.conn)
                    lease.conn = None
                    if attempt == 2 or in_sequence:
                        raise
                    log.warning("%s store %s: connection lost; reconnecting", self.dialect.name, self.info.redacted)
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
        opened, verified, invalid, alert, embedder = row[18:23]
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
            opened_ts=maybe_utc(opened),
            verified_ts=maybe_utc(verified),
            invalid_ts=maybe_utc(invalid),
            alert_text=alert or "",
            embedder=embedder or "",
        )

    def to_params(self, r: MemoryRecord, version_from: datetime) -> list[object]:
        """A row's values in ``WRITE_COLUMNS`` order."""
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
            maybe_naive(r.opened_ts),
            maybe_naive(r.verified_ts),
            maybe_naive(r.invalid_ts),
            r.alert_text,
            r.embedder,
            search_tokens(r.alert_text, r.dtc_codes, r.root_cause, r.fix_action, r.summary),
            naive_utc(version_from),
        ]

    def _select(self, where: str, params: Sequence[object], tail: str = "") -> list[MemoryRecord]:
        rows = self.query(f"SELECT {COLUMN_LIST} FROM {self.table} WHERE {where}{tail}", params)
        return [self.from_row(r) for r in rows]

    @property
    def history_table(self) -> str:
        return HISTORY_TABLES[self.table]

    # -- versions: what every write reads first, and the archive ------------------------

    def current(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Current]:
        """The current version of each of these records that exists."""
        found: dict[tuple[str, str], Current] = {}
        for start in range(0, len(keys), _KEYS_PER_READ):
            chunk = keys[start : start + _KEYS_PER_READ]
            where = " OR ".join(["(vin = %s AND session_id = %s)"] * len(chunk))
            rows = self.query(
                # Whether sessions were merged in, as the server answers it: an upsert reads this too, and
                # needs neither the list (up to every session of 30 days) sent nor parsed.
                f"SELECT vin, session_id, version_from, recheck_ok, verified_ts, merged_sessions <> '[]', "
                f"concluded_at FROM {self.table} WHERE {where}",
                [x for key in chunk for x in key],
            )
            for vin, sid, version_from, ok, verified, merged, concluded in rows:
                found[(vin, sid)] = Current(
                    to_utc(version_from), to_bool(ok), maybe_utc(verified), bool(to_bool(merged)), to_utc(concluded)
                )
        return found

    def archive(self, vin: str, session_id: str, until: datetime) -> None:
        """Keep the record's current version in the archive, closed at ``until`` (idempotent by its start)."""
        columns = ", ".join(ARCHIVED_COLUMNS)
        self.run(
            f"{self.dialect.replace_verb} INTO {self.history_table} ({columns}, version_from, version_to) "
            f"SELECT {columns}, version_from, %s FROM {self.table} WHERE vin = %s AND session_id = %s",
            (naive_utc(until), vin, session_id),
        )

    # -- the MemoryStore interface -----------------------------------------------------

    def upsert(self, record: MemoryRecord) -> None:
        self.upsert_many([record])

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        if not records:
            return
        current = self.current([(r.vin, r.session_id) for r in records])
        rows = []
        for r in records:
            cur = current.get((r.vin, r.session_id))
            start = upsert_version_from(cur.version_from if cur else None, r.concluded_at)
            if cur is not None and start > cur.version_from:
                self.archive(r.vin, r.session_id, start)  # a merge: the version it replaces is kept
            rows.append((r, start))
        self.dialect.upsert(self, rows)

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        found = self._select("vin = %s AND session_id = %s", (vin, session_id))
        return found[0] if found else None

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        found = []
        # At most one version of a record holds at a time: the current ones and the
        # archived ones are disjoint, and the newest ``limit`` of both are enough.
        for table, archived in ((self.table, False), (self.history_table, True)):
            rows = self.query(
                f"SELECT {RECALL_COLUMN_LIST} FROM {table} WHERE vin = %s AND concluded_at >= %s AND "
                f"{AS_OF_ARCHIVED if archived else AS_OF} ORDER BY concluded_at DESC, session_id DESC LIMIT %s",
                [vin, naive_utc(since), *as_of_params(as_of, archived), int(limit)],
            )
            found += [self.from_row(r).as_of(as_of) for r in rows]
        return newest_first([r for r in found if r.vin == vin and r.valid], limit)

    def similar(self, query: SimilarQuery) -> list[Scored]:
        if query.k <= 0:
            return []
        found = [Scored(s.record.as_of(query.as_of), s.score) for s in self.dialect.similar(self, query)]
        return [s for s in found if query.admits(s.record)]

    def lexical(self, query: SimilarQuery) -> list[Scored]:
        if query.k <= 0 or not query.text.strip():
            return []
        found = [Scored(s.record.as_of(query.as_of), s.score) for s in self.dialect.lexical(self, query)]
        return [s for s in found if query.admits(s.record)]

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        return separate_channels(self, query, dense_k, lexical_k)

    # -- re-embedding (``vdoctor memory reembed``) -----------------------------------------

    def count_stale(self, embedder: str) -> int:
        return sum(
            int(self.query(f"SELECT COUNT(*) FROM {table} WHERE embedder <> %s", (embedder,))[0][0])
            for table in (self.table, self.history_table)
        )

    def stale_versions(self, embedder: str, limit: int) -> list[StaleVersion]:
        found: list[StaleVersion] = []
        for table, archived in ((self.table, False), (self.history_table, True)):
            if len(found) >= limit:
                break
            rows = self.query(
                "SELECT vin, session_id, version_from, alert_text, dtc_codes, root_cause, fix_action, summary, "
                f"embedder FROM {table} WHERE embedder <> %s LIMIT %s",
                (embedder, limit - len(found)),
            )
            found += [
                StaleVersion(
                    vin, sid, to_utc(start), archived,
                    dense_text(alert or "", json.loads(codes), cause, fix, summary), model or "",
                )
                for vin, sid, start, alert, codes, cause, fix, summary, model in rows
            ]  # fmt: skip
        return found

    def set_vectors(self, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        return self.dialect.set_vectors(self, rows, embedder) if rows else 0

    # -- re-tokenising (``vdoctor memory retokenize``) -------------------------------------

    def retokenize(self, batch: int = 500, progress: Callable[[int, int], None] | None = None) -> tuple[int, int]:
        """Recompute every version's ``search_tokens`` with this build's tokeniser; returns (checked, rewritten:
        a version that a write replaced after it was read is left to its writer, who wrote its tokens).

        The tokens are written by the client (every backend tokenises alike), so rows written by a build with
        another tokeniser keep that one's tokens until this runs. Only rows whose tokens differ are written:
        running it again after an interruption skips what is done. ``progress(checked, rewritten)`` after
        each batch.
        """
        checked = rewritten = 0
        select = (
            "SELECT vin, session_id, version_from, alert_text, dtc_codes, root_cause, fix_action, summary, "
            "search_tokens"
        )
        order = "ORDER BY vin, session_id, version_from LIMIT %s"
        # Pages follow the key: each is a range read from where the last one ended (an OFFSET made the server
        # walk past every row before the page, quadratic over a large table), and no write meanwhile shifts it.
        after = "WHERE vin > %s OR (vin = %s AND (session_id > %s OR (session_id = %s AND version_from > %s)))"
        for table, archived in ((self.table, False), (self.history_table, True)):
            last: tuple[object, object, object] | None = None
            while True:
                if last is None:
                    rows = self.query(f"{select} FROM {table} {order}", (batch,))
                else:
                    vin, sid, start = last
                    rows = self.query(f"{select} FROM {table} {after} {order}", (vin, vin, sid, sid, start, batch))
                if not rows:
                    break
                last = (rows[-1][0], rows[-1][1], rows[-1][2])
                changed: list[TokenUpdate] = []
                for vin, sid, start, alert, codes, cause, fix, summary, stored in rows:
                    fresh = search_tokens(alert or "", json.loads(codes), cause, fix, summary)
                    if fresh != stored:
                        changed.append((vin, sid, to_utc(start), fresh))
                if changed:
                    rewritten += self.dialect.set_tokens(self, table, archived, changed)
                checked += len(rows)
                if progress is not None:
                    progress(checked, rewritten)
        return checked, rewritten

    def set_recheck(self, vin: str, session_id: str, ok: bool, at: datetime) -> bool:
        cur = self.current([(vin, session_id)]).get((vin, session_id))
        if cur is None or stale_recheck(cur.merged, cur.concluded_at, at):
            return False
        change = recheck_write(cur.recheck_ok, cur.verified_ts, cur.version_from, ok, at)
        if change.noop:
            return True
        if change.archive:
            self.archive(vin, session_id, change.version_from)  # an overturned verdict: keep the old one
        values: dict[str, object] = {
            "recheck_ok": ok,
            "verified_ts": maybe_naive(change.verified_ts),
            "version_from": naive_utc(change.version_from),
            "updated_at": naive_utc(_now()),
        }
        self.dialect.update(self, [(vin, session_id, values)])
        return True

    def soft_delete(self, vin: str, at: datetime) -> int:
        when = naive_utc(at)
        live = self.query(
            f"SELECT session_id, version_from FROM {self.table} WHERE vin = %s "
            "AND (valid = TRUE OR (invalid_ts > %s AND version_from <= %s))",
            (vin, when, when),
        )
        if not live:
            return 0
        now = naive_utc(_now())
        updates: list[RowUpdate] = [
            (vin, sid, {"valid": False, "invalid_ts": naive_utc(effective_at(at, to_utc(start))), "updated_at": now})
            for sid, start in live
        ]
        self.dialect.update(self, updates)
        return len(live)

    def history(self, vin: str) -> list[MemoryRecord]:
        return self._select("vin = %s", (vin,), " ORDER BY concluded_at DESC, session_id DESC")

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        return self._select(
            "prompt_version = %s AND valid = TRUE", (prompt_version, int(limit)), " ORDER BY vin, session_id LIMIT %s"
        )

    def prompt_versions(self) -> list[str]:
        rows = self.query(f"SELECT DISTINCT prompt_version FROM {self.table} WHERE valid = TRUE", ())
        return sorted(str(r[0]) for r in rows)

    def find_duplicate(
        self, vin: str, root_cause: str, since: datetime, until: datetime | None = None
    ) -> MemoryRecord | None:
        where = "vin = %s AND valid = TRUE AND root_cause = %s AND concluded_at >= %s"
        params: list[object] = [vin, root_cause, naive_utc(since)]
        if until is not None:
            where += " AND concluded_at <= %s"
            params.append(naive_utc(until))
        found = self._select(where, params, " ORDER BY concluded_at DESC, session_id DESC LIMIT 1")
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

    def init_schema(self, vector_dim: int) -> list[str]:
        """Apply sql/<dialect>/*.sql in order (idempotent), sized for ``vector_dim``; returns the files applied."""
        return apply_schema(self.dialect.name, self.run, self.info.database, vector_dim)


@dataclass
class _Lease:
    """A pooled connection lent to one thread; None until connected, or after it was dropped."""

    conn: Connection | None


__all__ = [
    "COLUMNS",
    "COLUMN_LIST",
    "ConnInfo",
    "SqlStore",
    "TokenUpdate",
    "naive_utc",
    "parse_url",
    "schema_files",
    "split_statements",
    "vector_literal",
]


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

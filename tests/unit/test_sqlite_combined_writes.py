"""Upserts of concurrent callers combined into one statement: the same rows, seqs and versions as one at a time."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import wait_until
from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores import SimilarQuery
from vdoctor.stores import sqlite as sqlite_store
from vdoctor.stores.sqlite import SqliteStore

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 1, tzinfo=UTC)
LATER = T0 + timedelta(days=30)


def rec(i: int, concluded_at: datetime = T0, summary: str = "") -> MemoryRecord:
    vin = f"LSVAU2180N2{i:06d}"
    return MemoryRecord(
        vin=vin, session_id=f"{vin}-s", series="EV-A", concluded_at=concluded_at + timedelta(hours=i),
        summary=summary or f"coolant pump case {i}", summary_vec=[1.0, float(i)], root_cause="pump", fix_action="fix",
        priority="P2", recheck_ok=True, verified_ts=concluded_at + timedelta(hours=i), prompt_version="v1",
        updated_at=T0,
    )  # fmt: skip


def upsert_together(store: SqliteStore, records: list[MemoryRecord]) -> list[Future[None]]:
    """Upsert each record from its own thread while the write lock is held: the first record's caller
    writes alone (it waits for the lock), the others wait together and are written by the next call.
    The futures, in the records' order, once every write is done."""
    pool = ThreadPoolExecutor(len(records))
    with store._lock:
        futures = [pool.submit(store.upsert, records[0])]
        # The first caller holds the call, waiting for the lock.
        wait_until(lambda: store._upserts._busy, timeout_s=10.0)
        futures += [pool.submit(store.upsert, r) for r in records[1:]]
        wait_until(lambda: store._upserts.waiting == len(records) - 1, timeout_s=10.0)
    pool.shutdown(wait=True)
    return futures


def seqs(store: SqliteStore) -> list[int]:
    return [int(s) for (s,) in store._conn.execute("SELECT seq FROM case_memory ORDER BY seq").fetchall()]


def test_writers_that_wait_together_share_one_statement_and_each_row_gets_its_own_seq(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "m.db"))
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    futures = upsert_together(store, [rec(i) for i in range(64)])
    assert all(f.result() is None for f in futures)
    # The first caller alone, then one statement for the 63 that waited.
    assert (store._upserts.calls, store._upserts.size) == (2, 64)
    # The trace repeats a statement's text for each trigger it fires: count each execution once.
    upserts = [s for i, s in enumerate(statements) if s.startswith("INSERT INTO") and statements[i - 1 : i] != [s]]
    assert len(upserts) == 2
    assert store.count() == 64
    assert seqs(store) == list(range(1, 65))
    assert store._seq() == 64
    # The vector index catches up on rows written together.
    query = SimilarQuery(series="EV-A", vector=np.array([1.0, 5.0], dtype=np.float32), k=3, exclude_vin="NOBODY",
                         as_of=LATER)  # fmt: skip
    found = store.similar(query)
    assert len(found) == 3
    store.close()


def history_rows(store: SqliteStore) -> list[tuple[object, ...]]:
    rows = store._conn.execute(
        "SELECT vin, session_id, version_from, version_to, summary, recheck_ok FROM case_history ORDER BY vin"
    ).fetchall()
    return [tuple(r) for r in rows]


def test_a_combined_write_leaves_the_same_records_and_versions_as_one_write_each(tmp_path: Path) -> None:
    one_by_one = SqliteStore(str(tmp_path / "a.db"))
    combined = SqliteStore(str(tmp_path / "b.db"))
    first = [rec(i) for i in range(8)]
    # Half of them come back concluded later (a new version: the old one is archived), half are new.
    second = [rec(i, LATER, summary=f"pump case {i}, again") for i in range(4)] + [rec(i) for i in range(8, 12)]
    for store in (one_by_one, combined):
        for r in first:
            store.upsert(r)
    for r in second:
        one_by_one.upsert(r)
    assert all(f.result() is None for f in upsert_together(combined, second))
    assert combined._upserts.calls == len(first) + 2  # the second wave: its first caller, then the rest together
    for i in range(12):
        vin = rec(i).vin
        assert combined.history(vin) == one_by_one.history(vin)
        assert combined.versions(vin) == one_by_one.versions(vin)
    assert history_rows(combined) == history_rows(one_by_one) and len(history_rows(combined)) == 4
    assert sorted(seqs(combined)) == sorted(seqs(one_by_one))
    one_by_one.close()
    combined.close()


def test_one_bad_record_fails_only_its_own_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteStore(str(tmp_path / "m.db"))
    records = [rec(i) for i in range(8)]
    bad_vin = records[5].vin
    to_row = sqlite_store.to_row

    def unbindable(record: MemoryRecord, no_priority: str | None = None) -> tuple[object, ...]:
        row = to_row(record, no_priority)
        # A value SQLite cannot bind: its statement fails, as a row the database refused would.
        return (*row[:4], object(), *row[5:]) if record.vin == bad_vin else row

    monkeypatch.setattr(sqlite_store, "to_row", unbindable)
    combined = sqlite_store._combined_upsert
    attempts: list[int] = []

    def counted(rows: int) -> str:
        attempts.append(rows)
        return combined(rows)

    monkeypatch.setattr(sqlite_store, "_combined_upsert", counted)
    futures = upsert_together(store, records)
    assert attempts == [7]  # tried together with the bad row, then each caller's row on its own
    with pytest.raises(StoreError):
        futures[5].result()
    assert all(f.result() is None for i, f in enumerate(futures) if i != 5)
    assert store.count() == 7 and store.get(bad_vin, records[5].session_id) is None
    store.close()


def test_writers_of_one_record_twice_are_written_one_after_the_other(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "m.db"))
    records = [rec(i) for i in range(6)] + [rec(3, LATER, summary="pump case 3, again")]
    assert all(f.result() is None for f in upsert_together(store, records))
    assert store.count() == 6
    assert seqs(store) == sorted(set(seqs(store)))  # distinct seqs
    store.close()


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "m.db"))
    barrier = threading.Barrier(32)

    def write(i: int) -> None:
        barrier.wait()
        for j in range(5):
            store.upsert(rec(i * 5 + j))

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(write, range(32)))
    assert store.count() == 160
    assert seqs(store) == list(range(1, 161))
    store.close()

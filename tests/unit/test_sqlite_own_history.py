"""Own history in one statement, from the decoded rows recall shares: the records the plain reads gave."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from vdoctor.records import MemoryRecord, PackedVector
from vdoctor.stores import sqlite as sqlite_store
from vdoctor.stores.base import newest_first
from vdoctor.stores.sqlite import SqliteStore
from vdoctor.stores.sqlite_rows import epoch, from_row
from vdoctor.stores.sqlite_schema import HISTORY_SELECT

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 1, tzinfo=UTC)
VINS = [f"LSVAU2180N2{i:06d}" for i in range(4)]


def plain_own_history(store: SqliteStore, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
    """The form this replaced: one statement per table, every row decoded afresh."""
    params = {"vin": vin, "since": epoch(since), "at": epoch(as_of), "limit": int(limit)}
    tail = " AND vin = :vin AND concluded_at >= :since ORDER BY concluded_at DESC, session_id DESC LIMIT :limit"
    rows = store._query(f"SELECT {sqlite_store._RECALL_COLUMNS} FROM case_memory WHERE {sqlite_store._AS_OF}{tail}",
                        params)  # fmt: skip
    rows += store._query(
        f"SELECT {HISTORY_SELECT} FROM case_history WHERE {sqlite_store._AS_OF_ARCHIVED}{tail}", params
    )
    found = [from_row(r).as_of(as_of) for r in rows]
    return newest_first([r for r in found if r.vin == vin and r.valid], limit)


def record(rng: random.Random, vin: str, session: int, hours: int) -> MemoryRecord:
    return MemoryRecord(
        vin=vin, session_id=f"{vin}-{session}", series="EV-A", concluded_at=T0 + timedelta(hours=hours),
        summary=f"case {session} at {hours}", summary_vec=[rng.random(), rng.random()], root_cause="pump",
        fix_action="fix", priority="P2", prompt_version="v1", updated_at=T0,
    )  # fmt: skip


def test_own_history_gives_what_the_two_plain_reads_gave_through_writes_of_every_kind(tmp_path: Path) -> None:
    rng = random.Random(5)
    store = SqliteStore(str(tmp_path / "m.db"))
    hours = 0
    for step in range(300):
        hours += rng.randint(0, 3)
        vin = rng.choice(VINS)
        session = rng.randint(0, 5)
        action = rng.random()
        if action < 0.5:  # a new case, or the same session concluded again later (its version is archived)
            store.upsert(record(rng, vin, session, hours))
        elif action < 0.9:  # a recheck: a first verdict, the same again, or an overturned one (archives)
            store.set_recheck(vin, f"{vin}-{session}", rng.random() < 0.7, T0 + timedelta(hours=hours))
        elif action < 0.93:
            store.soft_delete(vin, T0 + timedelta(hours=hours))
        for _ in range(3):  # read as of now, and of earlier times (archived versions hold there)
            asker = rng.choice(VINS)
            as_of = T0 + timedelta(hours=rng.randint(0, hours + 2))
            since = as_of - timedelta(hours=rng.choice([1, 10, 1000]))
            limit = rng.choice([1, 2, 10])
            expected = plain_own_history(store, asker, since, limit, as_of)
            assert store.own_history(asker, since, limit, as_of) == expected, step
            assert store.own_history(asker, since, limit, as_of) == expected, step  # decoded before
    assert store._conn.execute("SELECT COUNT(*) FROM case_history").fetchone()[0] > 10
    store.close()


def test_records_read_back_keep_their_vector_as_float32_bytes_with_the_values_written(tmp_path: Path) -> None:
    """What recall keeps decoded (up to 1,024 records) holds 2 KB per 512-dimensional vector, not a list of floats."""
    rng = random.Random(9)
    store = SqliteStore(str(tmp_path / "m.db"))
    written = record(rng, VINS[0], 1, 1).model_copy(update={"summary_vec": [rng.uniform(-1, 1) for _ in range(512)]})
    store.upsert(written)
    (found,) = store.own_history(VINS[0], T0, 10, T0 + timedelta(days=1))
    assert isinstance(found.summary_vec, PackedVector)
    assert found.summary_vec == np.float32(written.summary_vec).tolist()
    assert found.model_copy(update={"summary_vec": written.summary_vec, "updated_at": written.updated_at}) == written
    store.close()

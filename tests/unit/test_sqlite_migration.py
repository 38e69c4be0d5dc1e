"""A sqlite store file written before event times were kept migrates when it is opened.

The old file is made with the schema the store had before (written out here
as it was), rows included; expected values follow the migration's documented
assumption (vdoctor/stores/sqlite_schema.py): every row becomes one version
from its conclusion, a recheck result counts from the row's last write, a
soft-deleted row is invalid from its conclusion, opened_ts is unknown.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from vdoctor.records import MemoryRecord
from vdoctor.stores import SimilarQuery
from vdoctor.stores.base import EmbedderMismatch
from vdoctor.stores.sqlite import SqliteStore

pytestmark = pytest.mark.unit

# The schema of the embedded store before event times (as created by that version).
OLD_SCHEMA = """
CREATE TABLE case_memory (
    vin TEXT NOT NULL, session_id TEXT NOT NULL, series TEXT NOT NULL, concluded_at INTEGER NOT NULL,
    summary TEXT NOT NULL, summary_vec BLOB NOT NULL, root_cause TEXT NOT NULL, fix_action TEXT NOT NULL,
    priority TEXT NOT NULL, dtc_codes TEXT NOT NULL, recheck_ok INTEGER, prompt_version TEXT NOT NULL,
    valid INTEGER NOT NULL, updated_at INTEGER NOT NULL, kind TEXT NOT NULL DEFAULT 'final',
    merged_sessions TEXT NOT NULL DEFAULT '[]', source TEXT NOT NULL DEFAULT '', seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (vin, session_id)
);
CREATE INDEX idx_similar ON case_memory (series, recheck_ok, valid);
CREATE INDEX idx_own ON case_memory (vin, concluded_at);
CREATE TABLE vd_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO vd_meta (key, value) VALUES ('seq', '4');
"""
C = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
WRITTEN = C + timedelta(days=2)  # the clock time of the rows' last write
VERIFIED, UNVERIFIED, DELETED, FAILED = (f"LSVAU2180N21000{i:02d}" for i in range(1, 5))
ASKING = "LSVAU2180N2199999"


def _old_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SCHEMA)
    vec = np.asarray([1.0, 0.0], dtype=np.float32).tobytes()
    for seq, (vin, ok, valid) in enumerate(
        ((VERIFIED, 1, 1), (UNVERIFIED, None, 1), (DELETED, 1, 0), (FAILED, 0, 1)), start=1
    ):
        conn.execute(
            "INSERT INTO case_memory VALUES (?, ?, 'EV-A', ?, 'old case', ?, 'cause', 'fix', 'P2', ?, ?, 'v1', ?, ?, "
            "'final', '[]', '', ?)",
            (vin, f"{vin}-20261101T080000", int(C.timestamp()), vec, json.dumps(["P0A7F"]), ok, valid,
             int(WRITTEN.timestamp()), seq),
        )  # fmt: skip
    conn.commit()
    conn.close()


def _similar(store: SqliteStore, at: datetime) -> list[str]:
    query = SimilarQuery(ASKING, "EV-A", np.asarray([1.0, 0.0], dtype=np.float32), 10, as_of=at)
    return [s.record.vin for s in store.similar(query)]


def _own(store: SqliteStore, vin: str, at: datetime) -> list[MemoryRecord]:
    return store.own_history(vin, at - timedelta(days=730), 10, as_of=at)


def test_an_old_file_gets_event_times_and_versions_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_file(path)
    store = SqliteStore(str(path))
    by_vin = {v: store.history(v)[0] for v in (VERIFIED, UNVERIFIED, DELETED, FAILED)}
    assert {v: (r.opened_ts, r.verified_ts, r.invalid_ts) for v, r in by_vin.items()} == {
        VERIFIED: (None, WRITTEN, None),
        UNVERIFIED: (None, None, None),
        DELETED: (None, WRITTEN, C),
        FAILED: (None, WRITTEN, None),
    }
    # A verdict of unknown time counts from the row's last write: never verified too early.
    assert _similar(store, WRITTEN - timedelta(seconds=1)) == []
    assert _similar(store, WRITTEN) == [VERIFIED]
    [early] = _own(store, VERIFIED, C)
    assert early.recheck_ok is None  # the verdict was not known yet
    # A row deleted at an unknown time is never recalled, as before the migration.
    assert _own(store, DELETED, C) == [] and _own(store, DELETED, WRITTEN) == []
    assert [r.session_id for r in _own(store, UNVERIFIED, C)] == [f"{UNVERIFIED}-20261101T080000"]
    assert _own(store, UNVERIFIED, C - timedelta(seconds=1)) == []
    meta = dict(store._conn.execute("SELECT key, value FROM vd_meta").fetchall())
    assert meta["schema"] == "3"
    store.close()


def test_an_old_file_gets_what_records_are_found_by_on_open(tmp_path: Path) -> None:
    """Rows written before issue 15 get an empty alert text and embedder, and the tokens of their indexed text."""
    path = tmp_path / "old.db"
    _old_file(path)
    store = SqliteStore(str(path))
    record = store.history(VERIFIED)[0]
    assert (record.alert_text, record.embedder) == ("", "")
    tokens = store._conn.execute("SELECT search_tokens FROM case_memory WHERE vin = ?", (VERIFIED,)).fetchone()[0]
    # alert text (none), codes, root cause, fix, summary: "P0A7F", "cause", "fix", "old case"
    assert tokens == "p0a7f caus fix old case"
    query = SimilarQuery(ASKING, "EV-A", np.asarray([1.0, 0.0], dtype=np.float32), 5, WRITTEN, text="old cause")
    assert [s.record.vin for s in store.lexical(query)] == [VERIFIED]
    # The embedder that made the old vectors is unknown: a query that names its embedder is refused.
    named = SimilarQuery(ASKING, "EV-A", np.asarray([1.0, 0.0], dtype=np.float32), 5, WRITTEN, embedder="m/2")
    with pytest.raises(EmbedderMismatch, match="an unrecorded model"):
        store.similar(named)
    store.close()


def test_another_tokeniser_recomputes_every_rows_tokens_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_file(path)
    SqliteStore(str(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE case_memory SET search_tokens = 'stale'")
    conn.execute("UPDATE vd_meta SET value = 'an-older-tokeniser' WHERE key = 'tokenizer'")
    conn.commit()
    conn.close()
    store = SqliteStore(str(path))
    rows = {t for (t,) in store._conn.execute("SELECT search_tokens FROM case_memory")}
    assert rows == {"p0a7f caus fix old case"}
    store.close()


def test_opening_a_migrated_file_again_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_file(path)
    SqliteStore(str(path)).close()
    dump = list(sqlite3.connect(path).iterdump())
    SqliteStore(str(path)).close()
    assert list(sqlite3.connect(path).iterdump()) == dump


def test_a_migrated_record_keeps_its_version_when_a_merge_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_file(path)
    store = SqliteStore(str(path))
    old = store.history(VERIFIED)[0]
    later = C + timedelta(days=10)
    store.upsert(old.model_copy(update={"summary": "merged case", "concluded_at": later, "recheck_ok": None,
                                        "verified_ts": None, "merged_sessions": [f"{VERIFIED}-later"]}))  # fmt: skip
    assert [r.summary for r in _own(store, VERIFIED, WRITTEN)] == ["old case"]
    assert [r.summary for r in _own(store, VERIFIED, later)] == ["merged case"]
    assert _similar(store, WRITTEN) == [VERIFIED] and _similar(store, later) == []
    store.close()


def test_two_subtasks_may_open_a_new_file_at_the_same_time(tmp_path: Path) -> None:
    """A job at parallelism 2 opens the store from both subtasks at once; neither may fail on the other's lock.

    Before the journal-mode switch waited out the other connection, about 1 in 12 of these pairs
    failed with "database is locked" (it failed a CI run of the bad-input corpus at parallelism 2)."""
    for i in range(60):
        path = str(tmp_path / f"m{i}.db")
        errors: list[BaseException] = []

        def open_and_read(path: str = path, errors: list[BaseException] = errors) -> None:
            try:
                store = SqliteStore(path)
                store.count()
                store.close()
            except BaseException as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(e)

        threads = [threading.Thread(target=open_and_read) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"pair {i}: {errors[0]!r}"

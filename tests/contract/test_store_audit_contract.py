"""The read-only views (``stores.audit``) over every store backend, and read-only opening.

Every version a record had, with the span of event time it held, is what the
memory inspector's timeline and recall explainer show; expected values are
worked out by hand from each test's writes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.contract.test_store_contract import E1, T0, VIN_A, VIN_B, VIN_C, rec
from vdoctor.errors import StoreError
from vdoctor.records import RecordKind
from vdoctor.stores import MemoryStore, open_store
from vdoctor.stores.audit import RecordVersion, audit_reads

pytestmark = pytest.mark.contract


def t(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def spans(versions: list[RecordVersion]) -> list[tuple[str, datetime, datetime | None]]:
    return [(v.record.session_id, v.version_from, v.version_to) for v in versions]


def test_versions_keep_every_span_a_record_held(store: MemoryStore) -> None:
    audit = audit_reads(store)
    first = rec(VIN_A, hours=0, recheck_ok=True, source='{"kept": "for re-extraction"}')
    store.upsert(first)
    # The same fault again 10 days later: a merge, whose new version starts at its conclusion.
    later = rec(VIN_A, hours=240)
    store.upsert(later.model_copy(update={"session_id": first.session_id, "merged_sessions": [later.session_id]}))
    # Its recheck passes, then is overturned: the passing verdict's version is kept.
    assert store.set_recheck(VIN_A, first.session_id, True, t(250))
    assert store.set_recheck(VIN_A, first.session_id, False, t(260))
    other = rec(VIN_A, hours=100, dtc_codes=["P0AA6"], root_cause="insulation fault")
    store.upsert(other)
    assert store.soft_delete(VIN_A, t(300)) == 2
    store.upsert(rec(VIN_B, hours=5))

    versions = audit.versions(VIN_A)
    sid = first.session_id
    assert spans(versions) == [
        (sid, t(0), t(240)),
        (sid, t(240), t(260)),
        (sid, t(260), None),
        (other.session_id, t(100), None),
    ]
    oldest, merged, current, _ = (v.record for v in versions)
    assert (oldest.recheck_ok, oldest.merged_sessions, oldest.concluded_at) == (True, [], t(0))
    assert (merged.recheck_ok, merged.verified_ts, merged.merged_sessions) == (True, t(250), [later.session_id])
    assert (current.recheck_ok, current.verified_ts) == (False, t(260))
    assert (current.valid, current.invalid_ts) == (False, t(300))
    assert [v.current for v in versions] == [False, False, True, True]
    assert all(v.record.source == "" for v in versions)  # the source is read by get() only
    assert versions[1].holds_at(t(240)) and not versions[1].holds_at(t(260)) and versions[2].holds_at(t(9999))
    assert audit.versions(VIN_C) == []


def test_series_versions_are_newest_first_and_limited(store: MemoryStore) -> None:
    audit = audit_reads(store)
    b = rec(VIN_B, hours=0, recheck_ok=True)
    store.upsert(b)
    store.upsert(rec(VIN_B, hours=48).model_copy(update={"session_id": b.session_id}))  # archives b's first version
    c = rec(VIN_C, hours=24, recheck_ok=True)
    store.upsert(c)
    store.upsert(rec(VIN_A, hours=12, series="ICE-C"))
    found = audit.series_versions("EV-A", 10)
    assert spans(found) == [(b.session_id, t(48), None), (c.session_id, t(24), None), (b.session_id, t(0), t(48))]
    for v in found:  # vectors come with them (for scores); Doris's are padded to its fixed dimension
        assert v.record.summary_vec[: len(E1)] == pytest.approx(E1)
    assert spans(audit.series_versions("EV-A", 2)) == spans(found)[:2]
    assert spans(audit.series_versions("ICE-C", 10)) == [(f"{VIN_A}-{t(12):%Y%m%dT%H%M%S}", t(12), None)]


def test_fleet_counts_and_recent(store: MemoryStore) -> None:
    audit = audit_reads(store)
    empty = audit.fleet_counts()
    assert (empty.records, empty.vehicles, empty.archived_versions, empty.verified_share) == (0, 0, 0, 0.0)
    a = rec(VIN_A, hours=0)
    store.upsert(a)
    store.upsert(rec(VIN_A, hours=24).model_copy(update={"session_id": a.session_id}))  # one archived version
    store.upsert(rec(VIN_B, hours=1, recheck_ok=True))
    store.upsert(rec(VIN_B, hours=30, recheck_ok=False, dtc_codes=["P0AA6"], root_cause="insulation fault"))
    store.upsert(rec(VIN_C, hours=2, series="ICE-C", kind=RecordKind.MILESTONE, priority=None))
    assert store.soft_delete(VIN_C, t(3)) == 1
    counts = audit.fleet_counts()
    assert (counts.records, counts.vehicles, counts.archived_versions) == (4, 3, 1)
    assert (counts.final, counts.milestones, counts.invalid) == (3, 1, 1)
    assert [counts.final_with_recheck(x) for x in (True, False, None)] == [1, 1, 1]
    assert counts.verified_share == pytest.approx(1 / 3)
    assert counts.by_series() == {"EV-A": 3, "ICE-C": 1}
    assert [(r.vin, r.concluded_at) for r in audit.recent(3)] == [(VIN_B, t(30)), (VIN_A, t(24)), (VIN_C, t(2))]
    assert all(r.source == "" for r in audit.recent(10))


def test_a_store_opened_read_only_reads_and_never_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    writer = open_store(url)
    b = rec(VIN_B, hours=0, recheck_ok=True)
    writer.upsert(b)
    writer.close()
    db = tmp_path / "memory.db"
    before, content = sorted(p.name for p in tmp_path.iterdir()), db.read_bytes()
    reader = open_store(url, read_only=True)
    try:
        assert [r.session_id for r in reader.history(VIN_B)] == [b.session_id]
        assert audit_reads(reader).fleet_counts().records == 1
        with pytest.raises(StoreError, match="readonly|read-only"):
            reader.upsert(rec(VIN_C, hours=1))
        with pytest.raises(StoreError):
            reader.soft_delete(VIN_B, t(5))
    finally:
        reader.close()
    # Not even the vector index cache is written by a reader. (SQLite's WAL mode gives every reader
    # the -wal and -shm files it reads through; a read-only one cannot remove them again.)
    assert db.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == before
    assert (tmp_path / "memory.db-wal").stat().st_size == 0
    with pytest.raises(StoreError, match="no such file"):
        open_store(f"sqlite:///{tmp_path / 'absent.db'}", read_only=True)


def test_a_mysql_store_opened_read_only_is_refused_writes_by_the_server(mariadb_url: str) -> None:
    from vdoctor.stores.sqlbase import SqlStore

    writer = open_store(mariadb_url)
    writer.upsert(rec(VIN_B, hours=0))
    reader = open_store(mariadb_url, read_only=True)
    try:
        assert len(reader.history(VIN_B)) == 1
        with pytest.raises(StoreError, match="read-only: refusing"):
            reader.upsert(rec(VIN_C, hours=1))
        # Past the client's guard, the server's READ ONLY session refuses the write as well.
        assert isinstance(reader, SqlStore)
        reader.read_only = False
        with pytest.raises(StoreError, match="READ ONLY"):
            reader.run("DELETE FROM case_memory")
        assert writer.count() == 1
    finally:
        reader.close()
        writer.close()

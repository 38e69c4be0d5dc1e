"""A MariaDB store created before event times were kept migrates with ``vdoctor memory init``.

The database gets only ``sql/mysql/001`` and rows written the old way; then
``memory init`` applies 002 (twice: it must be idempotent). Expected values
follow the documented assumption in ``sql/mysql/002_event_time.sql``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from jobs.cli import main
from tests.services.mariadb import MariaDB
from vdoctor.stores import SimilarQuery, open_store
from vdoctor.stores.sqlschema import schema_files, split_statements

pytestmark = pytest.mark.integration

C = datetime(2026, 11, 1, 8, 0)  # DATETIME columns hold UTC without a zone
WRITTEN = C + timedelta(days=2)
VERIFIED, DELETED = "LSVAU2180N2100001", "LSVAU2180N2100002"


def utc(naive: datetime) -> datetime:
    return naive.replace(tzinfo=UTC)


def test_memory_init_migrates_rows_written_before_event_times(
    mariadb: MariaDB, mariadb_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = mariadb.admin()
    conn.select_db(mariadb_database)
    with conn.cursor() as cur:
        [first] = [f for f in schema_files("mysql") if f.name.startswith("001")]
        for statement in split_statements(first.read_text()):
            cur.execute(statement)
        vec = np.asarray([1.0, 0.0], dtype=np.float32).tobytes()
        for vin, valid in ((VERIFIED, True), (DELETED, False)):
            cur.execute(
                "INSERT INTO case_memory (vin, session_id, series, concluded_at, summary, summary_vec, root_cause, "
                "fix_action, priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, kind, "
                "merged_sessions, source, omitted) VALUES (%s, %s, 'EV-A', %s, 'old case', %s, 'cause', 'fix', 'P2', "
                "'[\"P0A7F\"]', TRUE, 'v1', %s, %s, 'final', '[]', '', '[]')",
                (vin, f"{vin}-20261101T080000", C, vec, valid, WRITTEN),
            )
    conn.close()

    url = mariadb.url(mariadb_database)
    assert main(["memory", "init", "--memory", url]) == 0
    assert "002_event_time.sql" in capsys.readouterr().out
    assert main(["memory", "init", "--memory", url]) == 0  # idempotent: columns exist, rows already filled

    store = open_store(url)
    try:
        verified, deleted = store.history(VERIFIED)[0], store.history(DELETED)[0]
        assert (verified.opened_ts, verified.verified_ts, verified.invalid_ts) == (None, utc(WRITTEN), None)
        assert (deleted.verified_ts, deleted.invalid_ts) == (utc(WRITTEN), utc(C))

        def similar(at: datetime) -> list[str]:
            q = SimilarQuery("LSVAU2180N2199999", "EV-A", np.asarray([1.0, 0.0], dtype=np.float32), 5, utc(at))
            return [s.record.vin for s in store.similar(q)]

        assert similar(WRITTEN - timedelta(seconds=1)) == [] and similar(WRITTEN) == [VERIFIED]
        assert store.own_history(DELETED, utc(C), 10, as_of=utc(WRITTEN)) == []
        # A merge after the migration keeps the migrated version.
        store.upsert(verified.model_copy(update={"summary": "merged", "concluded_at": utc(C + timedelta(days=9)),
                                                 "recheck_ok": None, "verified_ts": None}))  # fmt: skip
        assert [r.summary for r in store.own_history(VERIFIED, utc(C), 10, as_of=utc(WRITTEN))] == ["old case"]
        assert similar(C + timedelta(days=5)) == [VERIFIED] and similar(C + timedelta(days=9)) == []
    finally:
        store.close()

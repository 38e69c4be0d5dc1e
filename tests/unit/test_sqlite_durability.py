"""How the embedded store's commits reach the disk: synchronous=NORMAL with a sync at most a second apart, or FULL."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores import open_store
from vdoctor.stores.sqlite import SqliteStore

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def rec(i: int) -> MemoryRecord:
    vin = f"LSVAU2180N2{i:06d}"
    return MemoryRecord(
        vin=vin, session_id=f"{vin}-s", series="EV-A", concluded_at=T0 + timedelta(hours=i), summary=f"case {i}",
        summary_vec=[1.0, float(i)], root_cause="cause", fix_action="fix", priority="P2", recheck_ok=True,
        prompt_version="v1",
    )  # fmt: skip


def synchronous(store: object) -> int:
    assert isinstance(store, SqliteStore)
    return int(store._conn.execute("PRAGMA synchronous").fetchone()[0])


def test_the_url_chooses_how_commits_wait_for_the_disk(tmp_path: Path) -> None:
    # SQLite's codes: 1 NORMAL, 2 FULL.
    default = open_store(f"sqlite:///{tmp_path}/a.db")
    full = open_store(f"sqlite:///{tmp_path}/b.db?synchronous=full")
    normal = open_store(f"sqlite:///{tmp_path}/c.db?synchronous=NORMAL")
    assert (synchronous(default), synchronous(full), synchronous(normal)) == (1, 2, 1)
    assert Path(tmp_path / "b.db").is_file() and not Path(tmp_path / "b.db?synchronous=full").exists()
    for store in (default, full, normal):
        store.close()


@pytest.mark.parametrize(
    ("query", "message"),
    [("synchronous=off", "synchronous must be one of normal, full, not 'off'"),
     ("journal=delete", "unknown option journal (the one option is synchronous)")],
)  # fmt: skip
def test_a_wrong_option_is_refused_before_the_file_is_made(tmp_path: Path, query: str, message: str) -> None:
    with pytest.raises(StoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
        open_store(f"sqlite:///{tmp_path}/m.db?{query}")
    assert not (tmp_path / "m.db").exists()


def test_a_commit_a_second_after_the_last_synced_one_syncs_the_wal(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "m.db"))
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    store.upsert(rec(1))  # within a second of opening: no sync
    assert not [s for s in statements if "synchronous" in s]
    store._synced_at = time.monotonic() - 1.5
    statements.clear()
    store.upsert(rec(2))
    pragmas = [i for i, s in enumerate(statements) if "synchronous" in s]
    upsert = next(i for i, s in enumerate(statements) if s.startswith("INSERT INTO case_memory"))
    assert [statements[i] for i in pragmas] == ["PRAGMA synchronous = FULL", "PRAGMA synchronous = NORMAL"]
    assert pragmas[0] < upsert < pragmas[1]
    assert synchronous(store) == 1
    statements.clear()
    assert store.set_recheck(rec(2).vin, rec(2).session_id, False, T0 + timedelta(days=3))
    assert not [s for s in statements if "synchronous" in s]  # synced just now
    store.close()


def test_a_full_store_never_switches(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "m.db"), synchronous="full")
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    store._synced_at = time.monotonic() - 5
    store.upsert_many([rec(1), rec(2)])
    assert not [s for s in statements if "synchronous" in s] and synchronous(store) == 2
    store.close()


_WRITE_THEN_DIE = """
import os, signal, sys
sys.path.insert(0, {root!r})
from tests.unit.test_sqlite_durability import rec
from vdoctor.stores import open_store
store = open_store({url!r})
for i in range(200):
    store.upsert(rec(i))
store.set_recheck(rec(7).vin, rec(7).session_id, False, rec(7).concluded_at)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_every_commit_survives_the_job_being_killed(tmp_path: Path) -> None:
    # The default does not wait for the disk at every commit; a killed process still loses none of them.
    url = f"sqlite:///{tmp_path}/m.db"
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", _WRITE_THEN_DIE.format(root=root, url=url)], timeout=120)
    assert done.returncode == -9
    store = open_store(url)
    assert store.count() == 200
    seven = store.get(rec(7).vin, rec(7).session_id)
    assert seven is not None and seven.recheck_ok is False
    store.close()

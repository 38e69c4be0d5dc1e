"""The memory commands that only read a store open it read-only, and a file an older release wrote still opens.

They opened it read-write: a recall caught the store's indexes up and saved them, and added its query's
vector to the query vector file beside the store, so a command that reads wrote to what the job writes;
and a MySQL/MariaDB user with only SELECT could not run them.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from jobs import cli
from tests.unit.test_cli_user_errors import _written_case
from vdoctor.errors import StaleSchema
from vdoctor.stores import open_store

pytestmark = pytest.mark.unit

VIN = "LFVAU2180ND238173"


def _files(folder: Path) -> dict[str, str]:
    """Every file under ``folder``, by its path, with a digest of its bytes; but SQLite's shared-memory index
    of the write-ahead log, and the log while it is empty: any reader of a WAL file makes them."""
    return {
        str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(folder.rglob("*"))
        if f.is_file() and not f.name.endswith("-shm") and not (f.name.endswith("-wal") and f.stat().st_size == 0)
    }


def _readers(url: str, folder: Path) -> list[list[str]]:
    diagnoses = folder.parent / "diagnoses.jsonl"
    diagnoses.write_text("")
    return [
        ["memory", "history", "--vin", VIN, "--memory", url],
        ["memory", "recall", "--vin", VIN, "--symptom", "电池包单体压差过大", "--codes", "P0A7F",
         "--as-of", "2026-11-05T00:00:00Z", "--memory", url],
        ["memory", "recall", "--vin", "LFVAU2180ND238174", "--symptom", "电池包单体压差过大",
         "--as-of", "2026-11-05T00:00:00Z", "--memory", url],
        ["memory", "check-summary", "--vin", VIN, "--session-id", "nope", "--summary", "x", "--memory", url],
        ["memory", "health", "--diagnoses", str(diagnoses), "--plot", str(folder.parent / "h.png"),
         "--memory", url],
    ]  # fmt: skip


def test_the_reading_commands_leave_the_store_and_its_files_as_they_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "store"
    url = f"sqlite:///{folder / 'memory.db'}"
    _written_case(url)
    # Another vehicle's case, written after the indexes were last saved: a reader catches up on it.
    store = open_store(url)
    store.close()
    _written_case(url, vin="LFVAU2180ND238175")
    before = _files(folder)
    codes = []
    for command in _readers(url, folder):
        codes.append(cli.main(command))
        assert _files(folder) == before, command
    # Each ran to its end: check-summary's 2 says the session is not in the store, which it read.
    assert codes == [0, 0, 0, 2, 0]
    captured = capsys.readouterr()
    assert VIN in captured.out and "nope" in captured.err


def _older_file(tmp_path: Path, change: str) -> str:
    """The URL of a store holding one case, its file changed by the SQL ``change`` as an older release left it."""
    db = tmp_path / "memory.db"
    url = f"sqlite:///{db}"
    _written_case(url)
    with sqlite3.connect(db) as conn:
        conn.execute(change)
    return url


def test_a_file_an_older_release_wrote_is_migrated_once_and_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _older_file(tmp_path, "UPDATE vd_meta SET value = '1' WHERE key = 'schema'")
    with pytest.raises(StaleSchema):
        open_store(url, read_only=True).close()
    assert cli.main(["memory", "history", "--vin", VIN, "--memory", url]) == 0
    captured = capsys.readouterr()
    assert "has schema 1, this build reads" in captured.err and "migrating it first" in captured.err
    assert VIN in captured.out or "cause:" in captured.out
    open_store(url, read_only=True).close()  # current now


def test_a_file_from_before_the_schema_was_versioned_is_migrated_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file without vd_meta (the releases before it) was a StoreError, "no such table: vd_meta", which the
    readers did not take for an old schema (found by a review)."""
    url = _older_file(tmp_path, "DROP TABLE vd_meta")
    assert cli.main(["memory", "history", "--vin", VIN, "--memory", url]) == 0
    captured = capsys.readouterr()
    assert "has schema unversioned" in captured.err and VIN in captured.out

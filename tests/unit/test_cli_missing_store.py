"""A memory command that reads a store, or deletes from it, refuses one that does not exist.

It created the sqlite file and its folders, found no records in the new, empty store and exited 0:
a mistyped path looked like a vehicle without history.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import cli
from vdoctor.errors import StoreError
from vdoctor.memory.summary import SUMMARY_PROMPT_VERSION
from vdoctor.stores import open_store

pytestmark = pytest.mark.unit

VIN = "LFVAU2180ND238173"
COMMANDS = [
    ["history", "--vin", VIN],
    ["recall", "--vin", VIN, "--symptom", "电池包单体压差过大"],
    ["check-summary", "--vin", VIN, "--session-id", "s1", "--summary", "x"],
    ["forget", "--vin", VIN, "--change", "scrapped"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_missing_sqlite_file_is_a_one_line_error_and_nothing_is_created(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "nonexist" / "sub" / "m.db"
    assert cli.main(["memory", *command, "--memory", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert err == f"vdoctor: no long-term memory store to open: no such file: {db}\n"
    assert not (tmp_path / "nonexist").exists()


def test_a_missing_mem0_folder_is_refused_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "mem0"
    assert cli.main(["memory", "history", "--vin", VIN, "--memory", f"mem0:///{folder}"]) == 2
    assert f"no such mem0 store: {folder}" in capsys.readouterr().err


def test_a_store_that_exists_is_read_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    open_store(url).close()  # created by a writer, empty
    assert cli.main(["memory", "history", "--vin", VIN, "--memory", url]) == 0
    assert capsys.readouterr().out == f"no long-term memory for {VIN}\n"


def test_only_the_stores_that_live_in_a_file_or_folder_are_checked(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such file"):
        open_store(f"sqlite:///{tmp_path / 'm.db'}", existing=True)
    # A store in memory is new on every open, by choice: there is nothing to find.
    open_store("memory://", existing=True).close()
    open_store("sqlite://", existing=True).close()
    # Without ``existing`` a writer creates the file, as the job does.
    open_store(f"sqlite:///{tmp_path / 'new' / 'm.db'}").close()
    assert (tmp_path / "new" / "m.db").is_file()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_sqlite_file_that_holds_no_memory_is_refused_and_left_as_it_is(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The knowledge base's file given for the memory's (an easy slip): the command added the memory's tables
    to it, found no records and exited 0 (found by an audit)."""
    import sqlite3

    other = tmp_path / "knowledge.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE chunks (chunk_id TEXT)")
    assert cli.main(["memory", *command, "--memory", f"sqlite:///{other}"]) == 2
    assert "holds no long-term memory (no case_memory table" in capsys.readouterr().err
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["chunks"]
    other.write_text("not a database, long enough to be read as one's header " * 4)
    assert cli.main(["memory", *command, "--memory", f"sqlite:///{other}"]) == 2
    assert "cannot be read as an SQLite database (file is not a database)" in capsys.readouterr().err


REWRITES = [
    ["reembed"],
    ["reextract", "--prompt-version", SUMMARY_PROMPT_VERSION],
    ["retokenize"],
]


@pytest.mark.parametrize("command", REWRITES, ids=lambda c: c[0])
def test_a_command_that_rewrites_a_store_refuses_a_missing_one_too(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They created an empty store at a mistyped path and reported "0 of 0", exit 0 (found by an audit)."""
    db = tmp_path / "typo" / "m.db"
    assert cli.main(["memory", *command, "--memory", f"sqlite:///{db}"]) == 2
    assert f"no long-term memory store to open: no such file: {db}" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()


def test_a_reader_that_leaves_is_no_traceback(tmp_path: Path) -> None:
    """`vdoctor memory history --json | head -1` printed a BrokenPipeError traceback (found by an audit)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    url = f"sqlite:///{tmp_path / 'm.db'}"
    open_store(url).close()
    read, write = os.pipe()
    os.close(read)  # the reader has left before the first line
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "memory", "history", "--vin", VIN, "--json", "--memory", url],
        stdout=write, stderr=subprocess.PIPE, cwd=REPO_ROOT, text=True, timeout=120,
    )  # fmt: skip
    os.close(write)
    assert proc.returncode == 141 and proc.stderr == ""


@pytest.mark.parametrize("content", [b"", None], ids=["empty-file", "knowledge-base"])
def test_serve_refuses_a_file_that_holds_no_memory_as_history_does(
    content: bytes | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vdoctor serve` told to migrate such a file with `vdoctor memory history`, which refuses it: the inspector
    now makes the readers' check, and says what they say (found by an audit)."""
    import sqlite3

    other = tmp_path / "knowledge.db"
    if content is None:
        with sqlite3.connect(other) as conn:
            conn.execute("CREATE TABLE chunks (chunk_id TEXT)")
    else:
        other.write_bytes(content)
    url = f"sqlite:///{other}"
    assert cli.main(["memory", "history", "--vin", VIN, "--memory", url]) == 2
    said = capsys.readouterr().err
    assert "holds no long-term memory (no case_memory table" in said
    assert cli.main(["serve", "--memory", url]) == 2
    assert capsys.readouterr().err == said
    assert cli.main(["serve", "--memory", f"sqlite:///{tmp_path / 'absent.db'}"]) == 2
    assert (
        capsys.readouterr().err
        == f"vdoctor: no long-term memory store to open: no such file: {tmp_path / 'absent.db'}\n"
    )

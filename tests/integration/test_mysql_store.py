"""The mysql backend against a real MariaDB: schema init through the CLI, secrets, errors."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs.cli import main
from tests.services.mariadb import MariaDB
from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores import open_store

pytestmark = pytest.mark.integration

VIN = "LSVAU2180N2183294"


def _record() -> MemoryRecord:
    at = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
    return MemoryRecord(
        vin=VIN,
        session_id=f"{VIN}-20261101T081530",
        series="EV-A",
        concluded_at=at,
        summary="2026-11-01 08:15 | P0A7F confirmed | cell_voltage_diff_mv=187",
        summary_vec=[0.6, 0.8],
        root_cause="weak cell group",
        fix_action="balance the pack",
        priority="P2",
        dtc_codes=["P0A7F"],
        prompt_version="case-summary-v1",
    )


def test_memory_init_applies_the_ddl_then_the_store_works(
    mariadb: MariaDB, mariadb_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = mariadb.url(mariadb_database)
    store = open_store(url)
    with pytest.raises(StoreError, match="vdoctor memory init"):
        store.count()  # no table yet: the error says what to run
    store.close()

    assert main(["memory", "init", "--memory", url]) == 0
    out = capsys.readouterr().out
    assert "001_case_memory.sql" in out and mariadb.password not in out
    assert main(["memory", "init", "--memory", url]) == 0  # idempotent

    store = open_store(url)
    try:
        store.upsert(_record())
        assert store.count() == 1
        got = store.get(VIN, f"{VIN}-20261101T081530")
        assert got is not None and got.summary_vec == pytest.approx([0.6, 0.8])
    finally:
        store.close()
    assert main(["memory", "history", "--vin", VIN, "--json", "--memory", url]) == 0
    assert '"root_cause": "weak cell group"' in capsys.readouterr().out


def test_a_wrong_password_fails_clearly_and_never_shows_a_password(
    mariadb: MariaDB, mariadb_database: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = "Wr0ng-Pa55word-xyz"
    url = f"mysql://root:{wrong}@{mariadb.host}:{mariadb.port}/{mariadb_database}"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreError) as err:
        open_store(url)
    message = str(err.value)
    assert "Access denied" in message
    assert f"mysql://root:***@{mariadb.host}:{mariadb.port}/{mariadb_database}" in message
    assert wrong not in message and wrong not in repr(err.value)
    assert err.value.__cause__ is None  # the driver's exception is not chained in
    assert main(["memory", "history", "--vin", VIN, "--memory", url]) == 2
    captured = capsys.readouterr()
    assert "Access denied" in captured.err
    assert wrong not in captured.out + captured.err + caplog.text


def test_the_right_password_never_reaches_errors_either(mariadb: MariaDB, mariadb_database: str) -> None:
    store = open_store(mariadb.url(mariadb_database))  # schema not applied
    try:
        with pytest.raises(StoreError) as err:
            store.history(VIN)
        assert mariadb.password not in str(err.value)
        assert "***" in str(err.value)
    finally:
        store.close()


def test_unreachable_server_is_a_store_error(mariadb: MariaDB) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreError, match="connect failed") as err:
        open_store(f"mysql://root:topsecret@127.0.0.1:{port}/fleet")
    assert "topsecret" not in str(err.value)


def test_reconnects_after_the_server_drops_the_connection(mariadb: MariaDB, mariadb_url: str) -> None:
    store = open_store(mariadb_url)
    try:
        store.upsert(_record())
        conn_id = store.query("SELECT CONNECTION_ID()")[0][0]
        admin = mariadb.admin()
        with admin.cursor() as cur:
            cur.execute("KILL %s", (conn_id,))
        admin.close()
        assert store.count() == 1  # reconnected transparently
    finally:
        store.close()


def test_many_threads_share_a_bounded_pool_of_connections(mariadb: MariaDB, mariadb_url: str) -> None:
    import threading

    from vdoctor.stores.sqlbase import POOL_SIZE

    store = open_store(mariadb_url)
    seen: set[int] = set()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work() -> None:
        try:
            for _ in range(5):
                # SLEEP keeps each connection busy, so the threads really overlap.
                (conn_id, _), *_ = store.query("SELECT CONNECTION_ID(), SLEEP(0.02)")
                with lock:
                    seen.add(int(conn_id))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4 * POOL_SIZE)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert 1 < len(seen) <= POOL_SIZE  # statements ran side by side, never on more than the pool's connections
        with store.locked():
            # A held connection keeps its session across statements.
            store.query("SET @vdoctor_probe = 42")
            assert store.query("SELECT @vdoctor_probe")[0][0] == 42
    finally:
        store.close()


def test_retokenize_rewrites_the_tokens_an_older_tokeniser_wrote_in_both_tables(
    mariadb: MariaDB, mariadb_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store written by a build with another stemmer finds its cases by the new tokens only after
    ``vdoctor memory retokenize``; current and archived versions alike, and a second run writes nothing."""
    url = mariadb.url(mariadb_database)
    assert main(["memory", "init", "--memory", url]) == 0
    first = _record().model_copy(update={"recheck_ok": True, "verified_ts": datetime(2026, 11, 2, tzinfo=UTC),
                                         "alert_text": "pack balancing stopped"})  # fmt: skip
    later = first.model_copy(update={"concluded_at": datetime(2026, 11, 5, tzinfo=UTC), "summary": "merged"})
    # More versions around them, each with an archived one, so that one-row pages start after keys that
    # share a VIN or a session.
    others = [first.model_copy(update={"session_id": f"{VIN}-2026110{d}T000000"}) for d in (2, 3)]
    others.append(first.model_copy(update={"vin": "LSVAU2180N2100002", "session_id": "LSVAU2180N2100002-1"}))
    store = open_store(url)
    try:
        store.upsert(first)
        store.upsert(later)  # the first version goes to case_history
        # ...and a third version: two archived versions of one session, told apart by their start alone.
        store.upsert(later.model_copy(update={"concluded_at": datetime(2026, 11, 6, tzinfo=UTC)}))
        for other in others:
            store.upsert(other)
            store.upsert(other.model_copy(update={"concluded_at": later.concluded_at, "summary": "merged"}))
        # What the earlier light stemmer wrote: "balancing" -> "balanc", "balance" stayed "balance".
        for table in ("case_memory", "case_history"):
            store.run(f"UPDATE {table} SET search_tokens = REPLACE(search_tokens, 'balanc ', 'balance ')")
        stored = {t for (t,) in store.query("SELECT search_tokens FROM case_history")}
        assert any("balance " in t for t in stored)
    finally:
        store.close()
    capsys.readouterr()
    assert main(["memory", "retokenize", "--memory", url, "--batch", "1"]) == 0
    out = capsys.readouterr().out
    # One-row pages: every version read once, none skipped.
    assert "9 record versions checked, 9 rewritten" in out and mariadb.password not in out
    store = open_store(url)
    try:
        for table in ("case_memory", "case_history"):
            rows = store.query(f"SELECT search_tokens FROM {table}")
            assert len(rows) == (4 if table == "case_memory" else 5), table
            assert all("balanc " in t and "balance" not in t for (t,) in rows), table
    finally:
        store.close()
    assert main(["memory", "retokenize", "--memory", url, "--batch", "3"]) == 0
    assert "9 record versions checked, 0 rewritten" in capsys.readouterr().out


def test_a_large_write_goes_in_statements_within_the_servers_default_packet_limit(
    mariadb: MariaDB, mariadb_url: str
) -> None:
    # MySQL's and MariaDB's default max_allowed_packet is 16 MB (the test server runs with 64 MB): a
    # statement over it is refused whole. 100 records whose summary sources are 60,000 Chinese characters
    # each (~18 MB of values) are one write of the store (e.g. `vdoctor memory reextract`).
    admin = mariadb.admin()
    with admin.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.max_allowed_packet")
        before = cur.fetchone()[0]
        cur.execute("SET GLOBAL max_allowed_packet = %s", (16 * 1024 * 1024,))
    source = "电池包单体压差" * 8_000 + "电池包单体"  # 60,000 characters, ~180 KB of UTF-8
    try:
        store = open_store(mariadb_url)  # its connections open after the change: they have the 16 MB limit
        try:
            base = _record()
            records = [base.model_copy(update={"session_id": f"{VIN}-20261101T08{i:04d}", "source": source})
                       for i in range(100)]  # fmt: skip
            store.upsert_many(records)
            assert store.count() == 100
            got = store.get(VIN, f"{VIN}-20261101T080099")
            assert got is not None and got.source == source
        finally:
            store.close()
    finally:
        with admin.cursor() as cur:
            cur.execute("SET GLOBAL max_allowed_packet = %s", (before,))
        admin.close()


def test_the_compose_schema_script_creates_the_database_and_applies_the_schema(mariadb: MariaDB) -> None:
    # scripts/doris_schema.py as docker compose runs it for Doris, with MariaDB's readiness statement.
    import uuid

    from tests.conftest import load_script

    script = load_script("doris_schema")
    name = "t_" + uuid.uuid4().hex[:16]
    url = mariadb.url(name)
    try:
        for _ in range(2):  # a second run changes nothing and succeeds
            assert script.main([url, "--ready-sql", "SELECT 1", "--wait-s", "30"]) == 0
        store = open_store(url)
        try:
            store.upsert(_record())
            assert store.count() == 1
        finally:
            store.close()
    finally:
        admin = mariadb.admin()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def test_the_reading_commands_run_as_a_user_that_may_only_select(
    mariadb: MariaDB, mariadb_url: str, mariadb_database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`memory history`, `recall`, `check-summary` and `health` open the store read-only: a database user with
    SELECT alone runs them, as it runs the inspector."""
    from tests.unit.test_cli_user_errors import _written_case

    _written_case(mariadb_url, vin=VIN)
    conn = mariadb.admin()
    with conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'vd_reader'@'%' IDENTIFIED BY 'reader-pw'")
        cur.execute(f"GRANT SELECT ON {mariadb_database}.* TO 'vd_reader'@'%'")
    conn.close()
    url = f"mysql://vd_reader:reader-pw@{mariadb.host}:{mariadb.port}/{mariadb_database}"
    diagnoses = tmp_path / "diagnoses.jsonl"
    diagnoses.write_text("")
    assert main(["memory", "history", "--vin", VIN, "--json", "--memory", url]) == 0
    [record] = json.loads(capsys.readouterr().out)
    session = record["session_id"]
    assert main(["memory", "recall", "--vin", VIN, "--symptom", "电池包单体压差过大", "--as-of",
                 "2026-11-05T00:00:00Z", "--json", "--memory", url]) == 0  # fmt: skip
    assert [r["session_id"] for r in json.loads(capsys.readouterr().out)["own"]] == [session]
    assert main(["memory", "check-summary", "--vin", VIN, "--session-id", session, "--summary",
                 record["summary"], "--memory", url]) == 0  # fmt: skip
    assert "faithful" in capsys.readouterr().out
    plot = tmp_path / "health.png"
    assert main(["memory", "health", "--diagnoses", str(diagnoses), "--plot", str(plot), "--memory", url]) == 0
    assert plot.is_file()
    # The user can write nothing: the writers are refused by the server, not by this build.
    assert main(["memory", "forget", "--vin", VIN, "--change", "scrapped", "--memory", url]) == 2
    assert "reader-pw" not in capsys.readouterr().err

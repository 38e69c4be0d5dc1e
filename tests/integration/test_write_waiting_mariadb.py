"""``vdoctor memory write-waiting`` against a real MySQL-protocol server (MariaDB), through a proxy taken down.

The case of a horizon letter is written to MariaDB once the server is back. A server that is down when the command
starts is a one-line error (exit 2); one that goes down while it runs leaves the case not written (exit 1), in
seconds. A second run writes nothing twice, and nor does the job's next try of the case its state still holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import cli
from tests.integration.test_store_outage import Proxy
from tests.services.mariadb import MariaDB
from tests.unit.test_write_waiting import VIN, horizon, letters_file, waiting_session
from vdoctor import assembly
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import DedupState, SessionState, StoredSession
from vdoctor.memory.waiting import Outcome, write_waiting
from vdoctor.settings import Settings, with_overrides
from vdoctor.stores import open_store

pytestmark = pytest.mark.integration


def test_a_horizon_letters_case_reaches_mariadb_once_it_is_back(
    mariadb: MariaDB, mariadb_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = Proxy(mariadb.port)
    url = mariadb_url.replace(f":{mariadb.port}/", f":{proxy.port}/")
    waiting = waiting_session(load_pack())
    letters = letters_file(tmp_path / "dead_letters.jsonl", horizon(waiting))
    command = ["memory", "write-waiting", "--letters", str(letters), "--memory", url, "--json"]
    try:
        # Down: the store cannot be opened (exit 2), and the password is in no message.
        proxy.down()
        code = cli.main(command)
        captured = capsys.readouterr()
        assert code == 2 and captured.out == "" and "connect failed" in captured.err
        assert mariadb.password not in captured.out + captured.err
        proxy.up()
        assert cli.main(command) == 0
        [session] = json.loads(capsys.readouterr().out)["sessions"]
        assert session["outcome"] == "written"
        store = open_store(mariadb_url, existing=True)
        try:
            [record] = store.history(VIN)
        finally:
            store.close()
        assert record.session_id == session["session_id"] and record.valid and len(record.summary_vec) == 512
        assert cli.main(command) == 0
        assert [s["outcome"] for s in json.loads(capsys.readouterr().out)["sessions"]] == ["already"]
        # The job, whose state still holds the case as waiting: its next try finds it in MariaDB, as written.
        engine = assembly.build_engine(with_overrides(Settings(), memory_url=mariadb_url, concurrency=1))
        try:
            after = engine.retry_case(StoredSession(waiting), DedupState(), VIN).session
            assert isinstance(after, SessionState) and after.l3_written and not after.l3_pending
            assert engine.store.history(VIN) == [record]
        finally:
            engine.close()
    finally:
        proxy.down()


def test_a_server_that_goes_down_while_it_runs_leaves_the_case_not_written(mariadb: MariaDB, mariadb_url: str) -> None:
    proxy = Proxy(mariadb.port)
    url = mariadb_url.replace(f":{mariadb.port}/", f":{proxy.port}/")
    letter = horizon(waiting_session(load_pack())).model_dump_json()
    engine = assembly.build_engine(with_overrides(Settings(), memory_url=url, concurrency=1))
    try:
        proxy.down()
        report = write_waiting([letter], engine)
        assert [f.outcome for f in report.sessions] == [Outcome.NOT_WRITTEN] and report.unfinished == 1
        assert mariadb.password not in report.render() + repr(report.as_json())
        proxy.up()
        assert [f.outcome for f in write_waiting([letter], engine).sessions] == [Outcome.WRITTEN]
    finally:
        engine.close()
        proxy.down()

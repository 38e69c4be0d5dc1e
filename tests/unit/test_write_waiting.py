"""``vdoctor memory write-waiting``: the cases waiting in the sessions of dead letters, written to long-term memory.

A case whose tries stopped at their horizon, or whose session was set aside as unreadable, was in a dead letter's
text only: nothing wrote it from there, and a vehicle silent past its state's TTL lost it. The engine's own write
path (``retry_case``) writes it now, once, behind the same gates; the command over a real SQLite store and the
job's dead-letter file.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from jobs import cli
from tests.unit.test_engine_failures import T0, VIN, Harness, UpsertDownStore, alert, engine
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.memory.session import StoredSession
from vdoctor.memory.waiting import Outcome, write_waiting
from vdoctor.records import DeadLetter
from vdoctor.stores import open_store

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def pack() -> KnowledgePack:
    return load_pack()


def waiting_session(pack: KnowledgePack, vin: str = VIN) -> str:
    """The stored text of a vehicle's session whose concluded case waits for its write (the store was down)."""
    store = UpsertDownStore()
    store.down = True
    h = Harness(engine(pack, store=store))
    payload = alert("e-1", T0, 187) | {"vin": vin}
    assert h.diagnose(payload).flags == ["l3_write_failed"]
    stored = h.state[vin][0]
    assert stored is not None and StoredSession(stored).l3_pending
    return stored


def letters_file(path: Path, *letters: DeadLetter | str) -> Path:
    path.write_text(
        "".join((x if isinstance(x, str) else x.model_dump_json()) + "\n" for x in letters), encoding="utf-8"
    )
    return path


def horizon(session: str) -> DeadLetter:
    return DeadLetter(raw=session, stage="process", error=f"the concluded case of {VIN} was tried for 7 days ...")


def test_the_waiting_case_of_a_letter_is_written_once(pack: KnowledgePack) -> None:
    session = waiting_session(pack)
    event_letter = DeadLetter(raw=json.dumps(alert("e-9", T0, 1)), stage="process", error="long-term memory ...")
    parse_letter = DeadLetter(raw="{not json", stage="parse", error="not JSON")
    store = UpsertDownStore()
    e = engine(pack, store=store)
    lines = [event_letter.model_dump_json(), parse_letter.model_dump_json(), "", horizon(session).model_dump_json()]
    report = write_waiting(lines + ["a line of something else"], e)
    [found] = report.sessions
    assert (found.line, found.vin, found.outcome) == (4, VIN, Outcome.WRITTEN)
    assert (report.letters, report.not_letters, report.unfinished) == (3, 1, 0)
    [record] = store.history(VIN)
    assert record.session_id == found.session_id and record.valid and record.summary
    # Again (the same file, or a letter of the same session): long-term memory holds it, nothing is written twice.
    again = write_waiting(lines, e)
    assert [f.outcome for f in again.sessions] == [Outcome.ALREADY] and store.upserts == 1


def test_a_store_still_down_leaves_the_case_unwritten_and_says_so(pack: KnowledgePack) -> None:
    store = UpsertDownStore()
    store.down = True
    report = write_waiting([horizon(waiting_session(pack)).model_dump_json()], engine(pack, store=store))
    assert [f.outcome for f in report.sessions] == [Outcome.NOT_WRITTEN] and report.unfinished == 1


def test_sessions_that_cannot_be_written_are_told_apart(pack: KnowledgePack) -> None:
    session = waiting_session(pack)
    damaged = session.replace('"alerts":1,', '"alerts":"one",', 1)
    done = session.replace('"l3_pending":true', '"l3_pending":false', 1)
    long = session[:-1] + ',"notes":"' + "n" * 200_000 + '"}'  # (past the letters' bound)
    cut = DeadLetter(raw=long, stage="process", error="...")
    assert cut.raw_truncated
    report = write_waiting(
        [DeadLetter(raw=x, stage="process", error="...").model_dump_json() for x in (damaged, done)]
        + [cut.model_dump_json()],
        engine(pack),
    )
    unreadable, no_case, was_cut = report.sessions
    assert unreadable.outcome == Outcome.UNREADABLE and "alerts" in unreadable.why and unreadable.vin == VIN
    assert no_case.outcome == Outcome.NO_CASE and no_case.vin == VIN
    assert was_cut.outcome == Outcome.CUT and f"sha256 {cut.raw_sha256}" in was_cut.why
    assert report.unfinished == 2


def test_a_case_written_after_its_vehicle_left_care_is_named(pack: KnowledgePack) -> None:
    """The vehicle's other cases were set invalid by a lifecycle event after this one concluded: the case written
    now is valid, and the report says how to set it invalid with them."""
    store = UpsertDownStore()
    h = Harness(engine(pack, store=store))
    h.diagnose(alert("e-0", T0 - timedelta(days=20), 187))
    left = T0 + timedelta(days=3)
    store.soft_delete(VIN, left)
    report = write_waiting([horizon(waiting_session(pack)).model_dump_json()], engine(pack, store=store))
    [found] = report.sessions
    assert found.outcome == Outcome.WRITTEN and found.left_care_after == f"{left:%Y-%m-%dT%H:%M:%SZ}"
    assert f"vdoctor memory forget --vin {VIN} --change scrapped|transferred --at {found.left_care_after}" in (
        report.render()
    )


def test_the_command_writes_the_cases_of_the_jobs_dead_letters(
    pack: KnowledgePack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    open_store(f"sqlite:///{db}").close()
    session = waiting_session(pack)
    damaged = session.replace('"alerts":1,', '"alerts":"one",', 1)
    letters = letters_file(
        tmp_path / "dead_letters.jsonl", horizon(session), DeadLetter(raw=damaged, stage="process", error="...")
    )
    command = ["memory", "write-waiting", "--letters", str(letters), "--memory", f"sqlite:///{db}", "--json"]
    assert cli.main(command) == 1  # (the damaged session is to mend)
    report = json.loads(capsys.readouterr().out)
    assert [s["outcome"] for s in report["sessions"]] == ["written", "unreadable"]
    store = open_store(f"sqlite:///{db}", existing=True)
    try:
        [record] = store.history(VIN)
    finally:
        store.close()
    assert record.session_id == report["sessions"][0]["session_id"]
    # Mended (here: the letter left out), the run ends 0 and writes nothing twice.
    letters_file(letters, horizon(session))
    assert cli.main(command[:-1]) == 0
    out = capsys.readouterr().out
    assert f"line 1: {VIN} {record.session_id}: already in long-term memory" in out


def test_the_command_refuses_a_missing_store_or_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "nowhere" / "m.db"
    letters = letters_file(tmp_path / "dead_letters.jsonl")
    assert cli.main(["memory", "write-waiting", "--letters", str(letters), "--memory", f"sqlite:///{db}"]) == 2
    assert "no such file" in capsys.readouterr().err and not db.parent.exists()
    missing = tmp_path / "none.jsonl"
    assert cli.main(["memory", "write-waiting", "--letters", str(missing), "--memory", f"sqlite:///{db}"]) == 2
    assert f"--letters {missing}: no such file" in capsys.readouterr().err

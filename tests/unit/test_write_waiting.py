"""``vdoctor memory write-waiting``: the cases waiting in the sessions of dead letters, written to long-term memory.

A case whose tries stopped at their horizon, or whose session was set aside as unreadable, was in a dead letter's
text only: nothing wrote it from there, and a vehicle silent past its state's TTL lost it. The engine's own write
path (``retry_case``) writes it now, once, behind the same gates; the command over a real SQLite store and the
job's dead-letter file.
"""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from jobs import cli
from tests.unit.test_engine_failures import T0, VIN, Harness, UpsertDownStore, alert, engine, recheck
from vdoctor.errors import StoreError
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.memory.session import DedupState, SessionState, StoredSession
from vdoctor.memory.waiting import Outcome, write_waiting
from vdoctor.memory.write_policy import milestone_id, write_alone
from vdoctor.records import DeadLetter, MemoryRecord, RecordKind
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


def test_a_case_merged_into_an_earlier_record_is_written_once(pack: KnowledgePack) -> None:
    """The vehicle's earlier case of the same cause takes the waiting one in (the write gates' merge): its record
    keeps the earlier session's id, and every run, and each copy of the letter, wrote the case again (a review)."""
    store = UpsertDownStore()
    Harness(engine(pack, store=store)).diagnose(alert("e-0", T0 - timedelta(days=20), 187))
    letter = horizon(waiting_session(pack)).model_dump_json()
    e = engine(pack, store=store)
    first = write_waiting([letter, letter], e)
    assert [f.outcome for f in first.sessions] == [Outcome.WRITTEN, Outcome.ALREADY]
    [record] = store.history(VIN)
    assert record.merged_sessions == [first.sessions[0].session_id]
    upserts = store.upserts
    assert [f.outcome for f in write_waiting([letter], e).sessions] == [Outcome.ALREADY] and store.upserts == upserts


def test_a_case_older_than_the_vehicles_newer_one_of_its_cause_leaves_that_one_as_it_is(pack: KnowledgePack) -> None:
    """Merged into the newer case, the older one replaced its summary and verdict (a review): it is its own record."""
    store = UpsertDownStore()
    newer = Harness(engine(pack, store=store)).diagnose(alert("e-2", T0 + timedelta(days=10), 187))
    before = store.get(VIN, newer.session_id)
    [found] = write_waiting([horizon(waiting_session(pack)).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.WRITTEN and store.get(VIN, newer.session_id) == before
    assert store.get(VIN, found.session_id) is not None


def test_a_case_whose_vehicle_left_care_after_it_is_set_invalid_from_then(pack: KnowledgePack) -> None:
    """The vehicle was transferred after the case concluded: its cases of then were set invalid, and the new
    owner's are valid. The case written now is set invalid from the transfer, as the lifecycle event would have;
    the command printed a ``memory forget`` to run, which set the new owner's cases invalid too (a review)."""
    store = UpsertDownStore()
    h = Harness(engine(pack, store=store))
    h.diagnose(alert("e-0", T0 - timedelta(days=40), 187))
    left = T0 + timedelta(days=3)
    store.soft_delete(VIN, left)
    owner = Harness(engine(pack, store=store)).diagnose(alert("e-9", T0 + timedelta(days=10), 187))
    upserts = store.upserts
    report = write_waiting([horizon(waiting_session(pack)).model_dump_json()], engine(pack, store=store))
    # Written invalid in one upsert: written valid first, then set invalid, it was a valid case of the vehicle
    # meanwhile, which the job could merge the new owner's next case into (a review).
    assert store.upserts == upserts + 1
    [found] = report.sessions
    assert found.outcome == Outcome.WRITTEN and found.invalid_from == f"{left:%Y-%m-%dT%H:%M:%SZ}"
    case = store.get(VIN, found.session_id)
    assert case is not None and not case.valid and case.invalid_ts == left
    new_owners = store.get(VIN, owner.session_id)
    assert new_owners is not None and new_owners.valid
    assert "memory forget" not in report.render() and f"set invalid from {found.invalid_from}" in report.render()


def test_a_case_the_job_wrote_before_its_vehicle_left_care_is_not_written_again(pack: KnowledgePack) -> None:
    """The vehicle's next event wrote the case (merged into its earlier one), then a lifecycle event set them
    invalid: the command found nothing under the case's own id and wrote it again, valid (a review)."""
    store = UpsertDownStore()
    Harness(engine(pack, store=store)).diagnose(alert("e-0", T0 - timedelta(days=20), 187))
    session = waiting_session(pack)
    h = Harness(engine(pack, store=store))
    h.state[VIN] = (session, h.state.get(VIN, (None, '{"seen":{}}'))[1])
    h.send({"type": "lifecycle", "event_id": "l-1", "vin": VIN, "ts": "2026-11-09T08:00:00Z", "change": "scrapped"})
    [merged] = store.history(VIN)
    assert not merged.valid and len(merged.merged_sessions) == 1
    [found] = write_waiting([horizon(session).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.ALREADY and found.invalid_from == ""
    assert [r.valid for r in store.history(VIN)] == [False]


class ReadsDownStore(UpsertDownStore):
    """Long-term memory whose reads fail (a host that does not answer), counted."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        self.reads += 1
        raise StoreError("long-term memory at mysql://fleet: timed out")

    def history(self, vin: str) -> list[MemoryRecord]:
        self.reads += 1
        raise StoreError("long-term memory at mysql://fleet: timed out")


def test_a_store_that_does_not_answer_stops_the_run(pack: KnowledgePack) -> None:
    """Each case waited out the store's connect timeout (hours for a large file), or the engine's pause after one
    turned the later cases away untried while the report blamed a failure (a review)."""
    store = ReadsDownStore()
    letter = horizon(waiting_session(pack)).model_dump_json()
    report = write_waiting([letter] * 3, engine(pack, store=store))
    assert [f.outcome for f in report.sessions] == [Outcome.NOT_WRITTEN, Outcome.NOT_TRIED, Outcome.NOT_TRIED]
    assert "timed out" in report.sessions[0].why and report.sessions[1].why.startswith("at line 1: ")
    assert store.reads == 1 and report.unfinished == 3


class OneSlowReadStore(UpsertDownStore):
    """Long-term memory whose second merge lookup fails (slowly: the engine's clock says so): the first case's try,
    after the command's own look at the vehicle's records."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def find_duplicate(
        self, vin: str, root_cause: str, since: datetime, until: datetime | None = None
    ) -> MemoryRecord | None:
        self.lookups += 1
        if self.lookups == 2:
            raise StoreError("long-term memory at mysql://fleet: timed out")
        return super().find_duplicate(vin, root_cause, since, until)


def test_one_slow_failure_of_a_cases_write_does_not_turn_the_next_cases_away(pack: KnowledgePack) -> None:
    """The engine pauses its tries for a minute after a store read that failed slowly (for the job's many tries):
    every later case came back untried, reported as a failure, with nothing logged (a review). The command asks
    for no pause, and its tries no longer make that read (it has just looked itself): a case whose try fails
    leaves the next cases to be tried."""
    store = OneSlowReadStore()
    e = engine(pack, store=store)
    ticks = iter(range(0, 10_000, 2))
    e.clock = lambda: float(next(ticks))  # (every read takes two seconds)
    letters = [horizon(waiting_session(pack, vin)).model_dump_json() for vin in (VIN, "LSVAU2180N2183295")]
    report = write_waiting(letters, e)
    assert [f.outcome for f in report.sessions] == [Outcome.NOT_WRITTEN, Outcome.WRITTEN]
    assert store.count() == 1


def test_what_a_session_says_of_its_case_is_read_as_the_job_reads_it(pack: KnowledgePack) -> None:
    session = waiting_session(pack)
    both = session.replace('"l3_written":false', '"l3_written":true', 1)
    assert both != session  # waiting and written: not in long-term memory, so it waits
    open_only = SessionState.model_validate_json(session).model_copy(update={"conclusion": None}).model_dump_json()
    unreadable_no_case = session.replace('"alerts":1,', '"alerts":"one",', 1).replace(
        '"l3_pending":true', '"l3_pending":false', 1
    )
    store = UpsertDownStore()
    report = write_waiting(
        [
            DeadLetter(raw=x, stage="process", error="...").model_dump_json()
            for x in (both, open_only, unreadable_no_case)
        ],
        engine(pack, store=store),
    )
    assert [f.outcome for f in report.sessions] == [Outcome.WRITTEN, Outcome.NO_CASE, Outcome.NO_CASE]
    assert report.unfinished == 0 and store.count() == 1


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


def test_the_command_reads_stdin_as_it_reads_a_file(
    pack: KnowledgePack, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte that is not UTF-8 in the input raised under a strict locale, and the report was lost (a review)."""
    db = tmp_path / "memory.db"
    open_store(f"sqlite:///{db}").close()
    data = b"\xff not a letter\n" + horizon(waiting_session(pack)).model_dump_json().encode() + b"\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict"))
    assert cli.main(["memory", "write-waiting", "--letters", "-", "--memory", f"sqlite:///{db}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["not_letters"] == 1 and [s["outcome"] for s in report["sessions"]] == ["written"]


def waiting_at(pack: KnowledgePack, at: datetime, event_id: str) -> str:
    """A vehicle's session whose case, concluded at ``at``, waits for its write."""
    store = UpsertDownStore()
    store.down = True
    h = Harness(engine(pack, store=store))
    assert h.diagnose(alert(event_id, at, 187)).flags == ["l3_write_failed"]
    stored = h.state[VIN][0]
    assert stored is not None
    return stored


def test_a_case_between_two_of_its_cause_is_merged_into_the_earlier_as_the_job_would_have(pack: KnowledgePack) -> None:
    """An earlier case of its cause within the 30 days before it, and a newer one more than 30 days after that: in
    order, the job merged the case into the earlier one. The command wrote it as a record of its own, a near-copy
    of the earlier case, because the newest of its cause was newer."""
    store = UpsertDownStore()
    h = Harness(engine(pack, store=store))
    earlier = h.diagnose(alert("e-0", T0 - timedelta(days=25), 187))
    newer = h.diagnose(alert("e-2", T0 + timedelta(days=10), 187))
    assert "l3_merged" not in newer.flags
    before = store.get(VIN, newer.session_id)
    [found] = write_waiting([horizon(waiting_session(pack)).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.WRITTEN and store.get(VIN, newer.session_id) == before
    merged = store.get(VIN, earlier.session_id)
    assert merged is not None and merged.merged_sessions == [found.session_id] and merged.concluded_at == T0
    assert store.get(VIN, found.session_id) is None


def test_a_case_of_the_same_second_as_the_vehicles_newer_one_leaves_that_one_as_it_is(pack: KnowledgePack) -> None:
    """The merge takes the newest of (conclusion, session id): a following session of the same second passed as
    "not newer", and the case was put over it (a review)."""
    session = SessionState.model_validate_json(waiting_session(pack))
    store = UpsertDownStore()
    Harness(engine(pack, store=store)).diagnose(alert("e-1", T0, 187))
    [proto] = store.history(VIN)
    following = proto.model_copy(
        update={"session_id": session.session_id + "-2", "summary": "the following session's", "recheck_ok": True}
    )
    store = UpsertDownStore()
    store.upsert(following)
    [found] = write_waiting([horizon(session.model_dump_json()).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.WRITTEN and store.get(VIN, following.session_id) == following


def test_a_case_is_not_merged_into_an_earlier_one_verified_after_it_concluded(pack: KnowledgePack) -> None:
    """The earlier case was verified after the waiting one concluded: merged, its verdict was gone from every
    recall (a review). The case is a record of its own (the job's gates cannot tell such a verdict from one
    misdated ahead, and reset it: a review)."""
    store = UpsertDownStore()
    h = Harness(engine(pack, store=store))
    earlier = h.diagnose(alert("e-0", T0 - timedelta(days=5), 187))
    h.send(recheck("r-0", T0 + timedelta(days=3), earlier.session_id))
    before = store.get(VIN, earlier.session_id)
    assert before is not None and before.recheck_ok is True
    [found] = write_waiting([horizon(waiting_session(pack)).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.WRITTEN and store.get(VIN, earlier.session_id) == before
    assert store.get(VIN, found.session_id) is not None


def test_the_cases_of_a_file_are_written_in_the_order_they_concluded(pack: KnowledgePack) -> None:
    """The file's order decided whether two cases of a cause merged (a review): the earlier is written first."""
    first, second = waiting_at(pack, T0, "e-1"), waiting_at(pack, T0 + timedelta(days=5), "e-2")
    results = []
    for order in ((first, second), (second, first)):
        store = UpsertDownStore()
        report = write_waiting([horizon(x).model_dump_json() for x in order], engine(pack, store=store))
        assert [f.outcome for f in report.sessions] == [Outcome.WRITTEN, Outcome.WRITTEN]
        results.append([(r.session_id, r.merged_sessions) for r in store.history(VIN)])
    [[(kept, merged)], again] = results
    assert again == results[0] and kept == SessionState.model_validate_json(first).session_id and len(merged) == 1


def test_a_written_alone_cases_milestones_are_superseded_from_its_conclusion(pack: KnowledgePack) -> None:
    """A lifecycle event set the session's milestones invalid from the day the vehicle left care, after the case
    concluded; written alone, the case left them recalled beside it until then (a review)."""
    store = UpsertDownStore()
    old = Harness(engine(pack, store=store)).diagnose(alert("e-0", T0 - timedelta(days=40), 187))
    proto = store.get(VIN, old.session_id)
    assert proto is not None
    sid = f"{VIN}-20261030T081530"
    milestone = proto.model_copy(
        update={
            "session_id": milestone_id(sid, 1), "kind": RecordKind.MILESTONE,
            "concluded_at": T0 - timedelta(days=1), "merged_sessions": [],
        }
    )  # fmt: skip
    store.upsert(milestone)
    left = T0 + timedelta(days=3)
    store.soft_delete(VIN, left)
    final = proto.model_copy(update={"session_id": sid, "concluded_at": T0, "merged_sessions": []})
    write_alone(store, final, True, invalid_from=left)
    superseded = store.get(VIN, milestone_id(sid, 1))
    assert superseded is not None and not superseded.valid and superseded.invalid_ts == T0


# -- the job after the command: a case the command wrote is not written again -------------------------------------


def left_care_case_written(pack: KnowledgePack, store: UpsertDownStore) -> tuple[str, str]:
    """The vehicle's earlier case, its transfer three days after the waiting case concluded, and the waiting case
    written invalid from then by the command: the session's stored text (still waiting) and its case's id."""
    Harness(engine(pack, store=store)).diagnose(alert("e-0", T0 - timedelta(days=40), 187))
    store.soft_delete(VIN, T0 + timedelta(days=3))
    session = waiting_session(pack)
    [found] = write_waiting([horizon(session).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.WRITTEN and found.invalid_from
    return session, found.session_id


def test_the_jobs_retry_of_a_case_the_command_wrote_leaves_it_as_written(pack: KnowledgePack) -> None:
    """The vehicle's session still holds the case as waiting (the job's state does not learn of the command's
    write): its retry wrote it again through the write gates, and a case written invalid (the vehicle left care)
    was merged, valid, into the new owner's case of the same cause."""
    store = UpsertDownStore()
    session, case_id = left_care_case_written(pack, store)
    owner = Harness(engine(pack, store=store)).diagnose(alert("e-9", T0 + timedelta(days=10), 187))
    before = {r.session_id: r for r in store.history(VIN)}
    upserts = store.upserts
    after = engine(pack, store=store).retry_case(StoredSession(session), DedupState(), VIN).session
    assert isinstance(after, SessionState) and after.l3_written and not after.l3_pending
    assert store.upserts == upserts and {r.session_id: r for r in store.history(VIN)} == before
    case, new_owners = store.get(VIN, case_id), store.get(VIN, owner.session_id)
    assert case is not None and not case.valid
    assert new_owners is not None and new_owners.valid and new_owners.merged_sessions == []


def test_the_vehicles_next_alert_does_not_write_a_case_the_command_wrote_again(pack: KnowledgePack) -> None:
    """The next alert tried the waiting case once more before opening its session, and wrote it valid again."""
    store = UpsertDownStore()
    session, case_id = left_care_case_written(pack, store)
    h = Harness(engine(pack, store=store))
    h.state[VIN] = (session, '{"seen":{}}')
    diagnosis = h.diagnose(alert("e-9", T0 + timedelta(days=20), 187))
    assert "l3_written_late" in diagnosis.flags and diagnosis.session_id != case_id
    case = store.get(VIN, case_id)
    assert case is not None and not case.valid


def test_the_jobs_retry_of_a_case_merged_into_an_earlier_one_since_set_invalid_writes_nothing(
    pack: KnowledgePack,
) -> None:
    """The command merged the case into the vehicle's earlier one, which a lifecycle event then set invalid: no
    record is under the case's own id, and the job's retry, finding no valid case of its cause, wrote it again as a
    valid record of its own."""
    store = UpsertDownStore()
    earlier = Harness(engine(pack, store=store)).diagnose(alert("e-0", T0 - timedelta(days=20), 187))
    session = waiting_session(pack)
    [found] = write_waiting([horizon(session).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.WRITTEN and store.get(VIN, found.session_id) is None
    store.soft_delete(VIN, T0 + timedelta(days=3))
    upserts = store.upserts
    after = engine(pack, store=store).retry_case(StoredSession(session), DedupState(), VIN).session
    assert isinstance(after, SessionState) and after.l3_written and not after.l3_pending
    assert store.upserts == upserts and [r.session_id for r in store.history(VIN)] == [earlier.session_id]
    assert not store.history(VIN)[0].valid


def test_a_retry_after_a_restore_leaves_a_later_case_merged_into_its_record_as_it_is(pack: KnowledgePack) -> None:
    """The case was written, a later session of its cause merged into its record, and a restore brought back the
    state where it waited: its retry wrote it over the later case's summary (a re-run of its own session)."""
    store = UpsertDownStore()
    session = waiting_session(pack)
    h = Harness(engine(pack, store=store))
    h.state[VIN] = (session, '{"seen":{}}')
    later = h.diagnose(alert("e-2", T0 + timedelta(days=5), 187))
    [record] = store.history(VIN)
    assert record.merged_sessions == [later.session_id] and record.concluded_at == T0 + timedelta(days=5)
    upserts = store.upserts
    after = engine(pack, store=store).retry_case(StoredSession(session), DedupState(), VIN).session
    assert isinstance(after, SessionState) and after.l3_written and not after.l3_pending
    assert store.upserts == upserts and store.history(VIN) == [record]


def another_alerts_case_under_its_id(pack: KnowledgePack) -> tuple[UpsertDownStore, str, SessionState]:
    """A store holding, under a waiting session's id, another alert's case: the store, the session's stored text,
    and the session."""
    store = UpsertDownStore()
    session = waiting_session(pack)
    scratch = UpsertDownStore()
    engine(pack, store=scratch).retry_case(StoredSession(session), DedupState(), VIN)
    [case] = scratch.history(VIN)
    store.upsert(case.model_copy(update={"alert_text": "冷却液温度过高", "summary": "another alert's case"}))
    return store, session, SessionState.model_validate_json(session)


def test_another_sessions_case_under_the_same_id_is_not_taken_for_this_ones(pack: KnowledgePack) -> None:
    """A session that opened while the store could not be asked may hold an id the store holds for another session
    of its second: that record, of another alert, is no sign that this case was written."""
    store, session, waiting = another_alerts_case_under_its_id(pack)
    after = engine(pack, store=store).retry_case(StoredSession(session), DedupState(), VIN).session
    assert isinstance(after, SessionState) and after.l3_written
    written = store.get(VIN, waiting.session_id)
    assert written is not None and written.alert_text == waiting.alert_text


def test_write_waiting_writes_over_another_sessions_case_under_the_same_id_as_the_job_does(pack: KnowledgePack) -> None:
    """The command took any record under the session's id for the case, and reported it written: the job's retry,
    by its own rule (``opened_alike``), would have written the case over that other alert's record."""
    store, session, waiting = another_alerts_case_under_its_id(pack)
    [found] = write_waiting([horizon(session).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.WRITTEN
    written = store.get(VIN, waiting.session_id)
    assert written is not None and written.alert_text == waiting.alert_text


class SupersedeDownStore(UpsertDownStore):
    """Long-term memory whose batch upserts (a session's milestones set invalid) fail while it is down."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_down = False

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        if self.batch_down:
            raise StoreError("long-term memory at mysql://fleet: connection reset")
        super().upsert_many(records)


def test_a_case_found_written_has_its_sessions_milestones_superseded(pack: KnowledgePack) -> None:
    """The case's upsert took and the superseding of its milestones failed: the case waited, and its retry, finding
    it written, left the milestones valid for good (recalled as the vehicle's open session: a review)."""
    store, h, _ = held_with_valid_milestones(pack)
    [milestone] = [r for r in store.history(VIN) if r.kind is RecordKind.MILESTONE]
    assert milestone.valid
    session = h.state[VIN][0]
    assert session is not None
    after = engine(pack, store=store).retry_case(StoredSession(session), DedupState(), VIN).session
    assert isinstance(after, SessionState) and after.l3_written and not after.l3_pending
    [milestone] = [r for r in store.history(VIN) if r.kind is RecordKind.MILESTONE]
    assert not milestone.valid and milestone.invalid_ts == T0 + timedelta(hours=26)


def held_with_valid_milestones(pack: KnowledgePack) -> tuple[SupersedeDownStore, Harness, str]:
    """A session open 26 h whose case's upsert took and whose milestone's superseding failed: the store, the
    vehicle's harness (its state holding the case as waiting) and the case's session id."""
    store = SupersedeDownStore()
    h = Harness(engine(pack, store=store))
    h.diagnose(alert("e-1", T0, 87))
    assert h.diagnose(alert("e-2", T0 + timedelta(hours=25), 88)).flags == ["l3_milestone"]
    store.batch_down = True
    concluded = h.diagnose(alert("e-3", T0 + timedelta(hours=26), 187))
    assert "l3_write_failed" in concluded.flags and store.get(VIN, concluded.session_id) is not None
    store.batch_down = False
    return store, h, concluded.session_id


def milestones_valid(store: UpsertDownStore) -> list[bool]:
    return [r.valid for r in store.history(VIN) if r.kind is RecordKind.MILESTONE]


def test_the_next_alert_supersedes_the_milestones_of_a_case_it_finds_written(pack: KnowledgePack) -> None:
    store, h, case_id = held_with_valid_milestones(pack)
    before = store.get(VIN, case_id)
    assert "l3_written_late" in h.diagnose(alert("e-4", T0 + timedelta(days=3), 87)).flags
    assert milestones_valid(store) == [False] and store.get(VIN, case_id) == before


def test_a_case_found_written_whose_milestones_cannot_be_superseded_is_not_written_again(
    pack: KnowledgePack,
) -> None:
    """Written again, its superseding failing too, the case was reported lost (``l3_late_write_failed``) though long-
    term memory held it (a review): it is said written late, and the log says the milestones stay valid."""
    store, h, case_id = held_with_valid_milestones(pack)
    before = store.get(VIN, case_id)
    store.batch_down = True
    flags = h.diagnose(alert("e-4", T0 + timedelta(days=3), 87)).flags
    assert "l3_written_late" in flags and "l3_late_write_failed" not in flags
    assert milestones_valid(store) == [True] and store.get(VIN, case_id) == before


def test_write_waiting_supersedes_the_milestones_of_a_case_it_finds_written(pack: KnowledgePack) -> None:
    store, h, _ = held_with_valid_milestones(pack)
    session = h.state[VIN][0]
    assert session is not None
    [found] = write_waiting([horizon(session).model_dump_json()], engine(pack, store=store)).sessions
    assert found.outcome == Outcome.ALREADY and milestones_valid(store) == [False]


def test_a_retry_writes_a_case_as_at_its_conclusion_resetting_a_verdict_dated_after_it(pack: KnowledgePack) -> None:
    """A retry minutes after the case concluded: a verdict of the earlier record dated after the case (misdated a
    year ahead) was kept, as for a case known late (a review); it is reset, as the write at the conclusion does."""
    store = UpsertDownStore()
    h = Harness(engine(pack, store=store))
    earlier = h.diagnose(alert("e-0", T0 - timedelta(days=5), 187))
    h.send(recheck("r-0", T0 + timedelta(days=400), earlier.session_id))
    store.down = True
    assert "l3_write_failed" in h.diagnose(alert("e-1", T0, 187)).flags
    store.down = False
    session = h.state[VIN][0]
    assert session is not None
    after = engine(pack, store=store).retry_case(StoredSession(session), DedupState(), VIN).session
    assert isinstance(after, SessionState) and after.l3_written
    record = store.get(VIN, earlier.session_id)
    assert record is not None and len(record.merged_sessions) == 1 and record.recheck_ok is None

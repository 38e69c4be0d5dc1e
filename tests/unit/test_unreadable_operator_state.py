"""The diagnosis operator's own states that this release cannot read: a vehicle's pending events, its retry schedule.

Both are text in keyed state, written by this operator: a release that writes them otherwise, or damage, can leave
text this one cannot read. Raised, it failed the job at the vehicle's next event or timer, again at every restart.
Now what cannot be read is set aside to a process dead letter (its text as raw), counted in ``states_set_aside``,
and the vehicle goes on. Over the stand-in keyed runtime of ``test_operator_inline_restore``.
"""

from __future__ import annotations

import json

import pytest

import operators.diagnosis as op_module
from operators.diagnosis import read_pending, read_retry_schedule
from operators.metrics import DiagnosisMetrics
from tests.unit.test_operator_case_retry import (
    VIN,
    DownStore,
    GroupWithDistributions,
    concluding_alert,
    fire,
    refused_case,
    retry_timers,
    session,
    settle,
)
from tests.unit.test_operator_inline_restore import Callback, Runtime, alerts, diagnosed, operator
from tests.unit.test_operator_inline_restore import fire as fire_all
from vdoctor.models.offline import OfflineModel
from vdoctor.records import DeadLetter
from vdoctor.settings import DEFAULT_CASE_RETRY_S
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit


def letters(out: list[tuple[str, str]]) -> list[DeadLetter]:
    return [DeadLetter.model_validate_json(text) for kind, text in out if kind == op_module.DEAD_LETTER]


def counted(function: op_module.DiagnosisFunction) -> GroupWithDistributions:
    group = GroupWithDistributions()
    function.metrics = DiagnosisMetrics(group, in_flight=lambda: 0, queued=lambda: 0, summary_counts=dict)
    return group


# -- the readers -------------------------------------------------------------------------


def test_a_pending_list_is_read_entry_by_entry() -> None:
    good = [['{"type":"alert"}', "line 1"], list(op_module.RETRY_ITEM)]
    read = read_pending(json.dumps(good))
    assert (read.items, read.unreadable) == ([('{"type":"alert"}', "line 1"), op_module.RETRY_ITEM], None)
    # Entries that are no pair of texts are set aside together, as one JSON list; the others are kept, in order.
    read = read_pending(json.dumps([good[0], ["only one"], 5, ["a", "b", "c"], ["x", None], good[1]]))
    assert read.items == [('{"type":"alert"}', "line 1"), op_module.RETRY_ITEM] and not read.whole
    assert read.unreadable == '[["only one"], 5, ["a", "b", "c"], ["x", null]]'
    assert read.why == "4 of its 6 entries are no pair of texts, an event's JSON and its line"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('[["a", "b"]', "not JSON: "),
        ('{"events": []}', "JSON an object, not a list"),
        ('"[]"', "JSON a string, not a list"),
        ("null", "JSON null, not a list"),
        ("[" * 100_000 + "]" * 100_000, "not JSON: "),  # nested past the parser's recursion limit
    ],
    ids=["cut", "object", "string", "null", "deep"],
)
def test_a_pending_list_that_is_no_json_list_is_unreadable_whole(text: str, why: str) -> None:
    read = read_pending(text)
    assert read.items == [] and read.whole and read.unreadable == text and read.why.startswith(why)


@pytest.mark.parametrize("text", ["1700000000000", "a b", "1 2 3", "1  2", "1 2\n", "1.5 2", "١٢ 3", ""])
def test_a_retry_schedule_is_two_whole_numbers(text: str) -> None:
    assert read_retry_schedule("1700000000001 1699999000000") == (1700000000001, 1699999000000)
    assert read_retry_schedule("20 -100") == (20, -100)  # (a processing clock before 1970: a test's)
    assert read_retry_schedule(text) is None


# -- the pending list, through the operator ------------------------------------------------


def restored_then_sent(
    stored: str, event: tuple[str, str, str], concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[Runtime, op_module.DiagnosisFunction, GroupWithDistributions, list[tuple[str, str]]]:
    """An operator restored with ``stored`` as the vehicle's pending list, then sent the vehicle's ``event``, run to
    the end of input: the runtime, the operator, its counters and every output."""
    vin, event_json, raw = event
    runtime = Runtime({"pending": {vin: stored}})
    function = operator(runtime, concurrency, OfflineModel(), InMemoryStore(), monkeypatch)
    group = counted(function)
    runtime.key = vin
    out = list(function.process_element(("alert", vin, event_json, raw), Callback(runtime)))
    return runtime, function, group, out + settle(function, runtime) + fire_all(function, runtime, "event")


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_unreadable_pending_list_is_set_aside_and_the_event_runs(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vehicle's next event found the text and raised (json.loads) before it ran: the job failed at that event,
    again at every restart."""
    [(vin, event_json, raw)] = alerts(1, 1)
    runtime, function, group, out = restored_then_sent(
        '[["{\\"type\\": \\"alert\\"', (vin, event_json, raw), concurrency, monkeypatch
    )
    [letter] = letters(out)
    assert letter.stage == "process" and letter.raw == '[["{\\"type\\": \\"alert\\"'
    assert letter.error.startswith(f"the pending events of {vin} in the diagnosis operator's state cannot be read")
    assert "(not JSON: " in letter.error and letter.error.endswith("do not run (send them again)")
    assert diagnosed(out) == [(vin, "e-0-0")]
    assert runtime.data["pending"].get(vin) is None
    assert group.counters["states_set_aside"].count == 1 and group.counters["dead_letters"].count == 1
    function.close()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_unreadable_entry_is_set_aside_and_the_others_run_after_a_restore(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's pending list with one entry this release cannot read: the others run when the job resumes,
    before the vehicle's next event, and the one is a letter."""
    [(vin, first_json, first_raw), (_, later_json, later_raw)] = alerts(1, 2)
    stored = json.dumps([[first_json, first_raw], {"event": "from another release"}], ensure_ascii=False)
    runtime, function, group, out = restored_then_sent(stored, (vin, later_json, later_raw), concurrency, monkeypatch)
    [letter] = letters(out)
    assert letter.raw == '[{"event": "from another release"}]'
    assert letter.error.startswith(f"entries of the pending events of {vin} in the diagnosis operator's state")
    assert "(1 of its 2 entries is no pair of texts" in letter.error
    assert letter.error.endswith("the vehicle's other pending events run")
    assert diagnosed(out) == [(vin, "e-0-0"), (vin, "e-0-1")]
    assert runtime.data["pending"].get(vin) is None
    assert group.counters["states_set_aside"].count == 1
    function.close()


def test_an_unreadable_pending_list_met_at_the_end_of_input_is_set_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Process mode cannot list keys: a restored vehicle's pending list is read at its end-of-input timer."""
    [(vin, _, _)] = alerts(1, 1)
    runtime = Runtime({"pending": {vin: "5"}}, {("event", vin, op_module.END_OF_INPUT)})
    function = operator(runtime, 4, OfflineModel(), InMemoryStore(), monkeypatch)
    function._resumed = True  # (process mode: nothing listed at the first callback)
    out = fire_all(function, runtime, "event")
    [letter] = letters(out)
    assert letter.raw == "5" and "(JSON a number, not a list)" in letter.error
    assert runtime.data["pending"].get(vin) is None
    function.close()


@pytest.mark.parametrize(
    ("stored", "raw", "instead"),
    [
        ('[5, ["x"]]', '[5, ["x"]]', "no other events were pending"),
        # Half an emoji in an entry, as its JSON escape: the letter's raw held the surrogate itself, and its write
        # failed the job again (a review).
        ('[["{}", "line"], ["\\ud83d"], {"e": "\\udc00"}]', '[["\\ud83d"], {"e": "\\udc00"}]', "other pending"),
    ],
    ids=["none-readable", "half-emoji"],
)
def test_the_unreadable_entries_of_a_list_are_one_letter(
    stored: str, raw: str, instead: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    [(vin, _, _)] = alerts(1, 1)
    runtime = Runtime({"pending": {vin: stored}}, {("event", vin, op_module.END_OF_INPUT)})
    function = operator(runtime, 4, OfflineModel(), InMemoryStore(), monkeypatch)
    group = counted(function)
    out = fire_all(function, runtime, "event")
    # (The readable entry "{}" runs, and is a letter of its own: no longer read as an event.)
    [letter] = [x for x in letters(out) if "pending events" in x.error]
    assert letter.raw == raw and instead in letter.error
    assert group.counters["states_set_aside"].count == 1
    assert group.counters["dead_letters"].count == len(letters(out))
    assert runtime.data["pending"].get(vin) is None
    function.close()


# -- the retry schedule --------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_unreadable_retry_schedule_starts_again_while_the_case_waits(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its timer raised (int of the text) at every restart; now the case is tried on a new schedule."""
    store = DownStore()
    runtime, function, out = refused_case(store, concurrency, monkeypatch)
    group = counted(function)
    [old] = retry_timers(runtime)
    runtime.data["case_retry"][VIN] = "next try in ten minutes"
    store.down = False
    out = fire(function, runtime, old) + settle(function, runtime)
    [letter] = letters(out)
    assert letter.raw == "next try in ten minutes"
    assert letter.error.startswith(f"the case retry schedule of {VIN} in the diagnosis operator's state")
    assert letter.error.endswith("the vehicle's waiting case is tried again from now, for up to 7 days")
    assert group.counters["states_set_aside"].count == 1
    # The old timer is an old one; the new schedule's tries the case.
    [new] = retry_timers(runtime)
    assert new[2] >= runtime.now + DEFAULT_CASE_RETRY_S * 1000
    assert runtime.data["case_retry"][VIN] == f"{new[2]} {runtime.now}"
    assert store.count() == 0 and session(runtime).l3_pending
    assert fire(function, runtime, new) + settle(function, runtime) == []
    assert store.count() == 1 and not session(runtime).l3_pending
    function.close()


@pytest.mark.parametrize("text", ["at ten", "1 2 3"])
def test_an_unreadable_retry_schedule_met_by_a_failed_write_starts_again(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vehicle's next failed write read the schedule to start its horizon again: it raised (the job failed at
    every restart), or kept a first number as the next try's timer, long past, and the tries stopped unseen."""
    store = DownStore()
    runtime, function, _ = refused_case(store, 4, monkeypatch)
    runtime.data["case_retry"][VIN] = text
    runtime.now += 60_000
    out = list(function.process_element(concluding_alert("e-2", "2026-11-01T09:00:00Z"), Callback(runtime)))
    out += settle(function, runtime)
    [letter] = letters(out)
    assert letter.raw == text and len(diagnosed(out)) == 1
    at, began = read_retry_schedule(runtime.data["case_retry"][VIN]) or (0, 0)
    assert began == runtime.now and ("processing", VIN, at) in runtime.timers
    function.close()


def test_an_unreadable_retry_schedule_of_a_vehicle_with_no_case_waiting_is_cleared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = DownStore()
    runtime, function, _ = refused_case(store, 4, monkeypatch)
    [old] = retry_timers(runtime)
    state = session(runtime)
    runtime.data["session"][VIN] = state.model_copy(update={"l3_pending": False}).model_dump_json()
    runtime.data["case_retry"][VIN] = ""
    out = fire(function, runtime, old) + settle(function, runtime)
    [letter] = letters(out)
    assert letter.error.endswith("the vehicle has no case waiting for its write, so no retry")
    assert runtime.data["case_retry"].get(VIN) is None and retry_timers(runtime) == []
    function.close()


def test_the_letter_names_the_vehicle_whose_schedule_it_is_under_another_vehicles_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool applies every finished vehicle under the tick's timer, whose context's key is the vehicle that
    registered the tick: the letter named that vehicle (a review)."""
    store = DownStore()
    runtime, function, _ = refused_case(store, 4, monkeypatch)
    runtime.data["case_retry"][VIN] = "garbage"
    [_, (other, other_json, other_raw)] = alerts(2, 1)
    runtime.key = other  # another vehicle's event: the tick is registered under its key
    out = list(function.process_element(("alert", other, other_json, other_raw), Callback(runtime)))
    runtime.key = VIN  # the vehicle's next concluding alert, its write failing again
    out += list(function.process_element(concluding_alert("e-2", "2026-11-01T09:00:00Z"), Callback(runtime)))
    ticks = {t[1] for t in runtime.timers if t[0] == "processing" and t[2] % op_module.TICK_MS == 0}
    assert ticks == {other}
    out += settle(function, runtime)
    [letter] = letters(out)
    assert letter.raw == "garbage" and letter.error.startswith(f"the case retry schedule of {VIN} ")
    assert read_retry_schedule(runtime.data["case_retry"][VIN]) is not None
    function.close()


def test_readable_entries_stored_back_keep_half_an_emoji_as_its_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored back as decoded, an entry's lone surrogate (from a JSON escape) was a text the state's string coder
    cannot write: the job failed at every restart (a review)."""
    [(vin, _, _)] = alerts(1, 1)
    stored = '[["{\\"alert_text\\": \\"pump \\\\ud83d\\"}", "line \\ud83d"], 5]'
    runtime = Runtime({"pending": {vin: stored}})
    function = operator(runtime, 4, OfflineModel(), InMemoryStore(), monkeypatch)
    runtime.key = vin
    [(event_json, line)] = function._pending(vin)
    assert line == "line \ud83d"
    kept = runtime.data["pending"][vin]
    kept.encode("utf-8")  # (raised UnicodeEncodeError: surrogates not allowed)
    assert read_pending(kept).items == [(event_json, line)]
    for entry in function._pending_entries(vin):
        entry.encode("utf-8")
    function.close()

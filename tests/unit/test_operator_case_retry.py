"""A concluded case whose write failed is tried again on the diagnosis operator's timer.

The case waited in the vehicle's session for the vehicle's next alert only: a vehicle silent for longer than its
session state's TTL (48 h) lost it without a word, however soon long-term memory was back. The operator now
schedules a retry (``runtime.case_retry_s``) when a run leaves a case waiting, runs it as an item of the
vehicle's chain (at concurrency 1, inline), and schedules the next one while it still fails. Over the stand-in
keyed runtime of ``test_operator_inline_restore``; the real MiniCluster runs it in
``tests/integration/test_case_retry_job.py``.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import pytest
from pyflink.datastream import TimeDomain

import operators.diagnosis as op_module
from operators.metrics import DiagnosisMetrics
from tests.unit.test_operator_duplicates import GroupWithMeter
from tests.unit.test_operator_inline_restore import Callback, Context, Keys, Runtime, operator, vin
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.errors import StoreError
from vdoctor.events import parse_event
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import SessionState
from vdoctor.models.offline import OfflineModel
from vdoctor.records import MemoryRecord
from vdoctor.settings import DEFAULT_CASE_RETRY_S, Settings, with_overrides
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

VIN = vin(0)


class Distribution:
    def update(self, value: int) -> None:
        pass


class GroupWithDistributions(GroupWithMeter):
    """The stand-in metric group, whose counters the test reads."""

    def distribution(self, name: str) -> Distribution:
        return Distribution()


class DownStore(InMemoryStore):
    """Long-term memory whose upserts fail while it is down (counted), and wait while ``hold`` is clear."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.upserts_tried = 0
        self.hold = threading.Event()
        self.hold.set()

    def upsert(self, record: MemoryRecord) -> None:
        self.upserts_tried += 1
        self.hold.wait(10)
        if self.down:
            raise StoreError("long-term memory at mysql://fleet: connection refused")
        super().upsert(record)

    def soft_delete(self, vin: str, at: datetime) -> int:
        if self.down:
            raise StoreError("long-term memory at mysql://fleet: connection refused")
        return super().soft_delete(vin, at)


class ReadDownStore(DownStore):
    """Down for reads as well (``reads_down``, and while it is ``down``), reads counted."""

    def __init__(self) -> None:
        super().__init__()
        self.reads_tried = 0
        self.reads_down = False

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        self.reads_tried += 1
        if self.down or self.reads_down:
            raise StoreError("long-term memory at mysql://fleet: connection refused")
        return super().get(vin, session_id)


def concluding_alert(event_id: str, ts: str) -> tuple[str, str, str, str]:
    raw = json.dumps({
        "type": "alert", "event_id": event_id, "vin": VIN, "series": "EV-A", "ts": ts,
        "alert_text": "电池包单体压差过大", "dtc_codes": ["P0A7F"], "signals": {"cell_voltage_diff_mv": 187},
    }, ensure_ascii=False)  # fmt: skip
    return ("alert", VIN, parse_event(raw).model_dump_json(), raw)


def retry_timers(runtime: Runtime) -> list[tuple]:
    return sorted(
        t for t in runtime.timers if t[0] == "processing" and t[2] % op_module.TICK_MS == op_module.RETRY_MARK
    )


def settle(function: op_module.DiagnosisFunction, runtime: Runtime) -> list[tuple[str, str]]:
    """Fire the ticks until the run pool has applied everything (the retry timers are left alone)."""
    out: list[tuple[str, str]] = []
    for _ in range(2000):
        ticks = sorted(t for t in runtime.timers if t[0] == "processing" and t[2] % op_module.TICK_MS == 0)
        if not ticks and (function.pool is None or function.pool.idle):
            return out
        for timer in ticks:
            runtime.timers.discard(timer)
            runtime.key = timer[1]
            out += list(function.on_timer(timer[2], Callback(runtime, TimeDomain.PROCESSING_TIME)))
        time.sleep(0.005)
    raise AssertionError("the run pool never settled")


def fire(function: op_module.DiagnosisFunction, runtime: Runtime, timer: tuple) -> list[tuple[str, str]]:
    runtime.timers.discard(timer)
    runtime.key = timer[1]
    runtime.now = timer[2]
    return list(function.on_timer(timer[2], Callback(runtime, TimeDomain.PROCESSING_TIME)))


def refused_case(
    store: DownStore, concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[Runtime, op_module.DiagnosisFunction, list[tuple[str, str]]]:
    """An operator over ``store``, and the vehicle's concluding alert while the store is down: its case waits."""
    runtime = Runtime()
    function = operator(runtime, concurrency, OfflineModel(), store, monkeypatch)
    store.down = True
    runtime.key = VIN
    out = list(function.process_element(concluding_alert("e-1", "2026-11-01T08:00:00Z"), Callback(runtime)))
    return runtime, function, out + settle(function, runtime)


def session(runtime: Runtime) -> SessionState:
    return SessionState.model_validate_json(runtime.data["session"][VIN])


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_case_the_store_refused_is_written_by_the_retry_timer_while_the_vehicle_is_silent(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, store = Runtime(), DownStore()
    function = operator(runtime, concurrency, OfflineModel(), store, monkeypatch)
    metrics = GroupWithDistributions()
    function.metrics = DiagnosisMetrics(metrics, in_flight=lambda: 0, queued=lambda: 0, summary_counts=dict)
    store.down = True
    runtime.key = VIN
    out = list(function.process_element(concluding_alert("e-1", "2026-11-01T08:00:00Z"), Callback(runtime)))
    out += settle(function, runtime)
    [(kind, diagnosis)] = out
    assert kind == op_module.DIAGNOSIS and "l3_write_failed" in json.loads(diagnosis)["flags"]
    assert session(runtime).l3_pending and store.count() == 0
    [first] = retry_timers(runtime)
    assert first[1] == VIN and first[2] >= runtime.now + DEFAULT_CASE_RETRY_S * 1000

    # Still down at the first try: the session keeps the case, and the next try's timer is there (registered as
    # the try began).
    assert fire(function, runtime, first) + settle(function, runtime) == []
    assert session(runtime).l3_pending and store.count() == 0
    [second] = retry_timers(runtime)
    assert second[2] >= first[2] + DEFAULT_CASE_RETRY_S * 1000
    counts = {name: c.count for name, c in metrics.counters.items()}
    # A try is no run, and a failed try is neither a write nor one failed for good (that was the alert's).
    assert counts["runs"] == 1 and counts["l3_writes"] == 1 and counts["l3_write_failures"] == 1

    # Back: the next try writes it, with no output.
    store.down = False
    assert fire(function, runtime, second) + settle(function, runtime) == []
    assert [r.session_id for r in store.history(VIN)] == [f"{VIN}-20261101T080000"]
    assert not session(runtime).l3_pending and session(runtime).l3_written
    assert metrics.counters["l3_late_writes"].count == 1 and metrics.counters["runs"].count == 1
    # The timer registered for a next try finds nothing waiting, and ends the vehicle's retries.
    [third] = retry_timers(runtime)
    assert fire(function, runtime, third) + settle(function, runtime) == []
    assert retry_timers(runtime) == [] and runtime.data["case_retry"].get(VIN) is None
    assert runtime.data.get("pending", {}).get(VIN) is None

    # The vehicle's next alert has nothing left to write late.
    out = list(function.process_element(concluding_alert("e-2", "2026-11-04T08:00:00Z"), Callback(runtime)))
    out += settle(function, runtime)
    [(_, diagnosis)] = out
    assert "l3_written_late" not in json.loads(diagnosis)["flags"]
    function.close()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_one_retry_timer_per_vehicle_however_many_writes_failed(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failed write registered a timer of its own, and each timer its next: three failures made three tries
    of the one waiting case at every round (found by a review)."""
    runtime, store = Runtime(), DownStore()
    function = operator(runtime, concurrency, OfflineModel(), store, monkeypatch)
    store.down = True
    runtime.key = VIN
    for i, day in enumerate(["01", "04", "07"]):
        list(function.process_element(concluding_alert(f"e-{i}", f"2026-11-{day}T08:00:00Z"), Callback(runtime)))
        settle(function, runtime)
        runtime.now += 1000
    [timer] = retry_timers(runtime)
    before = store.upserts_tried
    for _ in range(3):
        fire(function, runtime, timer)
        settle(function, runtime)
        [timer] = retry_timers(runtime)
    assert store.upserts_tried == before + 3  # one try a round
    function.close()


def test_the_tries_stop_after_the_horizon(monkeypatch: pytest.MonkeyPatch) -> None:
    store = DownStore()
    runtime, function, _ = refused_case(store, 4, monkeypatch)
    [timer] = retry_timers(runtime)
    runtime.now += op_module.CASE_RETRY_HORIZON_MS
    scheduled = runtime.data["case_retry"][VIN]
    # The timer of that time (as it would have been rescheduled at each try), past the horizon: no try, no timer.
    late = (timer[0], timer[1], timer[2] + op_module.CASE_RETRY_HORIZON_MS // op_module.TICK_MS * op_module.TICK_MS)
    runtime.data["case_retry"][VIN] = f"{late[2]} {scheduled.split()[1]}"
    tried = store.upserts_tried
    runtime.timers.discard(timer)
    stored = runtime.data["session"][VIN]
    metrics = GroupWithDistributions()
    function.metrics = DiagnosisMetrics(metrics, in_flight=lambda: 0, queued=lambda: 0, summary_counts=dict)
    # No try; the session goes to the dead letters, so that a vehicle silent past its state's TTL loses the case
    # to no one (it was dropped with the state without a word).
    [(kind, letter)] = fire(function, runtime, late) + settle(function, runtime)
    assert kind == op_module.DEAD_LETTER and json.loads(letter)["raw"] == stored
    assert json.loads(letter)["error"].startswith(f"the concluded case of {VIN} was tried for 7 days")
    assert metrics.counters["dead_letters"].count == 1
    assert store.upserts_tried == tried and retry_timers(runtime) == []
    assert session(runtime).l3_pending  # it waits for the vehicle's next alert
    # A try queued before (or restored from a checkpoint taken during it) that fails after that starts no new
    # seven days of tries (found by a review).
    late_try = op_module.Applied(
        runtime.data["session"][VIN], runtime.data["dedup"][VIN], event=False, case_pending=True
    )
    [(kind, _)] = function._apply([late_try], Callback(runtime), VIN)  # (its letter: see the test below)
    assert kind == op_module.DEAD_LETTER
    assert retry_timers(runtime) == [] and runtime.data["case_retry"].get(VIN) is None
    function.close()


@pytest.mark.parametrize("can_list_keys", [True, False])
@pytest.mark.parametrize("resume_at", [1, 4])
def test_a_try_in_flight_at_a_checkpoint_is_tried_again_after_the_restore(
    can_list_keys: bool, resume_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next try's timer was registered only when a try's result was applied: a checkpoint taken while a
    try ran held its item in pending but no timer, and in process mode (which cannot list the keys to resume)
    the case then waited for the vehicle's next event (found by a review)."""
    monkeypatch.setattr(Keys, "can_list_keys", can_list_keys)
    store = ReadDownStore()
    runtime, function, _ = refused_case(store, 4, monkeypatch)
    [timer] = retry_timers(runtime)
    store.hold.clear()
    fire(function, runtime, timer)  # the try starts, and waits in the store
    data, timers = runtime.checkpoint()
    assert json.loads(data["pending"][VIN]) == [list(op_module.RETRY_ITEM)]
    store.hold.set()
    function.close()

    # Restored while the store is still down: one try at the timer, the restored one in pending (the timer added
    # a second until a review found it; each asks the store, and summarises the case when it answers).
    store.reads_down = True
    reads = store.reads_tried
    restored = Runtime(data, timers)
    restored.now = runtime.now
    again = operator(restored, resume_at, OfflineModel(), store, monkeypatch)
    [due] = retry_timers(restored)
    assert fire(again, restored, due) + settle(again, restored) == []
    assert store.reads_tried == reads + 1 and session(restored).l3_pending
    store.down = store.reads_down = False
    [due] = retry_timers(restored)
    assert fire(again, restored, due) + settle(again, restored) == []
    assert [r.session_id for r in store.history(VIN)] == [f"{VIN}-20261101T080000"]
    assert not session(restored).l3_pending
    again.close()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_try_asks_the_store_first_and_goes_no_further_while_it_is_down(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ReadDownStore()
    runtime, function, _ = refused_case(store, concurrency, monkeypatch)
    assert function.engine is not None
    upserts, reads, checked = store.upserts_tried, store.reads_tried, function.engine.summary_metrics.checked
    for _ in range(3):
        [timer] = retry_timers(runtime)
        fire(function, runtime, timer)
        settle(function, runtime)
    assert store.reads_tried == reads + 3 and store.upserts_tried == upserts
    assert function.engine.summary_metrics.checked == checked and session(runtime).l3_pending
    store.down = False
    [timer] = retry_timers(runtime)
    fire(function, runtime, timer)
    settle(function, runtime)
    assert store.count() == 1 and not session(runtime).l3_pending
    function.close()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_case_that_fails_later_gets_the_whole_horizon_of_tries(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vehicle's one timer kept the start of the tries of the case before, which the next alert replaced: the
    new case had what was left of the old one's seven days (found by a review)."""
    store = DownStore()
    runtime, function, _ = refused_case(store, concurrency, monkeypatch)
    first_began = int(runtime.data["case_retry"][VIN].split()[1])
    runtime.now += op_module.CASE_RETRY_HORIZON_MS - 60_000
    out = list(function.process_element(concluding_alert("e-2", "2026-11-08T08:00:00Z"), Callback(runtime)))
    [(_, diagnosis)] = out + settle(function, runtime)
    assert json.loads(diagnosis)["flags"] == ["l3_late_write_failed", "l3_write_failed"]
    assert int(runtime.data["case_retry"][VIN].split()[1]) == runtime.now > first_began
    function.close()


def test_tries_come_at_most_half_the_state_ttl_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each try writes the session's state, which keeps it: a state that expired between two tries lost the case."""
    runtime, store = Runtime(), DownStore()
    monkeypatch.setattr(op_module, "build_engine", lambda settings: DiagnosisEngine(
        store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack()))  # fmt: skip
    monkeypatch.setattr(op_module, "KeySwitch", lambda context: Keys(runtime))
    settings = with_overrides(Settings(), concurrency=1, state_ttl_s=60, case_retry_s=600)
    function = op_module.DiagnosisFunction(settings.for_workers(), None)
    function.open(Context(runtime))
    store.down = True
    runtime.key = VIN
    list(function.process_element(concluding_alert("e-1", "2026-11-01T08:00:00Z"), Callback(runtime)))
    [timer] = retry_timers(runtime)
    assert runtime.now + 30_000 <= timer[2] <= runtime.now + 30_000 + 2 * op_module.TICK_MS
    function.close()


def test_a_lifecycle_event_counts_its_late_write_and_a_case_lost() -> None:
    """The lifecycle event's try of the waiting case threw its figures away: neither a late write nor a lost case
    was counted (found by a review). A case lost at the vehicle's next alert was counted twice as a failed write."""
    from tests.unit.test_engine_failures import FlakyEmbedder, Harness, alert, engine, lifecycle

    pack = load_pack()
    for embedder_back in (True, False):
        embedder = FlakyEmbedder()
        h = Harness(engine(pack, embedder=embedder))
        embedder.passages_down = True
        h.diagnose(alert("e-1", datetime(2026, 11, 1, 8, tzinfo=UTC), 187))
        embedder.passages_down = not embedder_back
        stats = h.send(lifecycle("l-1", datetime(2026, 11, 2, tzinfo=UTC))).stats
        assert (stats.late_write, stats.case_lost, stats.write_failed) == (embedder_back, not embedder_back, False)
    embedder = FlakyEmbedder()
    h = Harness(engine(pack, embedder=embedder))
    embedder.passages_down = True
    h.diagnose(alert("e-1", datetime(2026, 11, 1, 8, tzinfo=UTC), 187))
    result = h.send(alert("e-2", datetime(2026, 11, 4, 8, tzinfo=UTC), 90))  # opens a session, concludes nothing
    assert result.stats.case_lost and not result.stats.write_failed


def test_the_pause_after_a_store_found_down_is_at_most_half_the_retry_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job retrying every 2 s (the integration test's) must not wait a minute after a try found the store down."""
    runtime = Runtime()
    engine = DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    monkeypatch.setattr(op_module, "build_engine", lambda settings: engine)
    monkeypatch.setattr(op_module, "KeySwitch", lambda context: Keys(runtime))
    for retry_s, pause_s in ((2, 1.0), (DEFAULT_CASE_RETRY_S, 60.0)):
        engine.store_down_pause_s = 60.0
        settings = with_overrides(Settings(), concurrency=4, case_retry_s=retry_s).for_workers()
        function = op_module.DiagnosisFunction(settings, None)
        function.open(Context(runtime))
        assert engine.store_down_pause_s == pause_s
        function.close()


@pytest.mark.parametrize("written", [True, False])
def test_a_try_still_in_flight_at_the_horizon_gives_the_letter_only_if_it_fails(
    written: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The horizon's timer sent the letter ("still not in long-term memory") while a try it had queued still ran,
    and that try then wrote the case (a review). The try's own failure gives the letter now."""
    store = DownStore()
    runtime, function, _ = refused_case(store, 4, monkeypatch)
    metrics = GroupWithDistributions()
    function.metrics = DiagnosisMetrics(metrics, in_flight=lambda: 0, queued=lambda: 0, summary_counts=dict)
    [timer] = retry_timers(runtime)
    store.hold.clear()
    assert fire(function, runtime, timer) == []  # the try starts, and waits in the store
    [horizon] = retry_timers(runtime)
    runtime.data["case_retry"][VIN] = f"{horizon[2]} {horizon[2] - op_module.CASE_RETRY_HORIZON_MS}"
    store.down = not written
    assert fire(function, runtime, horizon) == []  # the horizon, with the try in flight: no letter yet
    store.hold.set()
    out = settle(function, runtime)
    if written:
        assert out == [] and store.count() == 1 and not session(runtime).l3_pending
        assert metrics.counters["l3_late_writes"].count == 1 and metrics.counters["dead_letters"].count == 0
    else:
        [(kind, letter)] = out
        assert kind == op_module.DEAD_LETTER and "was tried for 7 days" in json.loads(letter)["error"]
        assert store.count() == 0 and session(runtime).l3_pending and metrics.counters["dead_letters"].count == 1
    assert retry_timers(runtime) == []
    function.close()


def test_l3_writes_counts_every_write_of_a_run() -> None:
    from vdoctor.diagnosis import RunStats

    metrics = GroupWithDistributions()
    recorder = DiagnosisMetrics(metrics, in_flight=lambda: 0, queued=lambda: 0, summary_counts=dict)
    for writes in (2, 1, 0):
        stats = RunStats(writes=writes, write_ms=1.0 if writes else None, late_write=writes == 2)
        recorder.record(op_module.Applied(None, "{}", stats=stats))
    assert metrics.counters["l3_writes"].count == 3 and metrics.counters["l3_late_writes"].count == 1

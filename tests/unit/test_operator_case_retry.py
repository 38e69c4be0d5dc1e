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
import time
from datetime import datetime

import pytest
from pyflink.datastream import TimeDomain

import operators.diagnosis as op_module
from tests.unit.test_operator_inline_restore import Callback, Runtime, operator, vin
from vdoctor.errors import StoreError
from vdoctor.events import parse_event
from vdoctor.memory.session import SessionState
from vdoctor.models.offline import OfflineModel
from vdoctor.records import MemoryRecord
from vdoctor.settings import DEFAULT_CASE_RETRY_S
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

VIN = vin(0)


class DownStore(InMemoryStore):
    """Long-term memory whose upserts fail while it is down."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def upsert(self, record: MemoryRecord) -> None:
        if self.down:
            raise StoreError("long-term memory at mysql://fleet: connection refused")
        super().upsert(record)

    def soft_delete(self, vin: str, at: datetime) -> int:
        if self.down:
            raise StoreError("long-term memory at mysql://fleet: connection refused")
        return super().soft_delete(vin, at)


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


def session(runtime: Runtime) -> SessionState:
    return SessionState.model_validate_json(runtime.data["session"][VIN])


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_case_the_store_refused_is_written_by_the_retry_timer_while_the_vehicle_is_silent(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, store = Runtime(), DownStore()
    function = operator(runtime, concurrency, OfflineModel(), store, monkeypatch)
    store.down = True
    runtime.key = VIN
    out = list(function.process_element(concluding_alert("e-1", "2026-11-01T08:00:00Z"), Callback(runtime)))
    out += settle(function, runtime)
    [(kind, diagnosis)] = out
    assert kind == op_module.DIAGNOSIS and "l3_write_failed" in json.loads(diagnosis)["flags"]
    assert session(runtime).l3_pending and store.count() == 0
    [first] = retry_timers(runtime)
    assert first[1] == VIN and first[2] >= runtime.now + DEFAULT_CASE_RETRY_S * 1000

    # Still down at the first try: the session keeps the case, and the next try is scheduled.
    assert fire(function, runtime, first) + settle(function, runtime) == []
    assert session(runtime).l3_pending and store.count() == 0
    [second] = retry_timers(runtime)
    assert second[2] >= first[2] + DEFAULT_CASE_RETRY_S * 1000

    # Back: the next try writes it, with no output, and no try is left.
    store.down = False
    assert fire(function, runtime, second) + settle(function, runtime) == []
    assert [r.session_id for r in store.history(VIN)] == [f"{VIN}-20261101T080000"]
    assert not session(runtime).l3_pending and session(runtime).l3_written
    assert retry_timers(runtime) == [] and runtime.data.get("pending", {}).get(VIN) is None

    # The vehicle's next alert has nothing left to write late.
    out = list(function.process_element(concluding_alert("e-2", "2026-11-04T08:00:00Z"), Callback(runtime)))
    out += settle(function, runtime)
    [(_, diagnosis)] = out
    assert "l3_written_late" not in json.loads(diagnosis)["flags"]
    function.close()


def test_a_retry_timer_of_a_vehicle_whose_case_was_written_meanwhile_does_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vehicle's next alert wrote the case late before its timer came: the timer finds nothing waiting."""
    runtime, store = Runtime(), DownStore()
    function = operator(runtime, 4, OfflineModel(), store, monkeypatch)
    store.down = True
    runtime.key = VIN
    list(function.process_element(concluding_alert("e-1", "2026-11-01T08:00:00Z"), Callback(runtime)))
    settle(function, runtime)
    [timer] = retry_timers(runtime)
    store.down = False
    list(function.process_element(concluding_alert("e-2", "2026-11-04T08:00:00Z"), Callback(runtime)))
    [(_, diagnosis)] = settle(function, runtime)
    assert "l3_written_late" in json.loads(diagnosis)["flags"]
    state = dict(runtime.data["session"])
    assert fire(function, runtime, timer) + settle(function, runtime) == []
    assert runtime.data["session"] == state and function.pool is not None and function.pool.idle
    function.close()

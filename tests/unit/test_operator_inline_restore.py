"""The diagnosis operator resumed at concurrency 1 from a checkpoint of a run at a higher one.

A fast tier over a small stand-in for PyFlink's keyed runtime (state per key, timers, key switching and a
checkpoint as a copy of both); the real MiniCluster runs the same case in
``tests/e2e/test_concurrency.py::test_a_job_resumed_at_concurrency_1_runs_the_events_waiting_in_the_pool``.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pyflink.datastream import TimeDomain

import operators.diagnosis as op_module
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import parse_event
from vdoctor.knowledge import load_pack
from vdoctor.models.offline import OfflineModel
from vdoctor.settings import Settings, with_overrides
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

ALPHABET = "0123456789ABCDEFGHJKLMNPRSTUVWXYZ"


def vin(i: int) -> str:
    return "LSVCNCR0000" + "".join(ALPHABET[(i // len(ALPHABET) ** p) % len(ALPHABET)] for p in (5, 4, 3, 2, 1, 0))


class Runtime:
    """Keyed state and timers of one operator; ``checkpoint()`` is a copy of both."""

    def __init__(self, data: dict[str, dict[str, str]] | None = None, timers: set[tuple] | None = None) -> None:
        self.key: str | None = None
        self.data = data if data is not None else {}
        self.timers = timers if timers is not None else set()  # (domain, key, time)
        self.now = 1_000_000

    def checkpoint(self) -> tuple[dict[str, dict[str, str]], set[tuple]]:
        return copy.deepcopy(self.data), set(self.timers)


class State:
    def __init__(self, runtime: Runtime, name: str) -> None:
        self.runtime, self.name = runtime, name
        runtime.data.setdefault(name, {})

    def value(self) -> str | None:
        return self.runtime.data[self.name].get(self.runtime.key)  # type: ignore[arg-type]

    def update(self, value: str) -> None:
        self.runtime.data[self.name][self.runtime.key] = value  # type: ignore[index]

    def clear(self) -> None:
        self.runtime.data[self.name].pop(self.runtime.key, None)  # type: ignore[arg-type]


class Metric:
    """A metric group and each of its metrics, doing nothing (PyFlink's outside thread mode: no JVM behind it)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self


class Context:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def get_state(self, descriptor: Any) -> State:
        return State(self.runtime, descriptor.get_name())

    def get_metrics_group(self) -> Metric:
        return Metric()


class Keys:
    """``operators.keys.KeySwitch`` as thread mode has it (it can list the keys with state)."""

    can_list_keys = True

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def current(self) -> str | None:
        return self.runtime.key

    def handle(self, key: str) -> str:
        return key

    def switch(self, handle: str) -> None:
        self.runtime.key = handle

    def keys_with(self, name: str) -> list[tuple[str, str]]:
        return [(key, key) for key in list(self.runtime.data.get(name, {}))]


class Timers:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def current_processing_time(self) -> int:
        return self.runtime.now

    def register_processing_time_timer(self, at: int) -> None:
        self.runtime.timers.add(("processing", self.runtime.key, at))

    def register_event_time_timer(self, at: int) -> None:
        self.runtime.timers.add(("event", self.runtime.key, at))

    def delete_event_time_timer(self, at: int) -> None:
        self.runtime.timers.discard(("event", self.runtime.key, at))


class Callback:
    """A callback's context. Its key is the element's or the timer's, whatever key the operator switches the state
    backend to meanwhile, as PyFlink's is (thread mode: ``OnTimerContextImpl.getCurrentKey`` is the timer's)."""

    def __init__(self, runtime: Runtime, domain: TimeDomain | None = None) -> None:
        self.runtime, self.domain = runtime, domain
        self.key = runtime.key

    def timer_service(self) -> Timers:
        return Timers(self.runtime)

    def get_current_key(self) -> str | None:
        return self.key

    def time_domain(self) -> TimeDomain | None:
        return self.domain


class HeldModel(OfflineModel):
    """The offline model, its answers held back until ``release`` (runs stay in flight for a checkpoint)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def chat(self, messages: Any, tools: Any) -> Any:
        self.release.wait(30)
        return super().chat(messages, tools)


def operator(runtime: Runtime, concurrency: int, model: OfflineModel, store: InMemoryStore, monkeypatch: Any) -> Any:
    engine = DiagnosisEngine(store=store, model=model, embedder=HashingEmbedder(), pack=load_pack())
    engine.clock = lambda: runtime.now / 1000  # (the pause of the retries after a store found down)
    monkeypatch.setattr(op_module, "build_engine", lambda settings: engine)
    monkeypatch.setattr(op_module, "KeySwitch", lambda context: Keys(runtime))
    function = op_module.DiagnosisFunction(with_overrides(Settings(), concurrency=concurrency).for_workers(), None)
    function.open(Context(runtime))
    return function


def alerts(vehicles: int, per_vehicle: int) -> list[tuple[str, str, str]]:
    out = []
    for k in range(per_vehicle):
        for v in range(vehicles):
            raw = json.dumps({
                "type": "alert", "event_id": f"e-{v}-{k}", "vin": vin(v), "series": "EV-A",
                "ts": f"2026-11-01T{8 + k:02d}:00:00Z", "alert_text": "CAN communication lost", "dtc_codes": ["U0140"],
            })  # fmt: skip
            event = parse_event(raw)
            out.append((event.vin, event.model_dump_json(), raw))
    return out


def send(function: Any, runtime: Runtime, events: list[tuple[str, str, str]]) -> Iterator[tuple[str, str]]:
    for vin_, event_json, raw in events:
        runtime.key = vin_
        yield from function.process_element(("alert", vin_, event_json, raw), Callback(runtime))


def fire(function: Any, runtime: Runtime, domain: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for timer in sorted((t for t in runtime.timers if t[0] == domain), key=lambda t: t[2]):
        runtime.timers.discard(timer)
        runtime.key = timer[1]
        kind = TimeDomain.EVENT_TIME if domain == "event" else TimeDomain.PROCESSING_TIME
        out += function.on_timer(timer[2], Callback(runtime, kind))
    return out


def diagnosed(outputs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(vin, event_id) of each diagnosis, in output order."""
    return [
        (d["vin"], d["event_id"]) for kind, text in outputs if kind == op_module.DIAGNOSIS for d in [json.loads(text)]
    ]


@pytest.mark.parametrize("can_list_keys", [True, False], ids=["thread-mode", "process-mode"])
def test_events_waiting_in_the_pool_at_a_checkpoint_run_when_resumed_at_concurrency_1(
    can_list_keys: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Resumed at concurrency 1, the first restored tick timer raised "open() was not called before use" (no run
    # pool), at every restart, and the events waiting in pending state never ran.
    monkeypatch.setattr(Keys, "can_list_keys", can_list_keys)
    store, held = InMemoryStore(), HeldModel()
    first_run = Runtime()
    before = operator(first_run, 8, held, store, monkeypatch)
    waiting = alerts(vehicles=6, per_vehicle=2)
    assert diagnosed(list(send(before, first_run, waiting))) == []  # all in flight or queued
    data, timers = first_run.checkpoint()
    assert sum(len(json.loads(p)) for p in data["pending"].values()) == len(waiting)
    held.release.set()
    before.close()

    resumed = Runtime(data, timers)
    resumed.now += 60_000  # the restored tick timer is due
    after = operator(resumed, 1, OfflineModel(), store, monkeypatch)
    out = fire(after, resumed, "processing")
    later = alerts(vehicles=7, per_vehicle=3)[2 * 7 :]  # each vehicle's third alert (a seventh vehicle's first)
    out += list(send(after, resumed, later))
    out += fire(after, resumed, "event")  # the end of input
    done = diagnosed(out)
    expected = {(v, f"e-{i}-{k}") for i in range(6) for k in range(2) for v in [vin(i)]} | {
        (vin(i), f"e-{i}-2") for i in range(7)
    }
    assert sorted(done) == sorted(expected) and len(done) == len(set(done))  # each once
    for i in range(7):  # each vehicle's events in their order, the waiting ones before the later one
        assert [e for v, e in done if v == vin(i)] == [f"e-{i}-{k}" for k in range(3) if i < 6 or k == 2]
    assert resumed.data["pending"] == {}
    after.close()


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_restored_event_this_release_no_longer_reads_is_a_dead_letter_not_a_failed_job(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An event a checkpoint of an earlier release held waiting, by rules since made stricter: re-validated as it
    # ran, it raised out of the run, and the job failed at every restart (found by a diff review).
    store = InMemoryStore()
    [(vin_, good_json, good_raw)] = alerts(vehicles=1, per_vehicle=1)
    stale = json.loads(good_json) | {"event_id": "e-stale", "vin": "not a vin"}
    pending = json.dumps([[json.dumps(stale), "the stale line"], [good_json, good_raw]])
    resumed = Runtime({"pending": {vin_: pending}}, {("event", vin_, 2**63 - 1)})
    function = operator(resumed, concurrency, OfflineModel(), store, monkeypatch)
    out = fire(function, resumed, "event")  # the end of input runs what the vehicle has pending
    [(kind, letter)] = [o for o in out if o[0] == op_module.DEAD_LETTER]
    assert json.loads(letter)["raw"] == "the stale line" and "no longer read as an event" in json.loads(letter)["error"]
    assert diagnosed(out) == [(vin_, "e-0-0")]
    assert resumed.data["pending"] == {}
    function.close()

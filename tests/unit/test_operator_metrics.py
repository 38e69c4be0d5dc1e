"""The operator's levels (runs in flight, queued, summary counts): Java counters the operator thread sets.

A PyFlink gauge would have the reporter call Python from its own thread, which
crashed the JVM (operators/metrics.py); here the metric group is a stand-in
that refuses gauges, and the levels must follow what the operator reads.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators.metrics import DiagnosisMetrics, Level

pytestmark = pytest.mark.unit


class JavaCounter:
    """What PyFlink's CounterImpl does: inc(n) on a Java SimpleCounter (n may be negative)."""

    def __init__(self) -> None:
        self.count = 0
        self.calls = 0

    def inc(self, n: int = 1) -> None:
        self.count += n
        self.calls += 1


class Group:
    def __init__(self) -> None:
        self.counters: dict[str, JavaCounter] = {}

    def add_group(self, name: str, extra: str | None = None) -> Group:
        return self

    def counter(self, name: str) -> JavaCounter:
        return self.counters.setdefault(name, JavaCounter())

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Any:
        return JavaCounter()

    def distribution(self, name: str) -> Any:
        return JavaCounter()

    def gauge(self, name: str, obj: Any) -> None:
        raise AssertionError(f"gauge {name}: the reporter would call Python from its thread")


def test_a_level_moves_its_counter_to_the_value_set_and_calls_java_only_on_a_change() -> None:
    counter = JavaCounter()
    level = Level(counter)
    for value in (3, 3, 7, 0, 0, 2):
        level.set(value)
        assert counter.count == value == level.value
    assert counter.calls == 4


def test_refresh_sets_every_level_from_what_the_operator_reads() -> None:
    group = Group()
    summaries = {"summaries_checked": 0, "summary_fidelity_failed": 0}
    now = {"in_flight": 0, "queued": 0, "waiting": 0, "summaries": summaries}
    metrics = DiagnosisMetrics(
        group,
        in_flight=lambda: now["in_flight"],
        queued=lambda: now["queued"],
        summary_counts=lambda: dict(now["summaries"]),
        waiting=lambda: now["waiting"],
    )
    now.update(in_flight=5, queued=12, waiting=3, summaries={"summaries_checked": 4, "summary_fidelity_failed": 1})
    metrics.refresh()
    counts = {name: c.count for name, c in group.counters.items()}
    assert counts["runs_in_flight"] == 5 and counts["runs_queued"] == 12 and counts["model_calls_waiting"] == 3
    assert counts["summaries_checked"] == 4 and counts["summary_fidelity_failed"] == 1
    now.update(in_flight=0, queued=0, waiting=0)
    metrics.refresh()
    assert group.counters["runs_in_flight"].count == 0 and group.counters["runs_queued"].count == 0
    assert group.counters["model_calls_waiting"].count == 0
    assert group.counters["summaries_checked"].count == 4


def test_refresh_sets_the_process_malloc_trimmer_figures() -> None:
    group = Group()
    figures = {"malloc_trims": 0, "malloc_trim_ms": 0, "malloc_trim_released_mb": 0}
    metrics = DiagnosisMetrics(
        group, in_flight=lambda: 0, queued=lambda: 0, summary_counts=dict, trims=lambda: dict(figures)
    )
    figures.update(malloc_trims=3, malloc_trim_ms=7, malloc_trim_released_mb=41)
    metrics.refresh()
    assert {n: group.counters[n].count for n in figures} == figures

"""The diagnosis job's Flink metrics: plain numbers from the engine, turned into counters, gauges and histograms.

Every metric lives in the operator's ``vdoctor`` group; Flink's Prometheus
reporter names it ``flink_taskmanager_job_task_operator_vdoctor_<name>``
(docker/grafana/dashboards/vdoctor.json charts them; README, "Metrics").

Histograms: PyFlink 2.3's MetricGroup offers counter, gauge, meter and
distribution, no histogram (pyflink/metrics/metricbase.py), and in thread mode a
distribution is a gauge of the last value only (flink-python's
MetricDistribution). So histograms are Flink's own
``DescriptiveStatisticsHistogram``, registered on the Java metric group that
thread mode's MetricGroupImpl wraps; Flink 2.3's Prometheus reporter exports each
as a summary: quantiles 0.5, 0.75, 0.95, 0.98, 0.99, 0.999 and ``_count``.

Levels (runs in flight, queued, the summary counts) are no Python gauges. A
PyFlink gauge is a Python callable that the reporter calls from its own thread
(Prometheus's HTTP handler) while the task thread runs Python in the same
embedded interpreter, and pemja does not survive that: scraping ``/metrics``
four times at once through a replay crashed the JVM in libpython in three runs
out of three (``MetricGauge.getValue`` -> ``PyObject.invokeMethodNoArgs`` in the
crash reports). A level is a Java counter instead, which the operator thread
sets (``refresh``) and the reporter reads without entering Python; Flink's
Prometheus reporter exports counters as gauges, under the same names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from vdoctor.diagnosis import RunStats
from vdoctor.malloc_trim import TRIM_FIGURES, trim_figures

# What Flink's Prometheus reporter puts before the name of every metric of the operator's ``vdoctor`` group.
PROMETHEUS_PREFIX = "flink_taskmanager_job_task_operator_vdoctor_"
# Quantiles over the last 1,000 values (Flink's own histograms keep such a window).
HISTOGRAM_WINDOW = 1000
HISTOGRAM_CLASS = "org.apache.flink.runtime.metrics.DescriptiveStatisticsHistogram"
# Dead letters carry their stage as a label: {stage="parse" | "validate" | "process"}.
STAGE_KEY = "stage"
DEAD_LETTERS = "dead_letters"


class Histogram(Protocol):
    def update(self, value: int) -> None: ...


class _LastValue:
    """Where no Java metric group is at hand (process mode): a distribution, which keeps the last value."""

    def __init__(self, distribution: Any) -> None:
        self._distribution = distribution

    def update(self, value: int) -> None:
        self._distribution.update(value)


def histogram(group: Any, name: str) -> Histogram:
    """A Flink histogram in ``group`` (thread mode), else the closest PyFlink offers."""
    java_group = getattr(group, "_metrics", None)  # pyflink.fn_execution.metrics.embedded.MetricGroupImpl
    if java_group is None:
        return _LastValue(group.distribution(name))
    from pemja import findClass  # the embedded interpreter's bridge to the JVM (thread mode only)

    found: Histogram = java_group.histogram(name, findClass(HISTOGRAM_CLASS)(HISTOGRAM_WINDOW))
    return found


class Level:
    """A value the operator thread sets, kept in a Java counter that reporters read without calling Python."""

    def __init__(self, counter: Any) -> None:
        self._counter = counter
        self._value = 0

    @property
    def value(self) -> int:
        return self._value

    def set(self, value: int) -> None:
        if value != self._value:
            self._counter.inc(value - self._value)
            self._value = value


def dead_letter_counter(group: Any, stage: str) -> Any:
    """The dead-letter counter of one stage, in the ``vdoctor`` group of an operator's metrics."""
    return group.add_group(STAGE_KEY, stage).counter(DEAD_LETTERS)


class RunFigures(Protocol):
    """What one finished run reports (operators.diagnosis.Applied)."""

    llm_calls: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    model_failures: int
    run_latency_ms: float | None
    model_latency_ms: float | None
    dead_letters: int
    duplicates: int
    stats: RunStats
    event: bool  # False: a try of a waiting case's write, no event's run


class DiagnosisMetrics:
    """The diagnosis operator's metrics, registered in open() and fed on the operator thread (``record`` for each
    finished run, ``refresh`` for the levels)."""

    def __init__(
        self,
        operator_group: Any,
        in_flight: Callable[[], int],
        queued: Callable[[], int],
        summary_counts: Callable[[], dict[str, int]],
        trims: Callable[[], dict[str, int]] = trim_figures,
        waiting: Callable[[], int] = lambda: 0,
    ) -> None:
        group = operator_group.add_group("vdoctor")
        counter = group.counter
        self.runs = counter("runs")
        self.runs_per_second = group.meter("runs_per_second", time_span_in_seconds=60)
        self.llm_calls = counter("llm_calls")
        self.tool_calls = counter("tool_calls")
        self.prompt_tokens = counter("prompt_tokens")
        self.completion_tokens = counter("completion_tokens")
        self.model_failures = counter("model_failures")
        self.recalled_own = counter("recalled_own")
        self.recalled_similar = counter("recalled_similar")
        self.l3_writes = counter("l3_writes")
        self.l3_write_failures = counter("l3_write_failures")
        # Cases whose first write failed, written later (by a retry, at the vehicle's next alert or lifecycle event),
        # and lost (their last try, as their session ended, failed too).
        self.l3_late_writes = counter("l3_late_writes")
        self.l3_cases_lost = counter("l3_cases_lost")
        # Vehicles' stored states (a session, dedup ids, pending events, a retry schedule) this release could not
        # read, set aside to the dead letters.
        self.states_set_aside = counter("states_set_aside")
        self.process_dead_letters = dead_letter_counter(group, "process")
        # Events dropped as the same event sent again (same vehicle, id, event time and content mark).
        self.duplicates = counter("duplicates")
        self.run_latency = histogram(group, "run_latency_ms")
        self.model_latency = histogram(group, "model_latency_ms")
        # Recall and writes take about a millisecond on the embedded store: microseconds keep their spread.
        self.recall_latency = histogram(group, "recall_latency_us")
        self.l3_write_latency = histogram(group, "l3_write_latency_us")
        # Embedding what is written, the wait for a model call shared with other runs included.
        self.l3_embed_latency = histogram(group, "l3_embed_latency_us")
        self._in_flight, self._queued, self._summary_counts = in_flight, queued, summary_counts
        self.runs_in_flight = Level(counter("runs_in_flight"))
        self.runs_queued = Level(counter("runs_queued"))
        # Model calls waiting for a slot of the subtask's gate (vdoctor.models.gate): above 0 for long, the
        # endpoint's --concurrency, not the job, is what runs wait for.
        self._waiting = waiting
        self.model_calls_waiting = Level(counter("model_calls_waiting"))
        # Every summary is checked (issue 4): checked, passed first time, repaired, retried, failed.
        self.summaries = {name: Level(counter(name)) for name in summary_counts()}
        # The process's malloc trimmer (vdoctor.malloc_trim): every subtask in one process reports the same totals.
        self._trims = trims
        self.trims = {name: Level(counter(name)) for name in TRIM_FIGURES}

    def refresh(self) -> None:
        """Set the levels to what they are now; on the operator thread only (see the module doc)."""
        self.runs_in_flight.set(self._in_flight())
        self.runs_queued.set(self._queued())
        self.model_calls_waiting.set(self._waiting())
        for name, value in self._summary_counts().items():
            self.summaries[name].set(value)
        for name, value in self._trims().items():
            self.trims[name].set(value)

    def record(self, run: RunFigures) -> None:
        if run.event:
            self.runs.inc()
            self.runs_per_second.mark_event()
        self.llm_calls.inc(run.llm_calls)
        self.tool_calls.inc(run.tool_calls)
        self.prompt_tokens.inc(run.prompt_tokens)
        self.completion_tokens.inc(run.completion_tokens)
        self.model_failures.inc(run.model_failures)
        self.process_dead_letters.inc(run.dead_letters)
        self.duplicates.inc(run.duplicates)
        if run.run_latency_ms is not None:
            self.run_latency.update(round(run.run_latency_ms))
        if run.model_latency_ms is not None:
            self.model_latency.update(round(run.model_latency_ms))
        stats = run.stats
        if stats.recall_ms is not None:
            self.recall_latency.update(round(stats.recall_ms * 1000))
            self.recalled_own.inc(stats.recalled_own)
            self.recalled_similar.inc(stats.recalled_similar)
        self.l3_writes.inc(stats.writes)
        if stats.write_ms is not None:
            self.l3_write_latency.update(round(stats.write_ms * 1000))
        if stats.embed_ms is not None:
            self.l3_embed_latency.update(round(stats.embed_ms * 1000))
        if stats.write_failed:
            self.l3_write_failures.inc()
        if stats.late_write:
            self.l3_late_writes.inc()
        if stats.case_lost:
            self.l3_cases_lost.inc()
        self.states_set_aside.inc(stats.set_aside)

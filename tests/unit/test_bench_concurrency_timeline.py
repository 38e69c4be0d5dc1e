"""bench/concurrency.py's timeline of the model calls in flight: counted from the arrivals the server saw."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.concurrency import TIMELINE_STEP_S, Level, in_flight_timeline, plot_curve, plot_timeline

pytestmark = pytest.mark.unit


def test_a_call_is_in_flight_from_its_arrival_for_one_latency() -> None:
    # Two calls at once, a third 0.5 s later; each answered 1 s after it came in.
    timeline = in_flight_timeline([10.0, 10.0, 10.5], latency_s=1.0, step_s=0.25)
    assert timeline == (2, 2, 3, 3, 1, 1)  # at 0, 0.25 | 0.5, 0.75 | 1.0, 1.25 (the first two answered at 1.0)
    assert in_flight_timeline([], latency_s=1.0) == ()


def test_the_timeline_never_exceeds_the_calls_and_ends_with_the_last_reply() -> None:
    arrivals = [i * 0.01 for i in range(300)]
    timeline = in_flight_timeline(arrivals, latency_s=0.2)
    assert max(timeline) <= len(arrivals) and timeline[-1] >= 1
    assert len(timeline) * TIMELINE_STEP_S == pytest.approx(arrivals[-1] + 0.2, abs=TIMELINE_STEP_S)


def test_plot_timeline_draws_the_levels_that_recorded_one(tmp_path: Path) -> None:
    recorded = Level(4, 1000.0, 40, 1.8, 2.0, 2.0, 25.0, in_flight=(1, 4, 4, 3, 0))
    plot_timeline([recorded, Level(8, 200.0, 10, 1.0, 20.0, 2.0, 5.0)], tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot_timeline([Level(8, 200.0, 10, 1.0, 20.0, 2.0, 5.0)], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_plot_curve_draws_levels_of_one_latency_only(tmp_path: Path) -> None:
    """The curve is runs/s against calls in flight at one model latency; levels of several latencies, or too few
    to make a curve, give no plot (the bars of ``plot`` show them)."""
    one_latency = [
        Level(c, 1000.0, 2 * c, runs, c / 2, 2.0, 10.0, cpu_ms_per_run=6.5, trials=(runs / (c / 2),) * 2)
        for c, runs in ((64, 30.0), (256, 115.0), (1024, 180.0))
    ]
    assert plot_curve(one_latency, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mixed = [Level(64, 200.0, 10, 150.0, 160.0, 2.0, 5.0), *one_latency[1:]]
    assert not plot_curve(mixed, tmp_path / "mixed.png")
    assert not plot_curve(one_latency[:2], tmp_path / "two.png")
    assert not (tmp_path / "mixed.png").exists() and not (tmp_path / "two.png").exists()

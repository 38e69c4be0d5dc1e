"""`vdoctor run`'s summary of a file replay: the lines it read and the rate, as the job reads the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.replay import RunReport, count_lines

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_lines_are_counted_as_the_job_reads_them_whatever_ends_them(end: str, tmp_path: Path) -> None:
    """A file of lines ended by a carriage return alone was counted as one line ("events read 1" beside 5
    diagnoses, and a rate five times too low: an audit); the job's reader ends a line at any of the three."""
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_bytes(end.join(['{"n": 1}', "", "  ", '{"n": 2}', '{"n": "\u00e9"}', ""]).encode("utf-8") + b"\xff")
    assert count_lines(alerts) == 4  # (the blank ones left out; bytes that are no UTF-8 a line of their own)


def test_a_run_without_results_gives_no_rate() -> None:
    """An empty file printed "nan events/s"."""
    line = RunReport(wall_s=4.2).render().splitlines()[-1]
    assert line == "  wall time          4.2 s; no results after the job started"
    timed = RunReport(lines=10, wall_s=5.0, processing_s=2.0).render().splitlines()[-1]
    assert timed == "  wall time          5.0 s; 5 events/s after the job started"

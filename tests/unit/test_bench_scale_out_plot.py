"""bench/scale_out.py's plot of the CPU by part and the machine's cores: drawn from what a run records."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scale_out import Result, plot_parts, window_label

pytestmark = pytest.mark.unit


def _run(tms: int, parts: dict[str, float]) -> Result:
    return Result("thread", tms, 1, tms, 100, 100, 50.0 * tms, 20.0, 0.9 * tms, sum(parts.values()), 1.0, 1, parts,
                  {"JobManager": 0.05, "Kafka broker": 0.1, "this bench": 0.1, "all else": 0.0, "idle": 0.1},
                  window=[0.3, 0.9])  # fmt: skip


def test_plot_parts_writes_a_png_for_runs_with_parts_of_their_own(tmp_path: Path) -> None:
    many = {f"part {i}": float(i) for i in range(8)}  # more parts than are drawn apart: the rest summed
    runs = [_run(1, many), _run(2, {"only one": 3.0})]
    plot_parts(runs, tmp_path / "parts.png", "title")
    assert (tmp_path / "parts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot_parts([], tmp_path / "none.png", "title")
    assert not (tmp_path / "none.png").exists()


def test_window_label_names_the_span() -> None:
    assert window_label([0.0, 1.0]) == "first to last diagnosis"
    assert window_label([0.3, 0.9]) == "diagnoses 30% to 90%"

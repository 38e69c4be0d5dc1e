"""The benches' pressure stall figures: read from the kernel's files, and absent where it keeps none."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.concurrency import Level, _row
from bench.procstat import stalled_s

pytestmark = pytest.mark.unit

# The format of /proc/pressure/cpu and io (Linux 4.20 and later): "full" is absent from cpu before 5.13.
PRESSURE = (
    "some avg10=17.84 avg60=9.79 avg300=12.32 total=10256644667\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


def test_stalled_seconds_are_the_some_line_total(tmp_path: Path) -> None:
    (tmp_path / "cpu").write_text(PRESSURE)
    assert stalled_s("cpu", tmp_path) == pytest.approx(10256.644667)


def test_no_figure_where_the_kernel_keeps_none(tmp_path: Path) -> None:
    assert stalled_s("cpu", tmp_path) is None  # no file: a kernel without PSI, or another OS
    (tmp_path / "io").write_text("garbage\n")
    assert stalled_s("io", tmp_path) is None


def test_the_table_row_gives_the_shares_in_percent_or_a_dash() -> None:
    measured = Level(64, 200.0, 1920, 140.0, 160.0, 2.0, 14.0, stall_cpu=0.125, stall_io=0.004)
    assert _row(measured).split()[-1] == "12/0"
    assert _row(Level(64, 200.0, 1920, 140.0, 160.0, 2.0, 14.0)).split()[-1] == "-/-"

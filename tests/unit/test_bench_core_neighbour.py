"""bench/core_neighbour.py's flags: a neighbour as KIB:MS, refused otherwise."""

from __future__ import annotations

import argparse

import pytest

from bench.core_neighbour import label, parse_neighbour

pytestmark = pytest.mark.unit


def test_a_neighbour_is_its_buffer_in_kib_and_its_period_in_ms() -> None:
    assert parse_neighbour("4096:1") == (4096, 1000)
    assert parse_neighbour("1024:0.5") == (1024, 500)
    assert label((4096, 1000)) == "4 MB every 1 ms" and label(None) == "alone"
    for bad in ("4096", "4MB:1", "4096:x"):
        with pytest.raises(argparse.ArgumentTypeError, match="KIB:MS"):
            parse_neighbour(bad)

"""bench/engine_cpu.py's query-cache split: what a fleet's queries cost when its vehicles are split over processes."""

from __future__ import annotations

import zlib

import pytest

from bench.engine_cpu import split_misses

pytestmark = pytest.mark.unit


def test_split_misses_counts_each_parts_distinct_texts() -> None:
    # Two vehicles in different parts of two (by crc32, as the function splits them) both asking "brake" once
    # and one of them "abs" twice: one process embeds 2 texts, two processes 3 ("brake" in each).
    vins = [f"VIN{i:014d}" for i in range(20)]
    a = vins[0]
    b = next(v for v in vins if zlib.crc32(v.encode()) % 2 != zlib.crc32(a.encode()) % 2)
    queries = [(a, "brake"), (b, "brake"), (a, "abs"), (a, "abs")]
    assert split_misses(queries, 1) == 2
    assert split_misses(queries, 2) == 3
    assert split_misses([], 2) == 0

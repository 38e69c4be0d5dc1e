"""bench/engine_cpu.py's query-cache split: what a fleet's queries cost when its vehicles are split over processes."""

from __future__ import annotations

import argparse
import json
import zlib

import pytest

from bench.engine_cpu import in_part, parse_part, split_misses

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


def test_in_part_splits_a_fleet_by_vin_and_keeps_every_line_once() -> None:
    vins = [f"VIN{i:014d}" for i in range(40)]
    lines = [json.dumps({"vin": v, "n": i}) for i, v in enumerate(vins)] + ["{not json", json.dumps({"x": 1})]
    parts = [in_part(lines, k, 3) for k in range(3)]
    assert sorted(line for part in parts for line in part) == sorted(lines)
    assert all(part for part in parts)
    for k, part in enumerate(parts):  # a vehicle's lines all in one part, the one its crc32 names
        assert all(zlib.crc32(json.loads(x)["vin"].encode()) % 3 == k for x in part if x.startswith('{"vin"'))
    assert "{not json" in parts[0] and in_part(lines, 0, 1) == lines


def test_parse_part_reads_k_of_n() -> None:
    assert parse_part("1/2") == (1, 2)
    for bad in ("2/2", "x/2", "1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_part(bad)

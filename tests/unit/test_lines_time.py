"""The time formats of typed lines: isoformat from year 1000 on writes what strftime writes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from vdoctor.lines import ISO_TIME, SUMMARY_TIME, day, iso, summary_time

pytestmark = pytest.mark.unit


def _times() -> list[datetime]:
    rng = random.Random(11)
    zones = [None, UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]
    years = [1, 9, 999, 1000, 1999, 2026, 9999]
    out = []
    for _ in range(400):
        ts = datetime(
            rng.choice(years + [rng.randrange(1, 10_000)]),
            rng.randrange(1, 13),
            rng.randrange(1, 29),
            rng.randrange(24),
            rng.randrange(60),
            rng.randrange(60),
            rng.choice([0, rng.randrange(1_000_000)]),
            tzinfo=rng.choice(zones),
        )
        out.append(ts)
    return out


def test_day_writes_what_strftime_writes() -> None:
    for ts in _times():
        assert day(ts) == f"{ts:%Y-%m-%d}"


def test_iso_and_summary_time_write_what_strftime_writes() -> None:
    for ts in _times():
        assert iso(ts) == ts.strftime(ISO_TIME)
        assert summary_time(ts) == ts.strftime(SUMMARY_TIME)

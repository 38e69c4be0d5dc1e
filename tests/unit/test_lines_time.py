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


class _Shifted(datetime):
    """A datetime subclass that writes itself otherwise: its text must not come from a plain datetime's."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return "shifted " + super().isoformat(sep, timespec)


def test_the_kept_texts_of_utc_times_never_answer_for_another_zone_or_class() -> None:
    # The same instant in UTC, in other zones and as a subclass: equal datetimes (an aware time equals the
    # same instant in any zone) with different texts. Each asked after the UTC one's text is kept.
    rng = random.Random(12)
    zones = [timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]
    for ts in _times():
        utc = ts.replace(tzinfo=UTC)
        for _ in range(2):  # the second time from the kept texts
            assert iso(utc) == utc.strftime(ISO_TIME)
            assert summary_time(utc) == utc.strftime(SUMMARY_TIME)
        if utc.year < 2 or utc.year > 9998:
            continue  # no room to shift the instant into another zone
        other = utc.astimezone(rng.choice(zones))
        assert other == utc
        assert iso(other) == other.strftime(ISO_TIME)
        assert summary_time(other) == other.strftime(SUMMARY_TIME)
        sub = _Shifted.fromisoformat(utc.isoformat())
        assert sub == utc
        assert iso(sub) == (sub.isoformat()[:19] + "Z" if sub.year >= 1000 else sub.strftime(ISO_TIME))

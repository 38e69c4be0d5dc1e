"""The event parser's fast paths against the plain forms they replace: the same events, the same errors."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import AwareDatetime, BaseModel, ValidationError, field_validator

from vdoctor.errors import EventError
from vdoctor.events import MAX_TS, MIN_TS, AlertEvent, describe_validation_error, parse_event

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


class _PlainTs(BaseModel):
    """``ts`` as the events read it before the fast path: pydantic's parse, then to UTC at whole seconds."""

    ts: AwareDatetime

    @field_validator("ts", mode="before")
    @classmethod
    def _iso_string(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, str | datetime | int | float):
            raise ValueError(f"must be an ISO-8601 string with a timezone, got {type(value).__name__}")
        return value

    @field_validator("ts")
    @classmethod
    def _second_precision(cls, value: datetime) -> datetime:
        try:
            value = value.astimezone(UTC).replace(microsecond=0)
        except OverflowError:
            raise ValueError(f"{value.isoformat()} is out of range") from None
        if not MIN_TS <= value < MAX_TS:
            shown = value.isoformat().replace("+00:00", "Z")
            raise ValueError(f"{shown} is not between 2000 and 2199 (is the vehicle's clock set?)")
        return value


def _plain_ts(ts: object, json_mode: bool) -> tuple[str, object]:
    try:
        if json_mode:
            value = _PlainTs.model_validate_json(json.dumps({"ts": ts}))
        else:
            value = _PlainTs.model_validate({"ts": ts})
    except ValidationError as e:
        return "error", describe_validation_error(e)
    return "ok", (value.ts, value.ts.tzinfo is UTC)


def _fast_ts(ts: object, json_mode: bool) -> tuple[str, object]:
    data = {"type": "alert", "event_id": "e-1", "vin": VIN, "series": "EV-A", "ts": ts}
    try:
        if json_mode:
            event = AlertEvent.model_validate_json(json.dumps(data))
        else:
            event = AlertEvent.model_validate(data)
    except ValidationError as e:
        return "error", describe_validation_error(e)
    return "ok", (event.ts, event.ts.tzinfo is UTC)


def _timestamps() -> list[object]:
    rng = random.Random(11)
    out: list[object] = [
        "2026-11-01T08:15:30Z",
        "2026-11-01T08:15:30.7Z",
        "2026-11-01T16:15:30+08:00",
        "2026-11-30T20:00:00-05:00",
        "2026-11-01T08:15:30",
        "2026-13-01T08:15:30Z",
        "2026-02-29T08:15:30Z",
        "2028-02-29T08:15:30Z",
        "2026-11-01T24:00:00Z",
        "2026-11-01T23:59:60Z",
        "2026-11-01T08:61:30Z",
        "0000-01-01T00:00:00Z",
        "0001-01-01T00:00:00Z",
        "0999-12-31T23:59:59Z",
        "9999-12-31T23:59:59Z",
        "2026-11-01t08:15:30z",
        "2026-11-01 08:15:30Z",
        " 2026-11-01T08:15:30Z",
        "2026-11-01T08:15:30Z ",
        "2026-11-01T08:15:30+00:00",
        "2026-11-01T08:15:30Z\n",
        "２０２６-11-01T08:15:30Z",  # full-width digits
        "1999-12-31T23:59:59Z",
        "2000-01-01T00:00:00Z",
        "2199-12-31T23:59:59Z",
        "2200-01-01T00:00:00Z",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "yesterday",
        "",
        1700000000,
        1700000000123,
        1700000000.5,
        "1700000000",
        None,
        True,
    ]
    for _ in range(300):
        year, month, day = rng.randint(0, 9999), rng.randint(0, 13), rng.randint(0, 32)
        hour, minute, second = rng.randint(0, 25), rng.randint(0, 61), rng.randint(0, 61)
        out.append(f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z")
    return out


@pytest.mark.parametrize("json_mode", [False, True], ids=["python", "json"])
def test_ts_reads_as_the_plain_parse_and_conversion(json_mode: bool) -> None:
    for ts in _timestamps():
        assert _fast_ts(ts, json_mode) == _plain_ts(ts, json_mode), ts


def test_an_aware_datetime_is_kept_or_converted_as_before() -> None:
    for ts in (
        datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC),
        datetime(2026, 11, 1, 8, 15, 30, 700, tzinfo=UTC),
        datetime.fromisoformat("2026-11-01T16:15:30+08:00"),
        datetime(2026, 11, 1, 8, 15, 30),
    ):
        assert _fast_ts(ts, json_mode=False) == _plain_ts(ts, json_mode=False), ts


def _plain_parse_error(raw: Any) -> str | None:
    try:
        json.loads(raw)  # (NaN and Infinity are read: a reading's is no reading, any other refused at validate)
    except (ValueError, RecursionError) as e:
        return f"not valid JSON: {e}"
    return None


def test_a_line_that_starts_with_a_byte_order_mark_is_read_past_it() -> None:
    # Windows tools start a UTF-8 file with one: the file's first event was a dead letter ("Unexpected UTF-8 BOM").
    good = json.dumps(
        {"type": "lifecycle", "event_id": "l-9", "vin": VIN, "ts": "2026-12-01T00:00:00Z", "change": "scrapped"}
    )
    for raw in ("\ufeff" + good, "\ufeff".encode() + good.encode()):
        assert parse_event(raw) == parse_event(good)
    with pytest.raises(EventError, match="^not valid JSON"):
        parse_event("\ufeff\ufeff" + good)  # one mark, at the start of a file; two is no JSON


def test_bad_json_is_refused_with_the_same_message_as_json_loads() -> None:
    good = json.dumps({"type": "lifecycle", "event_id": "l-9", "vin": VIN, "ts": "2026-12-01T00:00:00Z"})
    for raw in (
        "",
        " ",
        "{",
        "{}x",
        '{"a": NaN}',
        '{"a": -Infinity}',
        good + "\n",
        "\n" + good,
        "[" * 100_000,
        good.encode(),
    ):
        expected = _plain_parse_error(raw)
        try:
            parse_event(raw)
        except EventError as e:
            if expected is not None:
                assert (e.stage, str(e)) == ("parse", expected), raw[:40]
            continue
        assert expected is None, raw[:40]

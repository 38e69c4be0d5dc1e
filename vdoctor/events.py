"""Input events: a tagged union on ``type`` (DESIGN.md §3.1), and their parser.

Parsing is split in two stages so that a dead letter says what went wrong:
``parse`` when the line is not a JSON object, ``validate`` when it is JSON but
breaks the contract. A validation error names the field and the problem.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from vdoctor.errors import EventError
from vdoctor.units import SIGNAL_NAME_RE

# ISO 3779: 17 characters, digits and capital letters except I, O and Q
# (they are too easily confused with 1 and 0).
VIN_RE = re.compile(r"^[A-HJ-NPR-Z0-9]{17}$")
# OBD-II / SAE J2012 trouble codes: system letter and four hex digits.
DTC_RE = re.compile(r"^[PCBU][0-9A-F]{4}$")
# A signal is any snake_case name with a finite number; its unit, where the
# name's suffix declares a known one, comes from vdoctor.units. No reading is
# rejected for its unit.
# Bounds on free text and collections: an alert is a short message from a
# vehicle, and an unbounded one would blow the model's context and the state.
MAX_TEXT_CHARS = 4000
MAX_DTC_CODES = 32
MAX_SIGNALS = 64
MAX_ID_CHARS = 128
# Beyond this magnitude a float no longer holds every integer exactly (2**53 is
# about 9e15), and no vehicle reading (an odometer in metres, an energy counter
# in Wh, even a timestamp in ms) comes near it: such a value is garbage.
MAX_SIGNAL_ABS = 1e15


def session_id_for(vin: str, opened_at: datetime) -> str:
    """The deterministic session id: ``<vin>-<UTC ts of the opening alert as YYYYMMDDTHHMMSS>``."""
    at = opened_at.astimezone(UTC)
    if at.year < 1000:
        # strftime (glibc) leaves such a year unpadded; isoformat would pad it.
        return f"{vin}-{at:%Y%m%dT%H%M%S}"
    # The same digits cut from isoformat's YYYY-MM-DDTHH:MM:SS, several times faster than strftime.
    t = at.isoformat()
    return f"{vin}-{t[:4]}{t[5:7]}{t[8:10]}T{t[11:13]}{t[14:16]}{t[17:19]}"


def _to_utc_second(value: datetime) -> datetime:
    if value.tzinfo is UTC and not value.microsecond:
        return value  # already what the rest would make of it (see ``_iso_string``)
    return value.astimezone(UTC).replace(microsecond=0)


# The form events are written in, UTC to the second (``2026-11-01T08:15:30Z``): such a
# string is read by ``datetime.fromisoformat``, several times faster than a parse
# followed by ``_to_utc_second``'s conversion, to the same value. Other forms, and a
# string of this form that is not a date (month 13), take pydantic's parse and errors.
_UTC_SECOND_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, str_strip_whitespace=True)

    event_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    vin: str
    ts: AwareDatetime

    @field_validator("vin")
    @classmethod
    def _check_vin(cls, value: str) -> str:
        if not VIN_RE.match(value):
            raise ValueError(
                f"must be 17 characters of digits and capital letters except I, O, Q (ISO 3779), got {value[:40]!r}"
            )
        return value

    @field_validator("ts", mode="before")
    @classmethod
    def _iso_string(cls, value: object) -> object:
        # The contract is an ISO-8601 string; epoch numbers are ambiguous (s or ms?).
        if not isinstance(value, str | datetime):
            raise ValueError(f"must be an ISO-8601 string with a timezone, got {type(value).__name__}")
        if isinstance(value, str) and _UTC_SECOND_RE.fullmatch(value):
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                pass
        return value

    @field_validator("ts")
    @classmethod
    def _second_precision(cls, value: datetime) -> datetime:
        return _to_utc_second(value)


class AlertEvent(_Event):
    """An alert from a vehicle: free text, trouble codes and signal readings."""

    type: Literal["alert"]
    series: Annotated[str, Field(min_length=1, max_length=64)]
    alert_text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""
    dtc_codes: Annotated[list[str], Field(max_length=MAX_DTC_CODES)] = []
    signals: Annotated[
        dict[str, Annotated[float, Field(strict=True, allow_inf_nan=False)]],
        Field(max_length=MAX_SIGNALS),
    ] = {}

    @field_validator("dtc_codes")
    @classmethod
    def _check_codes(cls, codes: list[str]) -> list[str]:
        out: list[str] = []
        for code in codes:
            norm = code.strip().upper()
            if not DTC_RE.match(norm):
                raise ValueError(f"{code[:20]!r} is not a trouble code like P0A7F")
            if norm not in out:
                out.append(norm)
        return out

    @field_validator("signals")
    @classmethod
    def _check_signals(cls, signals: dict[str, float]) -> dict[str, float]:
        for name, value in signals.items():
            if not SIGNAL_NAME_RE.match(name):
                raise ValueError(
                    f"signal name {name[:40]!r} must be snake_case (lower-case letters, digits and _, "
                    "starting with a letter, at most 64 characters)"
                )
            if abs(value) > MAX_SIGNAL_ABS:
                raise ValueError(f"signal {name} = {value!r} is out of range")
        return signals


class RecheckEvent(_Event):
    """The result of a recheck after a repair, naming the session it verifies."""

    type: Literal["recheck"]
    session_id: Annotated[str, Field(min_length=18, max_length=MAX_ID_CHARS)]
    recheck_ok: bool
    note: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""


class LifecycleEvent(_Event):
    """A vehicle leaves the fleet's care: its long-term memory is soft-deleted."""

    type: Literal["lifecycle"]
    change: Literal["scrapped", "transferred"]


Event = AlertEvent | RecheckEvent | LifecycleEvent
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Annotated[Event, Field(discriminator="type")])
_MODELS: dict[str, type[AlertEvent] | type[RecheckEvent] | type[LifecycleEvent]] = {
    "alert": AlertEvent,
    "recheck": RecheckEvent,
    "lifecycle": LifecycleEvent,
}


def _reject_constant(name: str) -> float:
    # json.loads accepts NaN and Infinity, which are not JSON and not readings.
    raise ValueError(f"{name} is not a valid JSON number")


# ``json.loads(raw, parse_constant=_reject_constant)`` without building a decoder per line.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _load_json(raw: str) -> Any:
    """``json.loads(raw, parse_constant=_reject_constant)``, with its errors."""
    if isinstance(raw, str) and not raw.startswith("\ufeff"):  # json.loads refuses a BOM, the decoder does not
        return _DECODER.decode(raw)
    return json.loads(raw, parse_constant=_reject_constant)


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem: ``field: what is wrong``."""
    parts = []
    for item in error.errors(include_url=False):
        loc = ".".join(str(p) for p in item["loc"]) or "event"
        msg = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def parse_event(raw: str) -> Event:
    """Parse one JSON line into an event, or raise ``EventError`` with its stage."""
    try:
        data: Any = _load_json(raw)
    except (ValueError, RecursionError) as e:
        raise EventError("parse", f"not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise EventError("parse", f"expected a JSON object, got {type(data).__name__}")
    model = _MODELS.get(str(data.get("type")))
    if model is None:
        raise EventError("validate", f"type: must be one of {', '.join(_MODELS)}, got {str(data.get('type'))[:40]!r}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise EventError("validate", describe_validation_error(e)) from e


def is_finite_number(value: object) -> bool:
    """True for int/float values that are finite (bool excluded)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

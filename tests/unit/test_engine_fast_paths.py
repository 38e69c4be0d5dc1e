"""The engine's per-alert fast paths against the plain forms they replace, on many inputs."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from vdoctor.diagnosis import TIMELINE_SIGNALS, DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import parse_event, session_id_for
from vdoctor.knowledge import load_pack
from vdoctor.lines import alert_event
from vdoctor.memory.session import DedupState
from vdoctor.models.offline import OfflineModel
from vdoctor.records import MemoryRecord
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


def _datetimes(rng: random.Random, n: int) -> list[datetime]:
    out = []
    for year in (1, 999, 1000, 1969, 2026, 9998):
        for _ in range(n):
            tz: timezone | None = rng.choice([UTC, UTC, timezone(timedelta(minutes=rng.randint(-900, 900))), None])
            at = datetime(
                year,
                rng.randint(1, 12),
                rng.randint(1, 28),
                rng.randint(0, 23),
                rng.randint(0, 59),
                rng.randint(0, 59),
                rng.choice([0, 0, rng.randint(0, 999_999)]),
                tzinfo=tz,
                fold=rng.randint(0, 1),
            )
            out.append(at)
    return out


def test_session_id_is_what_strftime_writes() -> None:
    for at in _datetimes(random.Random(3), 400):
        try:
            expected = f"{VIN}-{at.astimezone(UTC):%Y%m%dT%H%M%S}"
        except OverflowError:  # year 1 at a positive offset: no UTC time for it
            continue
        assert session_id_for(VIN, at) == expected, at


def _plain_second(value: datetime) -> datetime:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0)


def test_record_times_are_utc_at_whole_seconds_as_the_plain_conversion_makes_them() -> None:
    base: dict[str, Any] = dict(
        vin="V", session_id="s", series="S", summary="x", summary_vec=[1.0],
        root_cause="c", fix_action="f", priority="P1", prompt_version="p",
    )  # fmt: skip
    for at in _datetimes(random.Random(5), 300):
        try:
            expected = _plain_second(at)
        except OverflowError:
            continue
        record = MemoryRecord(**base, concluded_at=at, updated_at=at, opened_ts=at)
        for got in (record.concluded_at, record.updated_at, record.opened_ts):
            assert got == expected and got is not None, at
            assert (got.tzinfo, got.fold, got.microsecond) == (UTC, expected.fold, 0), at


def test_the_timeline_event_is_alert_event_with_at_most_its_signals() -> None:
    """The timeline reuses the round's event line when the alert has no more signals than it shows."""
    rng = random.Random(9)
    names = ["cell_voltage_diff_mv", "pack_temp_c", "soc_pct", "odometer_km", "battery_voltage_v", "x1"]
    for _ in range(300):
        codes = rng.sample(["P0A7F", "P0AA6", "B1318"], rng.randint(0, 3))
        signals = {name: rng.choice([187.0, 41.5, 1e-7, 12.0]) for name in rng.sample(names, rng.randint(0, 6))}
        if len(signals) <= TIMELINE_SIGNALS:
            assert alert_event(codes, signals) == alert_event(codes, signals, TIMELINE_SIGNALS)


def _alert(event_id: str, at: datetime, signals: dict[str, float]) -> str:
    return json.dumps(
        {
            "type": "alert",
            "event_id": event_id,
            "vin": VIN,
            "series": "EV-A",
            "ts": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "alert_text": "电池包单体压差过大",
            "dtc_codes": ["P0A7F"],
            "signals": signals,
        },
        ensure_ascii=False,
    )


def test_the_timeline_names_three_signals_and_the_round_all_of_them() -> None:
    engine = DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    signals = {"cell_voltage_diff_mv": 187.0, "pack_temp_c": 41.5, "soc_pct": 30.0, "odometer_km": 5.0}
    raw = _alert("e-1", datetime(2026, 11, 1, 8, 0, tzinfo=UTC), signals)
    result = engine.on_event(None, DedupState(), parse_event(raw), raw)
    assert result.session is not None
    assert result.session.timeline[0].event == "alert P0A7F cell_voltage_diff_mv=187 pack_temp_c=41.5 soc_pct=30"
    rounds = result.session.working.rounds
    events = [r.event for r in rounds] + [line for line in result.session.working.summary_lines]
    assert any("odometer_km=5" in e for e in events), events

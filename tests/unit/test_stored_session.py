"""A stored session handed to the engine unread gives what the session parsed from the same JSON gives.

The job hands the engine each vehicle's session as its state stores it
(``StoredSession``); the engine parses it only for an alert that continues it.
Compared here with the plain form (the session parsed from its JSON before
every event) on random event sequences: every session and dedup state
written, every diagnosis and dead letter, byte for byte.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import parse_event
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import _HEAD_RE, DedupState, SessionState, StoredSession, UnreadableState
from vdoctor.models.offline import OfflineModel
from vdoctor.records import Phase
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
VINS = [f"LSVAU2180N21000{i:02d}" for i in range(6)]
# Codes and the signals their rules read (a reading past the threshold concludes at once).
CODES = {
    "P0A7F": ("cell_voltage_diff_mv", 40, 220),
    "P0AA6": ("insulation_kohm", 50, 900),
    "P0C73": ("inverter_temp_c", 60, 110),
    "P0300": ("misfire_count", 0, 40),
}


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Alerts (some replayed, some after a pause past the session's 48 h), rechecks and lifecycle events."""
    out: list[dict[str, Any]] = []
    now = {vin: T0 + timedelta(minutes=rng.randint(0, 600)) for vin in VINS}
    for i in range(n):
        vin = rng.choice(VINS)
        now[vin] += timedelta(minutes=rng.choice([1, 5, 30, 120, 600, 47 * 60, 49 * 60, 80 * 60]))
        at = now[vin]
        roll = rng.random()
        if out and roll < 0.08:
            out.append(rng.choice(out))  # a replay: a duplicate event id
            continue
        event: dict[str, Any]
        if roll < 0.70:
            if rng.random() < 0.1:  # an alert delivered late (buffered offline): before the vehicle's last event
                at -= timedelta(hours=rng.choice([1, 30, 100]))
            codes = rng.sample(sorted(CODES), rng.choice([0, 1, 1, 2]))
            signals = {CODES[c][0]: float(rng.randint(CODES[c][1], CODES[c][2])) for c in codes}
            if rng.random() < 0.3:
                signals["soc_pct"] = float(rng.randint(5, 95))
            event = {
                "type": "alert",
                "series": "EV-A",
                "alert_text": rng.choice(["电池包单体压差过大", "Isolation fault"]),
            }
            event |= {"dtc_codes": codes, "signals": signals}
        elif roll < 0.93:
            # A recheck of one of the vehicle's sessions so far (or of none: a dead letter).
            opened = [e for e in out if e["vin"] == vin and e["type"] == "alert"]
            start = (
                rng.choice(opened)["ts"].replace("-", "").replace(":", "").rstrip("Z") if opened else "20200101T000000"
            )
            event = {"type": "recheck", "session_id": f"{vin}-{start}", "recheck_ok": rng.random() < 0.7, "note": "ok"}
        else:
            event = {"type": "lifecycle", "change": "scrapped"}
        out.append({"event_id": f"e-{i}", "vin": vin, "ts": _iso(at), **event})
    return out


def _run(events: list[dict[str, Any]], stored: bool) -> list[str]:
    """Every state written and everything emitted, one line per item, in order."""
    engine = DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    state: dict[str, tuple[str | None, str | None]] = {}
    out: list[str] = []
    for payload in events:
        raw = json.dumps(payload, ensure_ascii=False)
        event = parse_event(raw)
        session_json, dedup_json = state.get(event.vin, (None, None))
        session: SessionState | StoredSession | None = None
        if session_json is not None:
            session = StoredSession(session_json) if stored else SessionState.model_validate_json(session_json)
        dedup = DedupState.model_validate_json(dedup_json) if dedup_json else DedupState()
        result = engine.on_event(session, dedup, event, raw)
        state[event.vin] = (
            result.session.model_dump_json() if result.session is not None else None,
            result.dedup.model_dump_json(),
        )
        out += [f"session {state[event.vin][0]}", f"dedup {state[event.vin][1]}"]
        out += [d.model_dump_json(exclude={"latency_ms", "model_latency_ms"}) for d in result.diagnoses]
        out += [x.model_dump_json() for x in result.dead_letters]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_engine_on_stored_sessions_writes_and_emits_what_it_does_on_parsed_ones(seed: int) -> None:
    events = _events(random.Random(seed), 240)
    plain = _run(events, stored=False)
    assert _run(events, stored=True) == plain
    # The sequences reach every case: sessions continued, concluded and expired, rechecks, replays, ends.
    kinds = {e["type"] for e in events}
    assert kinds == {"alert", "recheck", "lifecycle"}
    assert sum('"phase":"CONCLUDED"' in line for line in plain) > 10
    assert any("left the fleet's care" in line for line in plain)


def test_a_stored_session_is_parsed_only_for_an_alert_that_continues_it(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []
    load = StoredSession.load
    monkeypatch.setattr(StoredSession, "load", lambda self: loads.append(self.json) or load(self))
    engine = DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    vin = VINS[0]

    def send(payload: dict[str, Any], session: SessionState | StoredSession | None) -> Any:
        return engine.on_event(session, DedupState(), parse_event(json.dumps({"vin": vin, **payload})), "raw")

    first = send({"type": "alert", "event_id": "a", "ts": _iso(T0), "series": "EV-A", "dtc_codes": []}, None)
    assert isinstance(first.session, SessionState) and first.session.phase is Phase.INVESTIGATING
    text = first.session.model_dump_json()
    later = {"type": "alert", "event_id": "b", "series": "EV-A", "dtc_codes": []}
    # A recheck, a lifecycle event, an alert after the session expired: the session is not read.
    recheck = {"type": "recheck", "event_id": "r", "ts": _iso(T0), "session_id": f"{vin}-x", "recheck_ok": True}
    given = StoredSession(text)
    assert send(recheck, given).session is given  # handed back as it is: stored again as the same text
    ended = send({"type": "lifecycle", "event_id": "l", "ts": _iso(T0), "change": "scrapped"}, given).session
    assert isinstance(ended, SessionState) and ended.phase is Phase.CONCLUDED and ended.left_care_at == T0
    expired = send({**later, "ts": _iso(T0 + timedelta(hours=49))}, given).session
    assert isinstance(expired, SessionState) and expired.alerts == 1 and expired.session_id != first.session.session_id
    assert loads == []
    # An alert within its 48 h continues it: read once.
    result = send({**later, "ts": _iso(T0 + timedelta(hours=47))}, StoredSession(text))
    assert loads == [text]
    assert isinstance(result.session, SessionState) and result.session.alerts == 2


def _session_texts(rng: random.Random, n: int) -> list[str]:
    """Session JSON as the state holds it, and as other writers might: odd strings, zones, fractions, key orders."""
    chars = ['"', "\\", "/", "a", "Z", "é", "→", "\n", ",", ":", "{", " "]
    out = []
    for _ in range(n):
        opened = T0 + timedelta(seconds=rng.randint(-(10**9), 10**9))
        last = opened + timedelta(seconds=rng.randint(0, 10**6), microseconds=rng.choice([0, 0, 0, 5]))
        zone = rng.choice([UTC, UTC, UTC, timezone(timedelta(hours=rng.randint(-12, 12)))])
        session = SessionState(
            vin=rng.choice(["V", "".join(rng.choices(chars, k=rng.randint(0, 12)))]),
            series="".join(rng.choices(chars, k=rng.randint(0, 4))),
            session_id=rng.choice(["V-1", "".join(rng.choices(chars, k=8))]),
            opened_at=opened.astimezone(zone),
            last_event_at=last.astimezone(zone),
            phase=rng.choice(list(Phase)),
            alerts=rng.choice([0, 1, 1, 2, 7]),
            left_care_at=rng.choice([None, None, last.replace(microsecond=0), opened.astimezone(zone)]),
        )
        text = session.model_dump_json()
        edit = rng.random()
        if edit < 0.1:  # written without the phase: the default
            text = text.replace(f'"phase":"{session.phase.value}",', "")
        elif edit < 0.15:  # written by a release before left_care_at
            text = text.replace(',"left_care_at":null}', "}")
        elif edit < 0.2:  # the same fields in another order
            data = json.loads(text)
            text = json.dumps(dict(reversed(list(data.items()))), ensure_ascii=rng.random() < 0.5)
        elif edit < 0.25:  # spaces between the tokens
            text = json.dumps(json.loads(text), ensure_ascii=False)
        out.append(text)
    return out


def test_a_stored_session_accepts_an_alert_when_the_parsed_session_does() -> None:
    rng = random.Random(4)
    texts = _session_texts(rng, 1500)
    assert sum(_HEAD_RE.match(t) is not None for t in texts) > 500  # both paths, many times
    for text in texts:
        parsed = SessionState.model_validate_json(text)
        stored = StoredSession(text)
        for _ in range(6):
            delta = rng.choice([-1, 0, 1, 3600, 48 * 3600, 48 * 3600 + 1])
            now = parsed.last_event_at + timedelta(seconds=delta, microseconds=rng.choice([0, -1, 1]))
            if rng.random() < 0.3:  # a late alert, near 48 h before the session's opening
                now = parsed.opened_at - timedelta(seconds=48 * 3600 + rng.choice([-1, 0, 1]))
            assert stored.accepts_alert_at(now) is parsed.accepts_alert_at(now), text
        assert StoredSession(text).left_care_at == parsed.left_care_at, text
        assert stored.model_dump_json() == text
        assert stored.load() == parsed


def test_a_stored_session_with_no_such_date_fails_as_its_parse_does() -> None:
    text = SessionState(vin="V", series="S", session_id="V-1", opened_at=T0, last_event_at=T0).model_dump_json()
    bad = text.replace(f'"last_event_at":"{_iso(T0)}"', '"last_event_at":"2026-02-30T10:00:00Z"')
    assert _HEAD_RE.match(bad) is not None
    with pytest.raises(ValidationError):
        SessionState.model_validate_json(bad)
    with pytest.raises(UnreadableState) as raised:  # (the engine sets such a session aside)
        StoredSession(bad).accepts_alert_at(T0)
    assert isinstance(raised.value.error, ValidationError) and raised.value.text == bad

"""The diagnosis operator's replay order: which events wait, which block, on event JSON and session carries."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from vdoctor.memory.session import DedupState, SessionState
from vdoctor.replay_order import ReplayOrder, facts

pytestmark = pytest.mark.unit


def event(kind: str, vin: str, ts: str, **extra: object) -> tuple[str, str]:
    body = json.dumps({"type": kind, "vin": vin, "ts": ts, "event_id": f"{vin}-{ts}", **extra})
    return body, body


def session(vin: str, last: str) -> SessionState:
    at = datetime.fromisoformat(last)
    return SessionState(vin=vin, series="EV-A", session_id=f"{vin}-s", opened_at=at, last_event_at=at)


def test_an_alert_waits_when_it_opens_a_session_and_only_then() -> None:
    order = ReplayOrder(store_was_empty=True)
    alert = event("alert", "V1", "2026-11-01T10:00:00+00:00")
    assert order.may_wait(alert)
    assert order.waits((None, DedupState()), alert)  # no session: opens one
    assert not order.waits((session("V1", "2026-11-01T09:00:00+00:00"), DedupState()), alert)  # joins it
    assert order.waits((session("V1", "2026-10-25T09:00:00+00:00"), DedupState()), alert)  # expired: opens anew
    recheck = event("recheck", "V1", "2026-11-01T11:00:00+00:00", session_id="V1-s", recheck_ok=True)
    assert not order.may_wait(recheck) and not order.waits((None, DedupState()), recheck)


def test_rechecks_scrappings_and_alerts_of_rechecked_vehicles_block() -> None:
    order = ReplayOrder(store_was_empty=True)
    carry = (None, DedupState())
    assert not order.blocks(carry, event("alert", "V1", "2026-11-01T10:00:00+00:00"))
    assert order.blocks(carry, event("recheck", "V1", "2026-11-01T11:00:00+00:00"))
    # From now on V1's conclusions may merge into its verified case: they block.
    assert order.blocks(carry, event("alert", "V1", "2026-11-02T10:00:00+00:00"))
    assert not order.blocks(carry, event("alert", "V2", "2026-11-02T10:00:00+00:00"))
    assert order.blocks(carry, event("lifecycle", "V3", "2026-11-02T10:00:00+00:00", change="scrapped"))
    # On a store that already holds cases any vehicle's may be verified.
    assert ReplayOrder(store_was_empty=False).blocks(carry, event("alert", "V2", "2026-11-02T10:00:00+00:00"))


def test_event_time_is_read_from_the_validated_json() -> None:
    order = ReplayOrder(store_was_empty=True)
    got = order.event_time(event("alert", "V1", "2026-11-01T10:00:00Z"))
    assert got == datetime(2026, 11, 1, 10, tzinfo=UTC).timestamp()
    assert facts("not json").at is None


def test_scopes_are_the_series_a_session_reads_and_the_series_an_event_can_change() -> None:
    order = ReplayOrder(store_was_empty=True)
    carry = (None, DedupState())
    alert_a = event("alert", "V1", "2026-11-01T10:00:00+00:00", series="EV-A")
    recheck = event("recheck", "V1", "2026-11-01T11:00:00+00:00", session_id="V1-s", recheck_ok=True)
    unknown = event("recheck", "V9", "2026-11-01T11:00:00+00:00", session_id="V9-s", recheck_ok=True)
    alert_b = event("alert", "V1", "2026-11-02T10:00:00+00:00", series="EV-B")
    got = []
    for item in (alert_a, recheck, unknown, alert_b):
        order.blocks(carry, item)  # in arrival order, as the pool asks
        got.append(order.scopes(item))
    assert got == [
        (frozenset({"EV-A"}), frozenset({"EV-A"})),
        (None, frozenset({"EV-A"})),
        (None, None),  # a vehicle without an alert yet: its cases may be of any series
        (frozenset({"EV-B"}), frozenset({"EV-A", "EV-B"})),
    ]
    # A store that held cases before: any vehicle's may be of any series.
    before = ReplayOrder(store_was_empty=False)
    before.blocks(carry, alert_a)
    assert before.scopes(alert_a) == (frozenset({"EV-A"}), None)

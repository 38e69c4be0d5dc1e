"""A replay file full of other vehicles' futures, and what each session may recall, from the file alone.

Every alert of this fleet confirms P0A7F (cell_voltage_diff_mv >= 100), so
every alert opens a session that concludes at once, at the alert's ``ts``;
which sessions exist and when they conclude does not depend on memory. The
file is ordered by vehicle, not by time (as one Kafka partition after
another would deliver it): the "other" vehicles' whole histories, including
conclusions, rechecks, an overturned verdict, a merge and a scrapping that
happen after the asking vehicles' sessions open, come first in the file. A
store read without event time would hand those future facts to the askers.

``allowed(events)`` works out, by a small reference model of the memory rules
written here (not the store's code), the cases each session may be given:
own history (the vehicle's cases concluded within two years up to T, not
invalidated by T) and similar cases (other vehicles of the series, verified
at T in the version current at T, not invalidated by T). ``future_only``
lists what a read of the final store without event time would give instead
that was not true at T: the leaks a reviewer should see excluded.

When many vehicles run at once, a session may open before another vehicle's
earlier events (at or before T) have been applied: it may then miss what
they did, or see a case as it was before them (verified, before a later
scrapping or overturned verdict). That is the past arriving late, not the
future: ``possible(events)`` is every similar case some per-vehicle prefix of
the other vehicles' events up to T makes eligible at T. Nothing outside it
may ever be recalled.

Run it to see the table: ``.venv/bin/python -m tests.fleets.event_time [OUT.jsonl]``.

Replays of it give memory a budget (``BUDGET``) that fits every allowed case:
what is checked is when a case may be recalled, not how many fit 800 tokens.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

D0 = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)
# Injection budget of the replays (VDOCTOR_INJECTION_BUDGET_TOKENS): room for every allowed case.
BUDGET = 4000
SERIES = "EV-A"
CODE = "P0A7F"
# Memory rules (DESIGN.md §4), written out again here as the reference.
DEDUP_WINDOW = timedelta(days=30)
OWN_WINDOW = timedelta(days=730)
OWN_LIMIT = 10

# Vehicles whose histories are the others' past and future.
P, L, R, S, M, F = (f"LFVTXME0000000{i:03d}" for i in range(1, 7))
# Vehicles whose sessions ask, after every other vehicle's line in the file.
A1, A2, A3, A4 = (f"LFVASK00000000{i:03d}" for i in range(1, 5))
ASKERS = (A1, A2, A3, A4)


def day(n: float) -> datetime:
    return D0 + timedelta(days=n)


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def session_id(vin: str, at: datetime) -> str:
    return f"{vin}-{at:%Y%m%dT%H%M%S}"


def alert(vin: str, at: datetime, diff_mv: float) -> dict[str, Any]:
    return {"type": "alert", "event_id": f"a-{vin[-3:]}-{at:%m%d%H}", "vin": vin, "series": SERIES,
            "ts": iso(at), "alert_text": "cell voltage imbalance", "dtc_codes": [CODE],
            "signals": {"cell_voltage_diff_mv": diff_mv}}  # fmt: skip


def recheck(vin: str, opened: datetime, at: datetime, ok: bool) -> dict[str, Any]:
    return {"type": "recheck", "event_id": f"r-{vin[-3:]}-{at:%m%d%H}", "vin": vin,
            "session_id": session_id(vin, opened), "ts": iso(at), "recheck_ok": ok}  # fmt: skip


def lifecycle(vin: str, at: datetime, change: str) -> dict[str, Any]:
    return {"type": "lifecycle", "event_id": f"l-{vin[-3:]}-{at:%m%d%H}", "vin": vin, "ts": iso(at), "change": change}


def events() -> list[dict[str, Any]]:
    """The file, in file order: vehicle by vehicle, each vehicle's own events in time order."""
    return [
        # P: the past. Concluded day 0, verified day 1.
        alert(P, day(0), 140), recheck(P, day(0), day(1), True),
        # L: a later conclusion. Concluded day 20, verified day 21.
        alert(L, day(20), 150), recheck(L, day(20), day(21), True),
        # R: a later recheck. Concluded day 2, verified only on day 15.
        alert(R, day(2), 160), recheck(R, day(2), day(15), True),
        # S: scrapped later. Concluded day 3, verified day 4, scrapped day 12.
        alert(S, day(3), 170), recheck(S, day(3), day(4), True), lifecycle(S, day(12), "scrapped"),
        # M: merged later. Version 1 concluded day 5 (151 mV), verified day 6; the fault is back on
        # day 14 (163 mV, merged into the same record, not verified), verified again on day 18.
        alert(M, day(5), 151), recheck(M, day(5), day(6), True),
        alert(M, day(14), 163), recheck(M, day(14), day(18), True),
        # F: verified day 8, the verdict overturned on day 13.
        alert(F, day(7), 180), recheck(F, day(7), day(8), True), recheck(F, day(7), day(13), False),
        # The askers.
        alert(A1, day(10), 190),
        alert(A2, day(9), 120), alert(A2, day(16), 125),  # own history: its day-9 case (then merged into it)
        alert(A3, day(19), 130),
        alert(A4, day(1), 110), lifecycle(A4, day(22), "transferred"), alert(A4, day(25), 115),
    ]  # fmt: skip


# -- the reference model ----------------------------------------------------------------


@dataclass
class Version:
    start: datetime
    reading: float
    verdicts: list[tuple[datetime, bool]] = field(default_factory=list)

    def verified_at(self, t: datetime) -> bool:
        seen = [ok for at, ok in self.verdicts if at <= t]
        return bool(seen) and seen[-1]


@dataclass
class Case:
    vin: str
    key: str
    versions: list[Version]
    sessions: set[str]
    invalid_at: datetime | None = None

    def at(self, t: datetime) -> Version | None:
        """The version current at t, if the case existed and was valid then."""
        if self.invalid_at is not None and self.invalid_at <= t:
            return None
        started = [v for v in self.versions if v.start <= t]
        return started[-1] if started else None


@dataclass(frozen=True)
class Session:
    vin: str
    session_id: str
    opened: datetime
    file_index: int
    # The vehicle's own cases when the session opened (its own events before it), newest first,
    # and the reading of the version each was in.
    own: tuple[str, ...]
    own_readings: dict[str, float]


def simulate(evs: list[dict[str, Any]]) -> tuple[list[Session], dict[str, Case]]:
    """Apply the events vehicle by vehicle (per-vehicle order is file order): sessions and cases."""
    sessions: list[Session] = []
    cases: dict[str, Case] = {}
    for i, e in enumerate(evs):
        t = datetime.fromisoformat(e["ts"].replace("Z", "+00:00"))
        mine = [c for c in cases.values() if c.vin == e["vin"]]
        if e["type"] == "alert":
            sid = session_id(e["vin"], t)
            own = sorted(((v.start, c.key) for c in mine if (v := c.at(t)) and v.start >= t - OWN_WINDOW), reverse=True)
            readings = {c.key: v.reading for c in mine if (v := c.at(t))}
            sessions.append(Session(e["vin"], sid, t, i, tuple(k for _, k in own[:OWN_LIMIT]), readings))
            reading = float(e["signals"]["cell_voltage_diff_mv"])
            # Same vehicle, same fault within 30 days of the case's latest conclusion: merged.
            live = [c for c in mine if c.invalid_at is None and c.versions[-1].start >= t - DEDUP_WINDOW]
            if live:
                case = max(live, key=lambda c: (c.versions[-1].start, c.key))
                case.versions.append(Version(t, reading))
                case.sessions.add(sid)
            else:
                cases[sid] = Case(e["vin"], sid, [Version(t, reading)], {sid})
        elif e["type"] == "recheck":
            [case] = [c for c in mine if e["session_id"] in c.sessions]
            case.versions[-1].verdicts.append((t, bool(e["recheck_ok"])))
        else:
            for c in mine:
                c.invalid_at = c.invalid_at or t
    return sessions, cases


@dataclass(frozen=True)
class Allowed:
    own: tuple[str, ...]  # case keys, newest first
    similar: frozenset[tuple[str, str]]  # (vin, case key)
    # The version each allowed case is in at T: its confirming reading (names the summary).
    readings: dict[tuple[str, str], float]


def allowed(evs: list[dict[str, Any]]) -> dict[str, Allowed]:
    """What each session (by id) may be given when it opens, from the file alone."""
    sessions, cases = simulate(evs)
    out: dict[str, Allowed] = {}
    for s in sessions:
        t = s.opened
        # Other vehicles: whatever was true at t, wherever it is in the file.
        similar = {(c.vin, c.key) for c in cases.values() if c.vin != s.vin and (v := c.at(t)) and v.verified_at(t)}
        readings = {(c.vin, c.key): v.reading for c in cases.values() if c.vin != s.vin and (v := c.at(t))}
        readings.update({(s.vin, key): reading for key, reading in s.own_readings.items()})
        out[s.session_id] = Allowed(s.own, frozenset(similar), readings)
    return out


def possible(evs: list[dict[str, Any]]) -> dict[str, frozenset[tuple[str, str]]]:
    """Per session: similar cases eligible at T under some prefix of each other vehicle's events up to T."""
    sessions, _ = simulate(evs)
    by_vin: dict[str, list[dict[str, Any]]] = {}
    for e in evs:
        by_vin.setdefault(e["vin"], []).append(e)
    out = {}
    for s in sessions:
        t = s.opened
        seen: set[tuple[str, str]] = set()
        for vin, mine in by_vin.items():
            if vin == s.vin:
                continue
            past = [e for e in mine if datetime.fromisoformat(e["ts"].replace("Z", "+00:00")) <= t]
            assert past == mine[: len(past)], f"{vin}: events out of time order"
            for n in range(len(past) + 1):
                _, cases = simulate(past[:n])
                seen |= {(c.vin, c.key) for c in cases.values() if (v := c.at(t)) and v.verified_at(t)}
        out[s.session_id] = frozenset(seen)
    return out


def future_only(evs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str]]]:
    """Per session: cases a read of the final store without event time would give that were not true at T."""
    sessions, cases = simulate(evs)
    ok = allowed(evs)
    final = datetime.max.replace(tzinfo=UTC)
    out = {}
    for s in sessions:
        now = {(c.vin, c.key) for c in cases.values() if c.vin != s.vin and (v := c.at(final)) and v.verified_at(final)}
        out[s.session_id] = now - ok[s.session_id].similar
    return out


def complete_past(evs: list[dict[str, Any]]) -> set[str]:
    """Sessions opened after every event at or before their time in the file: their recall can be exact."""
    sessions, _ = simulate(evs)
    times = [datetime.fromisoformat(e["ts"].replace("Z", "+00:00")) for e in evs]
    return {s.session_id for s in sessions if all(i < s.file_index for i, at in enumerate(times) if at <= s.opened)}


def check_recalls(diagnoses: list[dict[str, Any]], evs: list[dict[str, Any]], exact: bool) -> int:
    """Assert no session recalled anything from its future; returns how many pairs were recalled.

    Own history is exact (a vehicle's own events run in order). With ``exact``
    (events applied one at a time in file order) every similar case is one the
    file allows, and sessions whose past is complete in the file get exactly
    those; otherwise every similar case is one some prefix of the past allows.
    """
    ok, complete, maybe = allowed(evs), complete_past(evs), possible(evs)
    assert sorted(d["session_id"] for d in diagnoses) == sorted(ok), "one diagnosis per session"
    pairs = 0
    for d in diagnoses:
        sid, memory = d["session_id"], d["memory"]
        own = tuple(r["session_id"] for r in memory["own"] if r["vin"] == d["vin"])
        similar = {(r["vin"], r["session_id"]) for r in memory["similar"]}
        assert len(own) == len(memory["own"]), f"{sid}: another vehicle in own history"
        assert own == ok[sid].own, f"{sid}: own {own}, allowed {ok[sid].own}"
        assert similar <= maybe[sid], f"{sid}: recalled {sorted(similar - maybe[sid])} from its future"
        if exact:
            assert similar <= ok[sid].similar, f"{sid}: recalled {sorted(similar - ok[sid].similar)}, not true then"
            if sid in complete:
                assert similar == ok[sid].similar, f"{sid}: incomplete recall"
        pairs += len(own) + len(similar)
    return pairs


def write(path: Path) -> list[dict[str, Any]]:
    evs = events()
    path.write_text("".join(json.dumps(e) + "\n" for e in evs), encoding="utf-8")
    return evs


def main(argv: list[str]) -> int:
    evs = write(Path(argv[0])) if argv else events()
    ok, leaks, exact = allowed(evs), future_only(evs), complete_past(evs)
    for sid, a in ok.items():
        print(f"{sid}{' (past complete)' if sid in exact else ''}")
        print(f"  own     {list(a.own)}")
        print(f"  similar {sorted(a.similar)}")
        print(f"  future  {sorted(leaks[sid])}  <- must never be recalled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

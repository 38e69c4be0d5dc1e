"""A replay whose file holds other vehicles' futures, through the PyFlink job on sqlite (DESIGN.md §4).

The file (tests/fleets/event_time.py) is ordered vehicle by vehicle: later
conclusions, rechecks, a merge, an overturned verdict and a scrapping of
other vehicles come before the sessions that must not see them. Every
recalled (session, case) pair must be one the file allows at the session's
own time; at concurrency 1 (file order) every session whose past precedes it
in the file gets exactly the allowed set; at the default concurrency runs
overlap, and still nothing from a session's future is recalled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.fleets import event_time as fleet

pytestmark = pytest.mark.e2e


def vdoctor(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VDOCTOR_INJECTION_BUDGET_TOKENS": str(fleet.BUDGET)}
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def replay(tmp: Path, concurrency: int) -> tuple[list[dict], list[dict], str]:  # type: ignore[type-arg]
    out = tmp / f"c{concurrency}"
    memory = f"sqlite:///{out}/memory.db"
    vdoctor("run", "--alerts", str(tmp / "fleet.jsonl"), "--out", str(out), "--memory", memory,
            "--concurrency", str(concurrency))  # fmt: skip
    diags = [json.loads(x) for x in (out / "diagnoses.jsonl").read_text().splitlines()]
    dead = [json.loads(x) for x in (out / "dead_letters.jsonl").read_text().splitlines()]
    return diags, dead, memory


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:  # type: ignore[type-arg]
    tmp = tmp_path_factory.mktemp("event-time")
    return tmp, fleet.write(tmp / "fleet.jsonl")


def test_in_file_order_each_session_recalls_exactly_what_was_true_when_it_opened(
    fleet_file: tuple[Path, list[dict]],  # type: ignore[type-arg]
) -> None:
    tmp, events = fleet_file
    diags, dead, memory = replay(tmp, concurrency=1)
    assert dead == []
    assert fleet.check_recalls(diags, events, exact=True) >= 20
    # The same recall from the CLI on the store the replay left (every later event applied), as of
    # just before A1's session (at its own time its own case, concluded then, would be there too):
    # the merged vehicle's case in the version it had then.
    a1_opened = fleet.iso(fleet.day(10) - timedelta(seconds=1))
    text = vdoctor("memory", "recall", "--vin", fleet.A1, "--series", fleet.SERIES, "--symptom",
                   "cell voltage imbalance", "--codes", "P0A7F", "--as-of", a1_opened, "--json",
                   "--memory", memory).stdout  # fmt: skip
    got = json.loads(text)
    assert got["as_of"] == a1_opened
    a1 = fleet.allowed(events)[fleet.session_id(fleet.A1, fleet.day(10))]
    assert {(r["vin"], r["session_id"]) for r in got["similar"]} == a1.similar
    assert "cell_voltage_diff_mv=151" in got["text"] and "cell_voltage_diff_mv=163" not in got["text"]
    # The record's event times are what the history shows.
    [m] = json.loads(vdoctor("memory", "history", "--vin", fleet.M, "--json", "--memory", memory).stdout)
    assert (m["session_id"], m["merged_sessions"]) == (fleet.session_id(fleet.M, fleet.day(5)),
                                                       [fleet.session_id(fleet.M, fleet.day(14))])  # fmt: skip
    assert (m["opened_ts"], m["concluded_at"], m["verified_ts"], m["invalid_ts"]) == (
        "2026-10-15T08:00:00Z", "2026-10-15T08:00:00Z", "2026-10-19T08:00:00Z", None)  # fmt: skip
    [s] = json.loads(vdoctor("memory", "history", "--vin", fleet.S, "--json", "--memory", memory).stdout)
    assert (s["valid"], s["invalid_ts"], s["verified_ts"]) == (False, "2026-10-13T08:00:00Z", "2026-10-05T08:00:00Z")


def test_with_many_vehicles_in_flight_no_session_recalls_its_future(
    fleet_file: tuple[Path, list[dict]],  # type: ignore[type-arg]
) -> None:
    tmp, events = fleet_file
    diags, dead, _ = replay(tmp, concurrency=64)
    assert dead == []
    assert fleet.check_recalls(diags, events, exact=False) > 0

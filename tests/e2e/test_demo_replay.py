"""The demo fleet through the job at parallelism 2: exactly once, per-VIN order, predicted sessions.

The generator (scripts/gen_demo.py) predicts which sessions conclude from the
session rules alone; the job must reproduce that prediction exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

DEMO = REPO_ROOT / "data" / "demo"
INJECTION_BUDGET = 800


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(DEMO / "alerts.jsonl"), "--out", str(out),
         "--memory", f"sqlite:///{out}/memory.db", "--parallelism", "2"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _valid_alerts_in_file_order() -> list[dict]:
    seen: set[str] = set()
    alerts = []
    for line in (DEMO / "alerts.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # malformed on purpose
        if not isinstance(event, dict) or event.get("type") != "alert" or event.get("event_id", "").startswith("e-99"):
            continue  # the generator's malformed alerts use ids e-99xxxx
        if event["event_id"] not in seen:
            seen.add(event["event_id"])
            alerts.append(event)
    return alerts


def test_every_valid_alert_exactly_once_in_per_vin_order(demo_out: Path) -> None:
    expected = json.loads((DEMO / "expected.json").read_text())
    diags = _lines(demo_out / "diagnoses.jsonl")
    alerts = _valid_alerts_in_file_order()
    assert len(alerts) == expected["alerts"]
    assert sorted(d["event_id"] for d in diags) == sorted(a["event_id"] for a in alerts)
    by_vin_out: dict[str, list[str]] = {}
    for d in diags:
        by_vin_out.setdefault(d["vin"], []).append(d["event_id"])
    by_vin_in: dict[str, list[str]] = {}
    for a in alerts:
        by_vin_in.setdefault(a["vin"], []).append(a["event_id"])
    assert by_vin_out == by_vin_in


def test_concluded_sessions_match_the_generators_prediction(demo_out: Path) -> None:
    expected = json.loads((DEMO / "expected.json").read_text())
    concluded = sorted(d["session_id"] for d in _lines(demo_out / "diagnoses.jsonl") if d["phase"] == "CONCLUDED")
    assert concluded == sorted(expected["concluded_sessions"])


def test_malformed_lines_are_dead_letters_and_rechecks_all_known(demo_out: Path) -> None:
    expected = json.loads((DEMO / "expected.json").read_text())
    dead = _lines(demo_out / "dead_letters.jsonl")
    assert len(dead) == expected["malformed"]
    assert all(d["error"] and d["stage"] in ("parse", "validate") for d in dead)


def test_memory_injection_stays_within_budget_and_isolated(demo_out: Path) -> None:
    diags = _lines(demo_out / "diagnoses.jsonl")
    assert max(d["memory"]["tokens"] for d in diags) <= INJECTION_BUDGET
    assert sum(1 for d in diags if d["memory"]["own"]) > 0
    for d in diags:
        assert all(ref["vin"] == d["vin"] for ref in d["memory"]["own"])
        assert all(ref["vin"] != d["vin"] for ref in d["memory"]["similar"])

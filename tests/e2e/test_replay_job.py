"""The PyFlink job on the local MiniCluster, through the `vdoctor run` command.

Expected values are worked out by hand from the events below. Some cross
vehicles (A's verified case informs B's next session), which only the file's
order decides in a replay compressed to seconds: the job runs with
``--concurrency 1`` (events one at a time, in arrival order). Concurrent runs
keep per-vehicle order only; tests/e2e/test_concurrency.py covers them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

A = "LSVAU2180N2183294"  # EV-A, two sessions of the same fault
B = "LSVAU2180N2183295"  # EV-A, a similar vehicle
C = "LFVBA24B5N3000017"  # EV-B, another series: never sees EV-A cases


def alert(event_id: str, vin: str, series: str, ts: str, diff_mv: float, text: str = "电池包单体压差过大") -> dict:
    return {
        "type": "alert", "event_id": event_id, "vin": vin, "series": series, "ts": ts,
        "alert_text": text, "dtc_codes": ["P0A7F"], "signals": {"cell_voltage_diff_mv": diff_mv},
    }


EVENTS: list[dict | str] = [
    alert("e-1", A, "EV-A", "2026-11-01T08:00:00Z", 187),          # A session 1 concludes at once
    alert("e-2", B, "EV-A", "2026-11-02T08:00:00Z", 160),          # B session 1: A not verified yet
    "{not json",
    {"type": "alert", "event_id": "e-bad", "vin": "LSVAU2180N218329", "series": "EV-A",
     "ts": "2026-11-02T09:00:00Z"},                                  # 16-character VIN
    {"event_id": "r-1", "vin": A, "ts": "2026-11-04T08:00:00Z", "recheck_ok": "PASS",
     "note": "压差 12mV, 复检正常"},                                   # a workshop's: no type or session
    alert("e-3", B, "EV-A", "2026-11-05T08:00:00Z", 140, "Cell voltage imbalance warning"),  # B session 2
    alert("e-4", C, "EV-B", "2026-11-05T09:00:00Z", 150),          # other series
    alert("e-5", A, "EV-A", "2026-11-10T08:00:00Z", 90),           # A session 2 opens, below threshold
    alert("e-6", A, "EV-A", "2026-11-10T10:00:00Z", 155),          # ... and concludes
    alert("e-1", A, "EV-A", "2026-11-01T08:00:00Z", 187),          # replayed duplicate of e-1
    {"type": "recheck", "event_id": "r-2", "vin": C, "session_id": f"{C}-20200101T000000",
     "ts": "2026-11-11T08:00:00Z", "recheck_ok": True},            # unknown session
]


@pytest.fixture(scope="module")
def run_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    alerts = out / "alerts.jsonl"
    alerts.write_text("\n".join(e if isinstance(e, str) else json.dumps(e, ensure_ascii=False) for e in EVENTS) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(out),
         "--memory", f"sqlite:///{out}/memory.db", "--concurrency", "1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out / "stdout.txt").write_text(proc.stdout)
    return out


def _diagnoses(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "diagnoses.jsonl").read_text().splitlines()]


def test_every_valid_alert_is_diagnosed_exactly_once_in_per_vin_order(run_out: Path) -> None:
    diags = _diagnoses(run_out)
    assert sorted(d["event_id"] for d in diags) == ["e-1", "e-2", "e-3", "e-4", "e-5", "e-6"]
    assert [d["event_id"] for d in diags if d["vin"] == A] == ["e-1", "e-5", "e-6"]
    assert [d["event_id"] for d in diags if d["vin"] == B] == ["e-2", "e-3"]


def test_second_session_recalls_own_case_and_needs_fewer_tools(run_out: Path) -> None:
    by_id = {d["event_id"]: d for d in _diagnoses(run_out)}
    first, second_open, second_end = by_id["e-1"], by_id["e-5"], by_id["e-6"]
    assert first["phase"] == "CONCLUDED" and first["session_id"] == f"{A}-20261101T080000"
    assert first["memory"]["injected"] is False
    assert second_open["session_id"] == second_end["session_id"] == f"{A}-20261110T080000"
    assert second_open["phase"] == "INVESTIGATING" and second_end["phase"] == "CONCLUDED"
    assert second_end["memory"]["own"] == [{"vin": A, "session_id": f"{A}-20261101T080000"}]
    assert f"case://{A}/{A}-20261101T080000" in second_end["evidence"]
    assert second_end["tool_calls"] < first["tool_calls"]
    assert second_end["root_cause"] == first["root_cause"]


def test_similar_case_only_after_verified_recheck_and_only_same_series(run_out: Path) -> None:
    by_id = {d["event_id"]: d for d in _diagnoses(run_out)}
    case_a = {"vin": A, "session_id": f"{A}-20261101T080000"}
    assert by_id["e-2"]["memory"]["similar"] == []          # before A's recheck
    assert case_a in by_id["e-3"]["memory"]["similar"]      # after recheck_ok = true
    assert by_id["e-3"]["memory"]["own"] == [{"vin": B, "session_id": f"{B}-20261102T080000"}]
    assert by_id["e-4"]["memory"]["similar"] == []          # EV-B never sees EV-A cases
    for d in _diagnoses(run_out):                           # no vehicle's own history is another's
        assert all(ref["vin"] == d["vin"] for ref in d["memory"]["own"])
        assert all(ref["vin"] != d["vin"] for ref in d["memory"]["similar"])


def test_bad_lines_land_in_dead_letters_with_reasons(run_out: Path) -> None:
    dead = [json.loads(line) for line in (run_out / "dead_letters.jsonl").read_text().splitlines()]
    assert sorted(d["stage"] for d in dead) == ["parse", "process", "validate"]
    by_stage = {d["stage"]: d for d in dead}
    assert by_stage["parse"]["raw"] == "{not json"
    assert "vin" in by_stage["validate"]["error"] and "LSVAU2180N218329" in by_stage["validate"]["raw"]
    assert "unknown session" in by_stage["process"]["error"]


def test_long_term_memory_merges_the_repeat_of_a_fault_within_30_days(run_out: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "memory", "history", "--vin", A, "--json",
         "--memory", f"sqlite:///{run_out}/memory.db"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    )
    records = json.loads(proc.stdout)
    # A's second session (11-10) repeats the 11-01 fault within 30 days: one record, both sessions.
    assert [r["session_id"] for r in records] == [f"{A}-20261101T080000"]
    assert records[0]["merged_sessions"] == [f"{A}-20261110T080000"]
    assert records[0]["recheck_ok"] is None  # the fault came back: the 11-04 recheck no longer holds
    assert all("summary_vec" not in r and len(r["summary"]) <= 300 for r in records)
    assert "cell_voltage_diff_mv=155" in records[0]["summary"]


def test_run_prints_a_summary(run_out: Path) -> None:
    text = (run_out / "stdout.txt").read_text()
    assert "sessions opened    5" in text  # A x2, B x2, C x1
    assert "sessions concluded 5" in text
    assert "dead letters       3" in text

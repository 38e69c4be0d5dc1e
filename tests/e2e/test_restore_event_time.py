"""Sessions and recall across a crash and restore of the job, judged in event time (issue 13, item 4).

The job replays a file at a steady rate with checkpoints, is killed after the
first part has been processed and checkpointed, and is restored from its
newest checkpoint. Expiry of a session (48 h without an alert) is judged on
the events' ``ts`` inside the session; Flink's state TTL, on processing time,
only bounds the state. By hand, with T0 = 2026-11-01 08:00Z:

- before the crash: K concludes at T0 (written to long-term memory) and is
  verified at T0+1h; W and V open sessions at T0 that stay open (readings
  below the threshold); M concludes (a marker: once its case is in memory,
  everything before it has been processed, at concurrency 1);
- after the restore: W alerts at T0+10h (within 48 h: the restored session
  goes on), V at T0+50h (48 h of event time passed: a new session), Y opens
  at T0+2h and recalls K's case, verified before the crash; Q opens at
  T0-1h, before K concluded, and recalls nothing of it.

When the restored job's state TTL is shorter than the time the job was down
(processing time), Flink drops the sessions that event time would still have
kept: W's alert then opens a new session (and still nothing is lost or
dead-lettered); long-term memory, outside Flink, still recalls K for Y.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

K, W, V, M, Y, Q, FILL = (f"LRSTR000000000{i:03d}" for i in range(1, 8))
SERIES = "EV-R"
# Lines per second: slow enough that the kill lands between the two parts.
RATE = 4
FILLER = 60  # 15 s of replayed duplicates between the parts


def alert(event_id: str, vin: str, ts: str, diff_mv: float) -> dict:  # type: ignore[type-arg]
    return {"type": "alert", "event_id": event_id, "vin": vin, "series": SERIES, "ts": ts,
            "alert_text": "cell voltage imbalance", "dtc_codes": ["P0A7F"],
            "signals": {"cell_voltage_diff_mv": diff_mv}}  # fmt: skip


def write_file(path: Path) -> None:
    before = [
        alert("k-1", K, "2026-11-01T08:00:00Z", 187),
        {"type": "recheck", "event_id": "k-r", "vin": K, "session_id": f"{K}-20261101T080000",
         "ts": "2026-11-01T09:00:00Z", "recheck_ok": True},
        alert("w-1", W, "2026-11-01T08:00:00Z", 60),
        alert("v-1", V, "2026-11-01T08:00:00Z", 60),
        alert("m-1", M, "2026-11-01T08:00:00Z", 190),
    ]  # fmt: skip
    # A replayed duplicate of k-1, over and over: processed once, costs nothing, takes time.
    filler = [alert("k-1", K, "2026-11-01T08:00:00Z", 187)] * FILLER
    after = [
        alert("w-2", W, "2026-11-01T18:00:00Z", 70),
        alert("v-2", V, "2026-11-03T10:00:00Z", 70),
        alert("y-1", Y, "2026-11-01T10:00:00Z", 150),
        alert("q-1", Q, "2026-11-01T07:00:00Z", 150),
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in before + filler + after))


def run(out: Path, alerts: Path, checkpoints: Path, *extra: str, ttl_s: str | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, **({"VDOCTOR_STATE_TTL_S": ttl_s} if ttl_s else {})}
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(out),
         "--memory", f"sqlite:///{out.parent}/memory.db", "--concurrency", "1", "--rate", str(RATE),
         "--checkpoint-dir", str(checkpoints), "--checkpoint-interval-ms", "300",
         # Barriers overtake the lines queued before the throttle, so a checkpoint holds the state of
         # what was processed, and the queued lines are replayed after the restore.
         "--flink-conf", "execution.checkpointing.unaligned.enabled=true", *extra],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def has_case(db: Path, vin: str) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return bool(conn.execute("SELECT COUNT(*) FROM case_memory WHERE vin = ?", (vin,)).fetchone()[0])
    except sqlite3.OperationalError:
        return False  # not created yet


def crash_after_the_first_part(tmp: Path) -> tuple[Path, Path]:
    """Run until M's case is written and a later checkpoint completed, then SIGKILL the job."""
    alerts, checkpoints = tmp / "alerts.jsonl", tmp / "checkpoints"
    write_file(alerts)
    first = run(tmp / "out1", alerts, checkpoints)
    deadline = time.monotonic() + 240
    marked = None
    while time.monotonic() < deadline and first.poll() is None:
        if marked is None and has_case(tmp / "memory.db", M):
            marked = time.time()
        done = [p for p in checkpoints.glob("*/chk-*/_metadata") if marked and p.stat().st_mtime > marked + 1]
        if done:
            break
        time.sleep(0.2)
    assert first.poll() is None, "the first run ended before it could be killed: " + first.stderr.read()[-2000:]
    assert marked is not None
    os.killpg(first.pid, signal.SIGKILL)  # the client and its JVM
    first.communicate(timeout=30)
    return alerts, checkpoints


def finish(proc: subprocess.Popen[str]) -> tuple[dict[str, dict], list[dict]]:  # type: ignore[type-arg]
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    out = Path(proc.args[proc.args.index("--out") + 1])  # type: ignore[union-attr, index]
    diags = [json.loads(x) for x in (out / "diagnoses.jsonl").read_text().splitlines()]
    dead = [json.loads(x) for x in (out / "dead_letters.jsonl").read_text().splitlines()]
    return {d["event_id"]: d for d in diags}, dead


def test_a_restored_session_goes_on_and_one_whose_48h_passed_in_event_time_does_not(tmp_path: Path) -> None:
    alerts, checkpoints = crash_after_the_first_part(tmp_path)
    after, dead = finish(run(tmp_path / "out2", alerts, checkpoints, "--restore", "latest"))
    assert dead == []
    assert {"w-2", "v-2", "y-1", "q-1"} <= set(after)
    assert "w-1" not in after and "m-1" not in after  # processed before the checkpoint: not run again
    # W's session was restored from the checkpoint and its next alert (10 h later) joins it.
    assert after["w-2"]["session_id"] == f"{W}-20261101T080000"
    # V's next alert comes 50 h of event time later: the restored session had expired, a new one opens.
    assert after["v-2"]["session_id"] == f"{V}-20261103T100000"
    # Long-term memory across the restore, as of each session's own time.
    case_k = {"vin": K, "session_id": f"{K}-20261101T080000"}
    assert case_k in after["y-1"]["memory"]["similar"]  # opened after K was verified (before the crash)
    assert after["q-1"]["memory"]["similar"] == []  # opened before K concluded


def test_restored_state_older_than_flinks_ttl_is_dropped_and_the_next_alert_opens_a_session(tmp_path: Path) -> None:
    alerts, checkpoints = crash_after_the_first_part(tmp_path)
    time.sleep(3)  # the job stays down longer than the restored job's state TTL
    after, dead = finish(run(tmp_path / "out2", alerts, checkpoints, "--restore", "latest", ttl_s="2"))
    assert dead == []
    # Event time alone would have kept W's session open; Flink's TTL dropped it while the job was down.
    assert after["w-2"]["session_id"] == f"{W}-20261101T180000"
    assert after["v-2"]["session_id"] == f"{V}-20261103T100000"
    assert {"vin": K, "session_id": f"{K}-20261101T080000"} in after["y-1"]["memory"]["similar"]
    assert after["q-1"]["memory"]["similar"] == []

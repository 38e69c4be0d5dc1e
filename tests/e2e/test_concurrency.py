"""Many vehicles in flight in the diagnosis operator, through the real openai client and the local model server.

The job runs as ``vdoctor run --model openai`` on the MiniCluster; the model
server runs in this test process on a free port. Workload (by hand): every
VIN sends 4 alerts of U0140 (confirmed when seen in 2 alerts of a session),
one hour apart. Per VIN, then: alert 1 opens session 1 (INVESTIGATING), alert
2 concludes it (CONCLUDED, written to L3), alert 3 opens session 2 and
recalls session 1 as own history, alert 4 concludes it. Each run makes
exactly 2 model calls (look the code up, answer).
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

from devtools.browser import free_port
from devtools.model_server import ModelServer, ServerConfig
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

ALPHABET = "0123456789ABCDEFGHJKLMNPRSTUVWXYZ"


def vin(i: int) -> str:
    return "LSVCNCR0000" + "".join(ALPHABET[(i // len(ALPHABET) ** p) % len(ALPHABET)] for p in (5, 4, 3, 2, 1, 0))


def sid(v: str, hour: int) -> str:
    return f"{v}-20261101T{hour:02d}0000"


def write_alerts(path: Path, vins: int) -> list[dict]:
    events = [
        {"type": "alert", "event_id": f"c-{v}-{k}", "vin": vin(v), "series": "EV-A",
         "ts": f"2026-11-01T{8 + k:02d}:00:00Z", "alert_text": "CAN communication lost", "dtc_codes": ["U0140"],
         "signals": {"can_timeout_s": 0.5}}
        for k in range(4) for v in range(vins)
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return events


def run_job(out: Path, alerts: Path, url: str, concurrency: int, *extra: str, **env: str) -> subprocess.Popen[str]:
    environ = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-e2e-secret-000", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(out),
         "--memory", f"sqlite:///{out.parent}/memory.db", "--model", "openai", "--concurrency", str(concurrency),
         *extra],
        cwd=REPO_ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 300) -> str:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr[-3000:]
    assert "sk-e2e-secret-000" not in stdout + stderr
    return stdout


def diagnoses(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "diagnoses.jsonl").read_text().splitlines()]


def l3_keys(db: Path) -> list[tuple[str, str]]:
    """Every session each L3 record holds: its own key, and the sessions merged into it."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT vin, session_id, merged_sessions FROM case_memory").fetchall()
    return sorted([(v, s) for v, s, _ in rows] + [(v, m) for v, _, merged in rows for m in json.loads(merged)])


def l3_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM case_memory").fetchone()[0])


def test_per_vin_order_and_state_hold_with_many_vehicles_in_flight(tmp_path: Path) -> None:
    events = write_alerts(tmp_path / "alerts.jsonl", vins=40)
    with ModelServer(ServerConfig(latency_ms=40, jitter_ms=30, seed=3)) as server:
        finish(run_job(tmp_path / "out", tmp_path / "alerts.jsonl", server.base_url, 16))
    diags = diagnoses(tmp_path / "out")
    assert sorted(d["event_id"] for d in diags) == sorted(e["event_id"] for e in events)  # each exactly once
    for v in range(40):
        mine = [d for d in diags if d["vin"] == vin(v)]
        assert [d["event_id"] for d in mine] == [f"c-{v}-{k}" for k in range(4)]
        assert [d["phase"] for d in mine] == ["INVESTIGATING", "CONCLUDED", "INVESTIGATING", "CONCLUDED"]
        assert [d["session_id"] for d in mine] == [sid(vin(v), 8)] * 2 + [sid(vin(v), 10)] * 2
        assert mine[2]["memory"]["own"] == [{"vin": vin(v), "session_id": sid(vin(v), 8)}]
    assert all(d["llm_calls"] == 2 and d["tool_calls"] == 1 for d in diags)
    # The second session repeats the first one's fault within 30 days: merged into its record.
    assert [d["flags"] for d in diags if d["event_id"].endswith("-3")] == [["l3_merged"]] * 40
    assert all(d["flags"] == [] for d in diags if not d["event_id"].endswith("-3"))
    assert all(d["prompt_tokens"] > 0 and d["completion_tokens"] > 0 and d["model_latency_ms"] > 0 for d in diags)
    assert server.stats["ok"] == 2 * len(events)
    # 16 model slots and 20 runs in flight (a quarter more): the endpoint sees 16 calls at once, never more.
    assert server.peak_in_flight == 16
    expected = sorted((vin(v), sid(vin(v), h)) for v in range(40) for h in (8, 10))
    assert l3_keys(tmp_path / "memory.db") == expected
    assert l3_rows(tmp_path / "memory.db") == 40  # one record per vehicle: the repeat was merged


def test_injected_429_500_timeouts_and_malformed_replies_end_in_success_or_a_flag(tmp_path: Path) -> None:
    events = write_alerts(tmp_path / "alerts.jsonl", vins=24)
    config = ServerConfig(
        latency_ms=20, seed=11, timeout_hang_s=3.0,
        error_rates={"429": 0.15, "500": 0.1, "timeout": 0.03, "malformed": 0.05},
    )  # fmt: skip
    with ModelServer(config) as server:
        finish(
            run_job(tmp_path / "out", tmp_path / "alerts.jsonl", server.base_url, 16,
                    VDOCTOR_MODEL_TIMEOUT_S="1", VDOCTOR_MODEL_MAX_ATTEMPTS="3")
        )  # fmt: skip
    assert all(server.stats[k] > 0 for k in ("429", "500", "timeout", "malformed"))
    diags = diagnoses(tmp_path / "out")
    assert sorted(d["event_id"] for d in diags) == sorted(e["event_id"] for e in events)
    failed = [d for d in diags if "model_failed" in d["flags"]]
    assert all(d["phase"] == "INVESTIGATING" and d["root_cause"] is None for d in failed)
    # A run either failed for good after 3 attempts or got both answers: with
    # ~30% of calls failing, most runs succeed after retries.
    assert all(d["llm_calls"] == 2 for d in diags if d not in failed)
    assert len(failed) < len(diags) // 4
    assert server.stats["requests"] > server.stats["ok"]  # retries happened


def test_killed_with_runs_in_flight_and_restored_yields_every_l3_record_once(tmp_path: Path) -> None:
    vins = 30
    events = write_alerts(tmp_path / "alerts.jsonl", vins=vins)
    checkpoints = tmp_path / "checkpoints"
    total_calls = 2 * len(events)
    with ModelServer(ServerConfig(latency_ms=300)) as server:
        first = run_job(tmp_path / "out1", tmp_path / "alerts.jsonl", server.base_url, 4, "--checkpoint-dir",
                        str(checkpoints), "--checkpoint-interval-ms", "300", "--rate", "10")  # fmt: skip
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and first.poll() is None:
            done = list(checkpoints.glob("*/chk-*/_metadata"))
            if done and server.stats["ok"] >= total_calls * 0.2:
                break
            time.sleep(0.1)
        assert first.poll() is None, "the first run ended before it could be killed"
        calls_before_kill = server.stats["ok"]
        os.killpg(first.pid, signal.SIGKILL)  # the job's whole process group: client and its JVM
        first.communicate(timeout=30)  # reaps it and closes its pipes
        assert calls_before_kill < total_calls
        written_before = len(l3_keys(tmp_path / "memory.db"))
        finish(run_job(tmp_path / "out2", tmp_path / "alerts.jsonl", server.base_url, 16,
                       "--checkpoint-dir", str(checkpoints), "--restore", "latest", "--rate", "10"))  # fmt: skip
    expected = sorted((vin(v), sid(vin(v), h)) for v in range(vins) for h in (8, 10))
    assert written_before < len(expected)  # the kill came with cases still to conclude
    assert l3_keys(tmp_path / "memory.db") == expected  # every concluded case, once
    assert l3_rows(tmp_path / "memory.db") == vins
    # The restored run re-ran what was in flight at the checkpoint and everything after it
    # (what the killed run emitted before is not a contract: its collect client died with it).
    second = diagnoses(tmp_path / "out2")
    assert len({d["event_id"] for d in second}) == len(second)  # no duplicates within the restored run
    assert {f"c-{v}-3" for v in range(vins)} <= {d["event_id"] for d in second}  # arrived after the kill
    for v in range(vins):  # per-VIN order and state survive the restore
        mine = [d for d in second if d["vin"] == vin(v)]
        ks = [int(d["event_id"].rsplit("-", 1)[1]) for d in mine]
        assert ks == sorted(ks)
        phases = {0: "INVESTIGATING", 1: "CONCLUDED", 2: "INVESTIGATING", 3: "CONCLUDED"}
        assert all(d["phase"] == phases[k] for d, k in zip(mine, ks, strict=True))


class CallLog:
    """The offline responder, recording when the first call of each vehicle's run arrived (by its prompt's vin)."""

    def __init__(self) -> None:
        import re
        import threading

        from devtools.model_server import offline_responder

        self._inner = offline_responder()
        self._vin = re.compile(r"vin: ([0-9A-Z]{17});")
        self._lock = threading.Lock()
        self.calls: list[tuple[float, str]] = []

    def __call__(self, messages, tools):  # type: ignore[no-untyped-def]
        found = self._vin.search(" ".join(m.content for m in messages if m.role == "user"))
        with self._lock:
            self.calls.append((time.monotonic(), found.group(1) if found else ""))
        return self._inner(messages, tools)


def kill_once_a_checkpoint_holds(job: subprocess.Popen[str], checkpoints: Path, log: CallLog, vins: set[str]) -> None:
    """Kill ``job`` (its whole process group) once a checkpoint completed after every one of ``vins`` had its
    first model call: the checkpoint holds their runs in flight."""
    deadline = time.monotonic() + 240
    all_in_flight_at = None
    while time.monotonic() < deadline and job.poll() is None:
        if all_in_flight_at is None and vins <= {v for _, v in log.calls}:
            all_in_flight_at = time.time()
        done = checkpoints.glob("*/chk-*/_metadata")
        if all_in_flight_at and any(p.stat().st_mtime > all_in_flight_at for p in done):
            break
        time.sleep(0.05)
    assert job.poll() is None and all_in_flight_at is not None, "the job ended before it could be killed"
    os.killpg(job.pid, signal.SIGKILL)
    job.communicate(timeout=30)


def test_runs_in_flight_at_a_checkpoint_restart_at_once_after_a_restore(tmp_path: Path) -> None:
    """Vehicles restored with runs to do get no more events: their runs restart when the job does, not at its end.

    8 vehicles send one alert each, then 40 other vehicles one each, at 4 lines/s. The job is killed while
    the 8 runs are in flight (a model call takes 3 s) after a checkpoint holds them; the restored job reads
    the other vehicles' alerts for another ~8 s. The 8 runs must start again long before that input ends.
    """
    first = [{"type": "alert", "event_id": f"r-a{v}", "vin": vin(v), "series": "EV-A", "ts": "2026-11-01T08:00:00Z",
              "alert_text": "CAN communication lost", "dtc_codes": ["U0140"], "signals": {"can_timeout_s": 0.5}}
             for v in range(8)]  # fmt: skip
    later = [{**e, "event_id": f"r-b{v}", "vin": vin(100 + v)} for v, e in enumerate(first * 5)]
    (tmp_path / "alerts.jsonl").write_text("\n".join(json.dumps(e) for e in first + later) + "\n")
    group_a = {e["vin"] for e in first}
    checkpoints = tmp_path / "checkpoints"
    log = CallLog()
    with ModelServer(ServerConfig(latency_ms=3000), log) as server:
        job = run_job(tmp_path / "out1", tmp_path / "alerts.jsonl", server.base_url, 16, "--checkpoint-dir",
                      str(checkpoints), "--checkpoint-interval-ms", "300", "--rate", "4")  # fmt: skip
        kill_once_a_checkpoint_holds(job, checkpoints, log, group_a)
        killed_at = time.monotonic()
        assert server.stats["ok"] < len(first)  # none of the 8 runs had its second call answered
        finish(run_job(tmp_path / "out2", tmp_path / "alerts.jsonl", server.base_url, 16,
                       "--checkpoint-dir", str(checkpoints), "--restore", "latest", "--rate", "4"))  # fmt: skip
    restored = [(t, v) for t, v in log.calls if t > killed_at]
    a_restart = max(min(t for t, v in restored if v == a) for a in group_a)
    b_last = max(t for t, v in restored if v not in group_a)
    assert a_restart < b_last - 4.0  # the 8 restarted with the job, seconds before its input ended
    second = diagnoses(tmp_path / "out2")
    assert {d["vin"] for d in second} >= group_a
    assert len({d["event_id"] for d in second}) == len(second)


def test_a_job_resumed_at_concurrency_1_runs_the_events_waiting_in_the_pool(tmp_path: Path) -> None:
    """A run at concurrency 16 is killed while a checkpoint holds 4 vehicles' runs in flight; the job resumed
    with ``--concurrency 1`` (runs one at a time, no run pool) runs them, then the rest of the input.

    It failed at its first restored tick timer ("open() was not called before use": no pool to drain), and
    again at every restart until the restart strategy ended it.
    """
    first = [{"type": "alert", "event_id": f"i-a{v}", "vin": vin(v), "series": "EV-A", "ts": "2026-11-01T08:00:00Z",
              "alert_text": "CAN communication lost", "dtc_codes": ["U0140"]} for v in range(4)]  # fmt: skip
    others = [{**e, "event_id": f"i-b{v}", "vin": vin(100 + v)} for v, e in enumerate(first * 2)]
    again = [{**e, "event_id": f"{e['event_id']}-2", "ts": "2026-11-01T09:00:00Z"} for e in first]
    (tmp_path / "alerts.jsonl").write_text("\n".join(json.dumps(e) for e in first + others + again) + "\n")
    group_a = {e["vin"] for e in first}
    checkpoints = tmp_path / "checkpoints"
    log = CallLog()
    with ModelServer(ServerConfig(latency_ms=3000), log) as server:
        job = run_job(tmp_path / "out1", tmp_path / "alerts.jsonl", server.base_url, 16, "--checkpoint-dir",
                      str(checkpoints), "--checkpoint-interval-ms", "300", "--rate", "2")  # fmt: skip
        kill_once_a_checkpoint_holds(job, checkpoints, log, group_a)
        assert server.stats["ok"] < len(first)  # none of the 4 runs had its second call answered
    with ModelServer(ServerConfig(latency_ms=0)) as server:
        finish(run_job(tmp_path / "out2", tmp_path / "alerts.jsonl", server.base_url, 1,
                       "--checkpoint-dir", str(checkpoints), "--restore", "latest"))  # fmt: skip
    second = diagnoses(tmp_path / "out2")
    ids = [d["event_id"] for d in second]
    assert len(set(ids)) == len(ids)
    assert {e["event_id"] for e in first + again} <= set(ids)  # the waiting runs, and each vehicle's next alert
    for e in first:  # after the one it waited behind
        assert ids.index(e["event_id"]) < ids.index(e["event_id"] + "-2")


def get_json(url: str) -> object:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def test_operator_reports_llm_figures_as_flink_metrics(tmp_path: Path) -> None:
    write_alerts(tmp_path / "alerts.jsonl", vins=20)
    port = free_port()
    rest = f"http://127.0.0.1:{port}"
    names = ["runs", "llm_calls", "tool_calls", "prompt_tokens", "completion_tokens", "model_failures",
             "runs_in_flight", "runs_queued"]  # fmt: skip
    seen: dict[str, float] = {}
    with ModelServer(ServerConfig(latency_ms=50)) as server:
        job = run_job(tmp_path / "out", tmp_path / "alerts.jsonl", server.base_url, 8,
                      "--rate", "8", "--flink-conf", f"rest.port={port}")  # fmt: skip
        deadline = time.monotonic() + 180
        while job.poll() is None and time.monotonic() < deadline and seen.get("runs", 0) < 10:
            time.sleep(0.5)
            try:
                jobs = get_json(f"{rest}/jobs")["jobs"]  # type: ignore[index]
                vertices = get_json(f"{rest}/jobs/{jobs[0]['id']}")["vertices"]  # type: ignore[index]
                vertex = next(v for v in vertices if v["name"].startswith("diagnosis"))
                query = ",".join(f"0.diagnosis.vdoctor.{n}" for n in names)
                got = get_json(f"{rest}/jobs/{jobs[0]['id']}/vertices/{vertex['id']}/metrics?get={query}")
                seen = {m["id"].rsplit(".", 1)[1]: float(m["value"]) for m in got}  # type: ignore[attr-defined]
            except (OSError, KeyError, IndexError, StopIteration, ValueError):
                continue  # the job is still starting
        finish(job)
    assert set(seen) == set(names), seen
    # Read while the job runs (counters move between reads): every run made 2 calls and 1 tool call.
    assert seen["runs"] >= 10 and seen["model_failures"] == 0
    assert abs(seen["llm_calls"] - 2 * seen["runs"]) <= 2 and abs(seen["tool_calls"] - seen["runs"]) <= 1
    assert seen["prompt_tokens"] >= seen["llm_calls"] > 0 and seen["completion_tokens"] >= seen["llm_calls"]

"""The job's metrics as Prometheus scrapes them, from a real running job; and the dashboard's queries against them.

``vdoctor run --metrics-port`` turns on Flink's Prometheus reporter on the
MiniCluster. The test reads ``/metrics`` over HTTP while a replay runs and
keeps the last scrape: every metric issue 17 lists must be there (with the
numbers the input implies where they are certain), and every metric a query
of docker/grafana/dashboards/vdoctor.json names must be one the job exports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from devtools.browser import free_port
from devtools.prometheus import UNREACHABLE, scrape
from tests.conftest import REPO_ROOT
from vdoctor.errors import EventError
from vdoctor.events import parse_event

pytestmark = pytest.mark.e2e

DEMO = REPO_ROOT / "data" / "demo" / "alerts.jsonl"
DASHBOARD = REPO_ROOT / "docker" / "grafana" / "dashboards" / "vdoctor.json"
OP = "flink_taskmanager_job_task_operator_vdoctor_"
# Issue 17's list, by exported name: runs, runs in flight and queued, model calls, failures and latency
# (histogram), tokens, recall latency (histogram) and recalled counts, L3 write latency and failures,
# summary-fidelity counters, dead letters by stage.
COUNTERS = ["runs", "duplicates", "llm_calls", "tool_calls", "model_failures", "prompt_tokens", "completion_tokens",
            "recalled_own", "recalled_similar", "l3_writes", "l3_write_failures", "l3_late_writes",
            "l3_cases_lost"]  # fmt: skip
GAUGES = ["runs_in_flight", "runs_queued", "model_calls_waiting", "runs_per_second", "summaries_checked",
          "summaries_passed_first_time", "summaries_repaired", "summaries_retried", "summary_fidelity_failed",
          "malloc_trims", "malloc_trim_ms", "malloc_trim_released_mb"]  # fmt: skip
HISTOGRAMS = ["model_latency_ms", "run_latency_ms", "recall_latency_us", "l3_write_latency_us", "l3_embed_latency_us"]


def scrape_until_done(port: int, job: subprocess.Popen[bytes]) -> None:
    """Scrape the endpoint back to back until the job ends."""
    while job.poll() is None:
        try:
            scrape(port)
        except UNREACHABLE:
            time.sleep(0.05)


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    """The sum over subtasks. PyFlink reports a Python function fused into another operator's chain under
    both operators' names (the same value twice in one task), so each task and subtask counts once."""
    per_task: dict[tuple[str, str], float] = {}
    for lab, v in samples.get(name, []):
        if all(lab.get(k) == x for k, x in labels.items()):
            key = (lab.get("task_name", ""), lab.get("subtask_index", ""))
            per_task[key] = max(per_task.get(key, v), v)
    return sum(per_task.values())


def flink_errors(folder: Path, last: int = 40) -> str:
    """The last ERROR and FATAL lines, with what follows each (a stack trace), of the Flink logs in ``folder``."""
    lines: list[str] = []
    for path in sorted(folder.glob("*.log")):
        keep = False
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if " ERROR " in line or " FATAL " in line:
                keep = True
            elif line[:4].isdigit():  # the next record, not an ERROR's trace
                keep = False
            if keep:
                lines.append(line)
    return "\n".join(lines[-last:]) or "(none)"


def valid_demo_lines(n: int) -> list[str]:
    """The first n lines of the demo fleet the parser accepts (the test's own bad lines are then the only ones)."""
    out = []
    for line in DEMO.read_text(encoding="utf-8").splitlines():
        try:
            parse_event(line)
        except EventError:
            continue
        out.append(line)
    return out[:n]


def resent(lines: list[str]) -> int:
    """How many of ``lines`` are an event sent again: the vehicle's, id's and time's of an earlier line."""
    keys = [(e["vin"], e["event_id"], e["ts"]) for e in map(json.loads, lines)]
    return len(keys) - len(set(keys))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the replay below: its input, outputs, and its Flink JVM's log (``flink-log``)."""
    return tmp_path_factory.mktemp("metrics")


@pytest.fixture(scope="module")
def scraped(work: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The last scrape of a replay's endpoint before the job ends."""
    lines = [
        "{not json",  # parse
        json.dumps({"type": "alert", "vin": "TOO-SHORT"}),  # validate
        json.dumps(
            {
                "type": "recheck",
                "event_id": "r-x",
                "vin": "LSVAU2180N2183294",  # process: unknown session
                "session_id": "LSVAU2180N2183294-20200101T000000",
                "ts": "2026-09-01T00:00:00Z",
                "recheck_ok": True,
            }
        ),
        *valid_demo_lines(400),
    ]
    # The first alert sent again (dropped, counted), and another alert under its id (a process dead letter), early:
    # a run that ends just before the job does may never be scraped.
    again = json.loads(lines[3])
    later = datetime.fromisoformat(again["ts"]) + timedelta(hours=1)
    lines[4:4] = [json.dumps(again), json.dumps({**again, "ts": later.strftime("%Y-%m-%dT%H:%M:%SZ")})]
    alerts = work / "alerts.jsonl"
    alerts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    port = free_port()
    # The job's output goes to a file, read at the end: a pipe read only at the end fills and blocks the job.
    # Its Flink JVM logs to work/flink-log, whose errors a failure shows.
    log_path, flink_log = work / "job.log", work / "flink-log"
    with log_path.open("wb") as log:
        job = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(work / "out"),
             "--memory", f"sqlite:///{work}/memory.db", "--knowledge", "memory://", "--concurrency", "8",
             "--rate", "40", "--metrics-port", str(port)],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            # A trim every second (the default is a minute), so that this short run makes some.
            env={**os.environ, "FLINK_LOG_DIR": str(flink_log), "VDOCTOR_MALLOC_TRIM_S": "1"},
        )  # fmt: skip
    # A task's metrics leave the endpoint when the task finishes: the bounded file source, the throttle and the
    # parser end once the last line is read, while the diagnoses still run. Prometheus keeps each series' last
    # sample too, so every series keeps the latest value any scrape gave it.
    latest: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    deadline = time.monotonic() + 300
    # Three more scrapers, back to back, as several Prometheus servers and a dashboard would: a reporter that
    # read Python gauges from its HTTP thread crashed the JVM under this load (operators/metrics.py).
    hammers = [threading.Thread(target=scrape_until_done, args=(port, job), daemon=True) for _ in range(3)]
    for t in hammers:
        t.start()
    try:
        while job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                now = scrape(port)
            except UNREACHABLE:
                continue
            for name, samples in now.items():
                for labels, value in samples:
                    latest[(name, tuple(sorted(labels.items())))] = value
    finally:
        if job.poll() is None:
            job.kill()
        job.wait(timeout=60)
        for t in hammers:
            t.join(timeout=30)
    output = log_path.read_text(encoding="utf-8", errors="replace")
    assert job.returncode == 0, f"{output[-3000:]}\nthe Flink log's errors:\n{flink_errors(flink_log)}"
    assert latest, f"the job never served metrics on port {port}:\n{output[-3000:]}"
    last: dict[str, list[tuple[dict[str, str], float]]] = {}
    for (name, label_items), value in latest.items():
        last.setdefault(name, []).append((dict(label_items), value))
    return last


def test_every_listed_metric_is_exported_by_the_running_job(
    scraped: dict[str, list[tuple[dict[str, str], float]]],
) -> None:
    missing = [n for n in COUNTERS + GAUGES if OP + n not in scraped]
    missing += [n for n in HISTOGRAMS if OP + n not in scraped or OP + n + "_count" not in scraped]
    missing += [
        f"stage_dead_letters{{stage={s}}}"
        for s in ("parse", "validate", "process")
        if not any(lab.get("stage") == s for lab, _ in scraped.get(OP + "stage_dead_letters", []))
    ]
    assert missing == [], f"not exported: {missing}; vdoctor metrics seen: {sorted(k for k in scraped if OP in k)}"


def test_the_numbers_follow_the_input(scraped: dict[str, list[tuple[dict[str, str], float]]]) -> None:
    runs = total(scraped, OP + "runs")
    assert runs >= 50
    # The offline model makes at least one call per alert; every run of an alert has a latency sample.
    assert total(scraped, OP + "llm_calls") >= total(scraped, OP + "run_latency_ms_count") > 0
    assert total(scraped, OP + "prompt_tokens") > 0 and total(scraped, OP + "model_failures") == 0
    # Histograms come as summaries (the reporter of Flink 2.3: quantiles 0.5 to 0.999), in order.
    quantiles = {lab["quantile"]: v for lab, v in scraped[OP + "run_latency_ms"]}
    assert set(quantiles) == {"0.5", "0.75", "0.95", "0.98", "0.99", "0.999"}
    assert 0 < quantiles["0.5"] <= quantiles["0.95"] <= quantiles["0.999"]
    # Sessions open with a recall, conclusions are written, every summary is checked.
    assert total(scraped, OP + "recall_latency_us_count") > 0
    assert total(scraped, OP + "l3_writes") > 0 and total(scraped, OP + "l3_write_failures") == 0
    assert total(scraped, OP + "l3_late_writes") == 0 and total(scraped, OP + "l3_cases_lost") == 0
    assert total(scraped, OP + "summaries_checked") > 0
    # The process's malloc trimmer ran (every second here).
    assert total(scraped, OP + "malloc_trims") > 0
    # One bad line of each stage went in first, and an alert under another's id (a process dead letter).
    for stage, letters in (("parse", 1), ("validate", 1), ("process", 2)):
        assert total(scraped, OP + "stage_dead_letters", stage=stage) == letters, stage
    # The demo fleet's own resent alerts among the lines replayed, and the first one resent.
    assert total(scraped, OP + "duplicates") == resent(valid_demo_lines(400)) + 1


def dashboard_metrics() -> dict[str, set[str]]:
    """Every query of the dashboard, with the metric names it reads."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    return {q: set(re.findall(r"\bflink_[a-zA-Z0-9_:]+", q)) for q in queries}


def test_every_dashboard_query_names_a_metric_the_job_exports(
    scraped: dict[str, list[tuple[dict[str, str], float]]],
) -> None:
    queries = dashboard_metrics()
    assert len(queries) >= 12 and all(queries.values()), "every query reads at least one flink_ metric"
    unknown = {q: sorted(names - set(scraped)) for q, names in queries.items() if names - set(scraped)}
    assert unknown == {}
    # Label filters and groupings name labels the samples carry.
    for query in queries:
        for label in re.findall(r"by \((\w+)\)", query) + re.findall(r"\{(\w+)=~?", query):
            name = next(iter(queries[query]))
            assert all(label in lab for lab, _ in scraped[name]), (query, label)


def test_the_operators_python_log_records_reach_the_flink_log_at_info(
    scraped: dict[str, list[tuple[dict[str, str], float]]], work: Path
) -> None:
    # Thread mode hands Python's records to the JVM's log4j, each under its file and line. The trimmer says
    # at INFO when it starts, in the diagnosis operator's open().
    logs = "".join(p.read_text(encoding="utf-8", errors="replace") for p in (work / "flink-log").glob("*.log"))
    started = [line for line in logs.splitlines() if "giving free memory back to the system every 1 s" in line]
    assert started, "the operators' INFO records are not in the Flink log"
    assert " INFO " in started[0] and "vdoctor/malloc_trim.py:" in started[0]

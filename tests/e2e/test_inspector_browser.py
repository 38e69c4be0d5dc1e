"""The memory inspector in a real browser, over a store filled by a real replay of the demo.

The demo fleet goes through the PyFlink job (``vdoctor run``, one vehicle at a
time so that every run fills the store the same way); ``vdoctor serve`` runs
as a real process on a free port; Debian's Chromium, driven by Playwright,
opens each page. What the pages show is checked against the store, the job's
output and the replay file; the recall explainer's chosen cases against
``vdoctor memory recall --json``. Screenshots go to ``out/screenshots/``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.browser import (
    CHROMIUM,
    Served,
    busiest_opening,
    chromium,
    free_port,
    inspector,
    jsonl,
    richest_vehicle,
    serve_command,
)
from tests.conftest import REPO_ROOT
from vdoctor.memory.check import check_stored
from vdoctor.stores import open_store
from vdoctor.stores.audit import audit_reads
from vdoctor.stores.base import MemoryStore

pytestmark = pytest.mark.e2e

DEMO = REPO_ROOT / "data" / "demo" / "alerts.jsonl"
SHOTS = REPO_ROOT / "out" / "screenshots"
TOKEN = "e2e-inspector-token-0123456789"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert Path(CHROMIUM).is_file(), "Debian's chromium is missing: bash scripts/install/chromium.sh"
    out = tmp_path_factory.mktemp("inspector-demo")
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(DEMO), "--out", str(out),
         "--memory", f"sqlite:///{out}/memory.db", "--concurrency", "1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def store(demo: Path) -> Iterator[MemoryStore]:
    s = open_store(f"sqlite:///{demo}/memory.db", read_only=True)
    yield s
    s.close()


@pytest.fixture(scope="module")
def served(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with inspector(f"sqlite:///{demo}/memory.db", log, diagnoses=str(demo)) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as context:
        yield context


def _open(browser: Any, url: str, shot: str | None = None) -> Any:
    page = browser.new_page()
    answer = page.goto(url)
    assert answer is not None and answer.status == 200, (url, answer and answer.status)
    if shot:
        page.screenshot(path=str(SHOTS / shot), full_page=True)
    return page


def _rows(page: Any, selector: str) -> list[dict[str, str]]:
    return [
        {k: row.get_attribute(f"data-{k}") or "" for k in ("vin", "session", "outcome", "kind", "reason")}
        for row in page.locator(selector).all()
    ]


def test_fleet_page_shows_the_store_and_the_jobs_output(served: Served, browser: Any, store: MemoryStore,
                                                         demo: Path) -> None:  # fmt: skip
    page = _open(browser, served.url + "/", "fleet.png")
    counts = audit_reads(store).fleet_counts()
    assert int(page.locator("#count-records").inner_text()) == store.count() == counts.records
    assert int(page.locator("#count-vehicles").inner_text()) == counts.vehicles
    assert int(page.locator("#count-archived").inner_text()) == counts.archived_versions > 0
    verified = counts.final_with_recheck(True)
    assert page.locator("#verified-share").inner_text() == f"{100 * verified / counts.final:.1f}%"
    dead = Counter(d["stage"] for d in jsonl(demo / "dead_letters.jsonl"))
    shown = {r.locator("td.stage").inner_text(): int(r.locator("td.num").inner_text())
             for r in page.locator("#dead-letters-by-stage tr").all()[1:]}  # fmt: skip
    assert shown == dict(dead) and sum(dead.values()) == 8
    assert int(page.locator("#diagnoses").inner_text()) == len(jsonl(demo / "diagnoses.jsonl"))
    newest = audit_reads(store).recent(20)
    links = page.locator("#recent a.vin").all_inner_texts()
    assert links == [r.vin for r in newest]


def test_the_vehicle_timeline_follows_the_replay_file(served: Served, browser: Any, store: MemoryStore,
                                                       demo: Path) -> None:  # fmt: skip
    vin = richest_vehicle(store)
    page = _open(browser, f"{served.url}/vehicles/{vin}", "vehicle.png")
    entries = page.locator("#timeline li").all()
    shown = [(e.get_attribute("data-kind"), e.get_attribute("data-session"), e.locator("time").inner_text())
             for e in entries]  # fmt: skip
    records = {r.session_id: r for r in store.history(vin)}
    # From the job's output: every concluded session is a record of its own, or merged into one.
    concluded = [d for d in jsonl(demo / "diagnoses.jsonl") if d["vin"] == vin and d["phase"] == "CONCLUDED"]
    for d in concluded:
        sid = d["session_id"]
        if sid in records:
            assert ("concluded", sid) in [(k, s) for k, s, _ in shown], sid
        else:
            [holder] = [r for r in records.values() if sid in r.merged_sessions]
            assert ("merged", holder.session_id) in [(k, s) for k, s, _ in shown], sid
    # From the replay file: each recheck of the vehicle's sessions, at its event time.
    sessions = {d["session_id"] for d in concluded}
    rechecks = [e for e in jsonl(DEMO) if e.get("type") == "recheck" and e.get("session_id") in sessions]
    assert rechecks, "the richest vehicle has rechecks"
    shown_rechecks = sorted(t for k, _, t in shown if k == "recheck")
    assert shown_rechecks == sorted({e["ts"][:16].replace("T", " ") for e in rechecks})
    assert len(entries) == len(concluded) + len(shown_rechecks)
    versions = audit_reads(store).versions(vin)
    assert page.locator("table.versions tr.archived").count() == sum(not v.current for v in versions) > 0


def test_a_scrapped_vehicle_shows_its_soft_delete(served: Served, browser: Any, store: MemoryStore) -> None:
    lifecycle = [e for e in jsonl(DEMO) if e.get("type") == "lifecycle"]
    with_records = [e for e in lifecycle if store.history(e["vin"])]
    assert with_records
    event = with_records[0]
    page = _open(browser, f"{served.url}/vehicles/{event['vin']}")
    invalidated = [e for e in page.locator("#timeline li").all() if e.get_attribute("data-kind") == "invalidated"]
    times = {e.locator("time").inner_text() for e in invalidated}
    assert times == {event["ts"][:16].replace("T", " ")}
    assert len(invalidated) == len(store.history(event["vin"]))


def test_a_case_shows_its_summary_source_and_fidelity(served: Served, browser: Any, store: MemoryStore) -> None:
    vin = richest_vehicle(store)
    record = next(r for r in store.history(vin) if r.merged_sessions)
    page = _open(browser, f"{served.url}/vehicles/{vin}/cases/{record.session_id}", "case.png")
    assert page.locator("#summary").inner_text() == record.summary
    _, report = check_stored(store, vin, record.session_id, record.summary)
    verdict = page.locator("#fidelity-verdict").inner_text()
    assert verdict.startswith("faithful" if report.ok else "NOT faithful")
    assert page.locator("#readings-count").inner_text().startswith(
        f"{report.readings_checked} checked, {report.readings_stated} stated, {report.readings_omitted}"
    )
    assert page.locator("#root-cause").inner_text() == record.root_cause
    assert page.locator("#required li").count() > 0 and page.locator("#events tr").count() > 1
    # A session merged into the record: its page is the record's.
    merged = record.merged_sessions[0]
    moved = _open(browser, f"{served.url}/vehicles/{vin}/cases/{merged}")
    assert moved.url.endswith(f"/cases/{record.session_id}")


def test_the_recall_explainer_chooses_what_memory_recall_json_chooses(served: Served, browser: Any,
                                                                       demo: Path) -> None:  # fmt: skip
    alert, diagnosis = busiest_opening(demo / "diagnoses.jsonl", DEMO)
    vin, at, codes = alert["vin"], alert["ts"], alert["dtc_codes"]
    cli = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "memory", "recall", "--vin", vin, "--symptom", alert["alert_text"],
         "--codes", *codes, "--as-of", at, "--json", "--memory", f"sqlite:///{demo}/memory.db"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    assert expected["own"] and expected["similar"]
    query = urllib.parse.urlencode({"symptom": alert["alert_text"], "codes": " ".join(codes), "at": at})
    page = _open(browser, f"{served.url}/vehicles/{vin}/recall?{query}", "recall.png")
    own = [(r["vin"], r["session"]) for r in _rows(page, "#own tr") if r["outcome"] == "chosen"]
    similar = [(r["vin"], r["session"]) for r in _rows(page, "#candidates tr") if r["outcome"] == "chosen"]
    assert own == [(r["vin"], r["session_id"]) for r in expected["own"]]
    assert sorted(similar) == sorted((r["vin"], r["session_id"]) for r in expected["similar"])
    assert int(page.locator("#tokens").inner_text()) == expected["tokens"]
    assert page.locator("#block").inner_text() == expected["text"]
    assert page.locator("#candidates tr[data-outcome]").count() <= 20
    assert page.locator("#removed-counts tr[data-reason]").count() >= 2
    with urllib.request.urlopen(f"{served.url}/api/vehicles/{vin}/recall?{query}") as answer:
        api = json.load(answer)
    assert {k: api[k] for k in expected} == expected
    # Replayed one vehicle at a time, the session was given exactly this when it opened (recall in event time).
    assert (expected["own"], expected["similar"]) == (diagnosis["memory"]["own"], diagnosis["memory"]["similar"])


def _status(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_only_get_and_head_are_answered(served: Served, store: MemoryStore) -> None:
    vin = richest_vehicle(store)
    before = store.count()
    for path in ("/", f"/vehicles/{vin}", f"/api/vehicles/{vin}", "/static/style.css"):
        assert _status(served.url + path, "HEAD") == 200
        for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            assert _status(served.url + path, method) == 405, (method, path)
    assert store.count() == before


def test_bound_beyond_loopback_it_needs_the_token(demo: Path, browser: Any, tmp_path: Path) -> None:
    memory = f"sqlite:///{demo}/memory.db"
    refused = subprocess.run(serve_command(memory, free_port(), host="0.0.0.0"), cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert refused.returncode == 2 and "needs a token" in refused.stderr
    log = tmp_path / "serve.log"
    with inspector(memory, log, host="0.0.0.0", env={"VDOCTOR_SERVE_TOKEN": TOKEN}, token=None) as s:
        for path in ("/", "/api/", "/static/style.css", "/vehicles/LRWE2B3D6NB938393"):
            assert _status(s.url + path) == 401, path
        assert _status(s.url + "/api/", headers={"Authorization": f"Bearer {TOKEN}"}) == 200
        page = browser.new_page()
        assert page.goto(s.url + "/").status == 401
        assert "needs its token" in page.content()
        answer = page.goto(f"{s.url}/?token={TOKEN}")
        assert answer.status == 200 and TOKEN not in page.url  # the cookie stands for it from now on
        assert page.locator("#count-records").inner_text().isdigit()
        page.screenshot(path=str(SHOTS / "token.png"))
        assert page.goto(s.url + "/api/").status == 200
        page.close()
    text = log.read_text(encoding="utf-8")
    assert "GET / 401" in text and "GET / 303" in text and TOKEN not in text

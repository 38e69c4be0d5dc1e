"""A case the store refused is written by the job's retry timer, the vehicle silent meanwhile.

The real job on the local MiniCluster reads a Kafka topic (an unbounded source: processing-time timers fire)
and keeps long-term memory in a real MariaDB behind a TCP proxy that the test takes down. A vehicle's concluding
alert comes while the store is down: its diagnosis says the case was not written. The store comes back and the
vehicle sends nothing more: the case must reach MariaDB anyway (it waited for the vehicle's next alert, and a
vehicle silent past its session state's TTL lost it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.conftest import write_events
from tests.integration.events import A, B, alert
from tests.integration.test_kafka_job import _cli, _start_job, _stop
from tests.integration.test_store_outage import Proxy
from tests.services.kafka_flink import KafkaBroker, read_topic
from tests.services.mariadb import MariaDB
from vdoctor.stores import open_store

pytestmark = pytest.mark.integration


def _history(url: str, vin: str) -> list[str]:
    store = open_store(url)
    try:
        return [r.session_id for r in store.history(vin)]
    finally:
        store.close()


def test_a_case_the_store_refused_reaches_it_by_the_retry_timer(
    kafka: KafkaBroker,
    topics: dict[str, str],
    mariadb: MariaDB,
    mariadb_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = Proxy(mariadb.port)
    through_proxy = mariadb_url.replace(f":{mariadb.port}/", f":{proxy.port}/")
    # Writes give up after a second of an outage; a waiting case is tried every 2 s (600 s by default).
    monkeypatch.setenv("VDOCTOR_STORE_RETRY_S", "1")
    monkeypatch.setenv("VDOCTOR_CASE_RETRY_S", "2")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = _start_job(kafka, topics, tmp_path, "--memory", through_proxy, "--concurrency", "4")

    def send(name: str, event: dict[str, object]) -> None:
        alerts = write_events(tmp_path / f"{name}.jsonl", [event])
        assert _cli("replay", "--bootstrap", kafka.bootstrap, "--topic", topics["alerts"], "--quiet",
                    "--alerts", str(alerts)).returncode == 0  # fmt: skip

    try:
        # B's case is written while the store is up: the job is running.
        send("b", alert("e-b", B, "EV-A", "2026-11-01T07:00:00Z", 160))
        [first] = read_topic(kafka.bootstrap, topics["diagnoses"], expect=1, timeout_s=240)
        assert json.loads(first[1])["flags"] == [], (tmp_path / "job.log").read_text()[-3000:]

        proxy.down()
        send("a", alert("e-a", A, "EV-A", "2026-11-01T08:00:00Z", 187))
        diagnoses = read_topic(kafka.bootstrap, topics["diagnoses"], expect=2, timeout_s=240)
        [refused] = [json.loads(v) for _, v in diagnoses if json.loads(v)["vin"] == A]
        assert refused["phase"] == "CONCLUDED" and "l3_write_failed" in refused["flags"]
        assert _history(mariadb_url, A) == []

        proxy.up()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not _history(mariadb_url, A):
            time.sleep(1)
        assert _history(mariadb_url, A) == [refused["session_id"]], (tmp_path / "job.log").read_text()[-3000:]
        # No output for the retry: the vehicle's diagnoses are the two alerts'.
        everything = read_topic(kafka.bootstrap, topics["diagnoses"], expect=10, timeout_s=5, committed_only=False)
        assert sorted(json.loads(v)["event_id"] for _, v in everything) == ["e-a", "e-b"]
    finally:
        _stop(job)
        proxy.down()

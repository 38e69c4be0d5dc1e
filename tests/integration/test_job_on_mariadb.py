"""The demo fleet through the real PyFlink job with long-term memory in a real MariaDB.

The same job as the e2e demo test, but ``--memory mysql://...``: every concluded
session lands in MariaDB, every recheck of the replay finds its record there
(an unknown one would be a dead letter), and recall reads verified similar
cases back through the mysql dialect without crossing vehicles.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from vdoctor.stores import open_store

pytestmark = pytest.mark.integration

DEMO = REPO_ROOT / "data" / "demo"


def _lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_demo_replay_with_memory_in_mariadb(mariadb_url: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # the user's cache folder, where a server store's job keeps its query vectors
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(DEMO / "alerts.jsonl"), "--out", str(tmp_path),
         "--memory", mariadb_url],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )  # fmt: skip
    password = mariadb_url.split(":")[2].split("@")[0]
    assert password not in proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = json.loads((DEMO / "expected.json").read_text())
    diags = _lines(tmp_path / "diagnoses.jsonl")
    assert not [d for d in diags if "l3_write_failed" in d["flags"] or d["memory"]["degraded"]]
    # Every recheck in the replay named a session that MariaDB knew: only the malformed lines are dead.
    assert len(_lines(tmp_path / "dead_letters.jsonl")) == expected["malformed"]

    store = open_store(mariadb_url)
    try:
        records = [r for vin in {d["vin"] for d in diags} for r in store.history(vin)]
        assert store.count() == len(records)
    finally:
        store.close()
    # Every concluded session is held by exactly one record: its own, or the one it was merged into
    # (the same fault of the same vehicle within 30 days).
    held = [r.session_id for r in records] + [m for r in records for m in r.merged_sessions]
    assert sorted(held) == sorted(expected["concluded_sessions"])
    assert sum(1 for d in diags if d["memory"]["similar"]) > 0  # similar cases came back from MariaDB
    for d in diags:
        assert all(ref["vin"] == d["vin"] for ref in d["memory"]["own"])
        assert all(ref["vin"] != d["vin"] for ref in d["memory"]["similar"])
    # Every session opened asked for a query vector; the ones the model embedded were kept for the next run.
    with closing(sqlite3.connect(cache / "vdoctor" / "query-vectors")) as kept:
        assert kept.execute("SELECT COUNT(*) FROM query_vectors").fetchone()[0] > 0

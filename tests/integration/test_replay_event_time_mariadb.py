"""The event-time fleet through the PyFlink job with long-term memory in a real MariaDB.

The same file and the same checks as tests/e2e/test_replay_event_time.py,
through the mysql backend: the as-of filters run in MariaDB's SQL. In file
order every session whose past precedes it gets exactly what was true when it
opened; with many vehicles in flight nothing from a session's future is
recalled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.fleets import event_time as fleet

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("concurrency", [1, 64])
def test_no_session_recalls_its_future_with_memory_in_mariadb(
    mariadb_url: str, tmp_path: Path, concurrency: int
) -> None:
    events = fleet.write(tmp_path / "fleet.jsonl")
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(tmp_path / "fleet.jsonl"), "--out", str(tmp_path),
         "--memory", mariadb_url, "--concurrency", str(concurrency)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "VDOCTOR_INJECTION_BUDGET_TOKENS": str(fleet.BUDGET)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    diags = [json.loads(x) for x in (tmp_path / "diagnoses.jsonl").read_text().splitlines()]
    assert (tmp_path / "dead_letters.jsonl").read_text() == ""
    pairs = fleet.check_recalls(diags, events, exact=concurrency == 1)
    assert pairs >= (20 if concurrency == 1 else 1)

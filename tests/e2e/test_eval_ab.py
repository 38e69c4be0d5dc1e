"""`vdoctor eval ab` on the MiniCluster: both arms, a report and a chart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.e2e.test_replay_job import EVENTS

pytestmark = pytest.mark.e2e


def test_memory_on_needs_fewer_tool_calls_and_report_is_written(tmp_path: Path) -> None:
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text("\n".join(e if isinstance(e, str) else json.dumps(e, ensure_ascii=False) for e in EVENTS) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "eval", "ab", "--alerts", str(alerts), "--out", str(tmp_path / "ab"),
         "--knowledge", "memory://"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "ab" / "ab_report.md").read_text()
    # Worked out by hand from EVENTS: off, every session looks its code up (A's second session twice):
    # 2+2+2+2+4 = 12 tool calls over 5 sessions; on, B's second session and A's second session use
    # verified memory instead of lookups: 2+2+1+2+2 = 9.
    assert "| tool calls per session | 2.40 | 1.80 |" in report
    assert "| sessions (concluded) | 5 (5) | 5 (5) |" in report
    png = (tmp_path / "ab" / "ab_report.png").read_bytes()
    assert png.startswith(b"\x89PNG")

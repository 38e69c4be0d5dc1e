"""``vdoctor run`` whose local Flink JVM dies mid-replay: one line that says so and where the JVM's log is, exit 1.

Before, py4j logged a traceback for every call that found the JVM gone and for
every Java object it then failed to release (500 to 1,700 lines), and the line
that mattered was not among them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

DEMO = REPO_ROOT / "data" / "demo" / "alerts.jsonl"


def java_children(pid: int) -> list[int]:
    """The JVMs this process started (PyFlink's gateway, which hosts the local MiniCluster)."""
    found = subprocess.run(["pgrep", "-P", str(pid), "java"], capture_output=True, text=True).stdout
    return [int(p) for p in found.split()]


def test_a_killed_jvm_ends_the_run_with_one_line_naming_its_log(tmp_path: Path) -> None:
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text("".join(DEMO.read_text(encoding="utf-8").splitlines(keepends=True)[:400]), encoding="utf-8")
    log_dir = tmp_path / "flink-log"
    job = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(tmp_path / "out"),
         "--memory", f"sqlite:///{tmp_path}/memory.db", "--knowledge", "memory://", "--rate", "20"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "FLINK_LOG_DIR": str(log_dir)},
    )  # fmt: skip
    try:
        # Kill the JVM once it has sent a result: the replay (20 lines/s) is then well under way.
        out = tmp_path / "out" / "diagnoses.jsonl"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and job.poll() is None:
            if out.exists() and out.stat().st_size > 0 and java_children(job.pid):
                break
            time.sleep(0.2)
        jvms = java_children(job.pid)
        assert job.poll() is None and jvms, "the run ended, or never started its JVM, before it could be killed"
        for pid in jvms:
            os.kill(pid, signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 1, stderr[-3000:]
    assert "vdoctor run: the local Flink JVM stopped during the run" in stderr
    assert f"flink-*-python-*.log in {log_dir}" in stderr
    assert list(log_dir.glob("flink-*-python-*.log")), "the JVM logged elsewhere than the folder the line names"
    assert "Traceback" not in stderr and "py4j" not in stderr, stderr[-3000:]
    assert "vdoctor run summary" not in stdout

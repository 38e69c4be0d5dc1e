"""The PyFlink job of `vdoctor run` over a JSONL file of events, on the local MiniCluster, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.conftest import REPO_ROOT


def run_file_job(
    events: list[dict], out: Path, env: Mapping[str, str | None] | None = None
) -> tuple[list[dict], list[dict]]:
    """Diagnoses and dead letters of ``events`` (written to ``out/alerts.jsonl``), one call at a time, on a sqlite
    store in ``out``; ``env``: variables set (None: unset) over this process's environment."""
    out.mkdir(parents=True, exist_ok=True)
    alerts = out / "alerts.jsonl"
    alerts.write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in events) + "\n", encoding="utf-8")
    environment = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(out),
         "--memory", f"sqlite:///{out}/memory.db", "--concurrency", "1"],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]

    def read(name: str) -> list[dict]:
        path = out / name
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []

    return read("diagnoses.jsonl"), read("dead_letters.jsonl")

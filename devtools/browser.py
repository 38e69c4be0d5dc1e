"""A real browser and a real ``vdoctor serve`` process, for the inspector's tests and its README screenshots.

The browser is Debian's Chromium (``scripts/install/chromium.sh``) driven by
Playwright for Python through its executable: Playwright's own browser
download is not needed. Flags: headless, no sandbox (tests run as root), and
none of Chromium's background connections (a closed network refuses them).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdoctor.stores.audit import audit_reads
from vdoctor.stores.base import MemoryStore

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# Pages are laid out for a laptop screen; screenshots are taken at this size.
VIEWPORT = {"width": 1440, "height": 900}
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """A running ``vdoctor serve``: its base URL, process and log file (stdout and stderr)."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def serve_command(memory: str, port: int, *, diagnoses: str | None = None, host: str = "127.0.0.1",
                  token: str | None = None) -> list[str]:  # fmt: skip
    cmd = [sys.executable, "-m", "jobs.cli", "serve", "--memory", memory, "--host", host, "--port", str(port)]
    if diagnoses:
        cmd += ["--diagnoses", diagnoses]
    if token:
        cmd += ["--token", token]
    return cmd


@contextmanager
def inspector(memory: str, log: Path, *, diagnoses: str | None = None, host: str = "127.0.0.1",
              token: str | None = None, env: dict[str, str] | None = None) -> Iterator[Served]:  # fmt: skip
    """Start ``vdoctor serve`` on a free port, wait until it answers, stop it afterwards."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            serve_command(memory, port, diagnoses=diagnoses, host=host, token=token),
            cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )  # fmt: skip
    served = Served(f"http://127.0.0.1:{port}", proc, log)
    try:
        _wait_until_up(served, token)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_until_up(served: Served, token: str | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            raise RuntimeError(f"vdoctor serve exited with {served.proc.returncode}:\n{served.log_text()[-3000:]}")
        try:
            with urllib.request.urlopen(urllib.request.Request(served.url + "/api/", headers=headers), timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"vdoctor serve did not answer within {START_TIMEOUT_S:.0f} s:\n{served.log_text()[-3000:]}")


@contextmanager
def chromium() -> Iterator[Any]:
    """A Playwright browser context in Debian's Chromium, with a fresh user-data folder."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="vdoctor-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, viewport=VIEWPORT  # type: ignore[arg-type]
        )
        try:
            yield context
        finally:
            context.close()


# -- what to show: picked from a replay's store and output, the same way by the tests and the screenshots --


def jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (malformed lines, which the demo has on purpose, left out)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out


def richest_vehicle(store: MemoryStore) -> str:
    """The vehicle with the most archived versions (merges, overturned verdicts), then the most versions."""
    audit = audit_reads(store)

    def richness(vin: str) -> tuple[int, int]:
        versions = audit.versions(vin)
        return sum(not v.current for v in versions), len(versions)

    return max(sorted({r.vin for r in audit.recent(1_000_000)}), key=richness)


def busiest_opening(diagnoses: Path, alerts: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The alert (with trouble codes) that opened the session given the most long-term memory, and its diagnosis.

    Among sessions that did not conclude at their first alert: one that did is, as of its own second,
    already a case in its own history (a change at t holds for T >= t), which its recall never saw.
    """
    by_id = {e["event_id"]: e for e in jsonl(alerts) if e.get("type") == "alert" and "event_id" in e}
    firsts: dict[str, dict[str, Any]] = {}
    for d in jsonl(diagnoses):
        firsts.setdefault(d["session_id"], d)
    opened = [d for d in firsts.values() if d["phase"] == "INVESTIGATING" and by_id[d["event_id"]].get("dtc_codes")]
    best = max(opened, key=lambda d: (len(d["memory"]["own"]) + len(d["memory"]["similar"]), d["event_id"]))
    return by_id[best["event_id"]], best

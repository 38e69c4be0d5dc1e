"""Shared test fixtures and paths."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

# Real services, started once per session by the tests that need them.
from tests.services.doris import doris_url  # noqa: F401
from tests.services.mariadb import mariadb, mariadb_database, mariadb_url  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parent.parent
# Licensed data sets live beside the checkout, never inside it.
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def wait_until(check: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Poll ``check`` every 5 ms until it is true; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)

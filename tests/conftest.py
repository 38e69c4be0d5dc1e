"""Shared test fixtures and paths."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

# Real services, started once per session by the tests that need them.
from tests.services.doris import doris_url  # noqa: F401
from tests.services.mariadb import mariadb, mariadb_database, mariadb_url  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parent.parent


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
# Licensed data sets live beside the checkout, never inside it.
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def wait_until(check: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Poll ``check`` every 5 ms until it is true; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)

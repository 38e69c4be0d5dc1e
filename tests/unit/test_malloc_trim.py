"""The process's malloc trimmer: one shared thread, stopped by its last user, and a real effect on glibc."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vdoctor import malloc_trim
from vdoctor.malloc_trim import TRIM_FIGURES, MallocTrimmer, glibc_trim, shared_trimmer, start_trimming, trim_figures
from vdoctor.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.unit


class CountingTrim:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return 1


@pytest.fixture(autouse=True)
def no_trimmer_left() -> Iterator[None]:
    """A trimmer that a failed test left running does not leak into the next test."""
    yield
    leftover = shared_trimmer()
    if leftover is not None:
        leftover.stop()
        malloc_trim._shared, malloc_trim._users = None, 0


def _trim_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "malloc-trim"]


def test_zero_interval_starts_nothing() -> None:
    trim = CountingTrim()
    leave = start_trimming(0, trim)
    assert shared_trimmer() is None and not _trim_threads()
    leave()
    assert trim.calls == 0


def test_users_share_one_trimmer_and_the_last_to_leave_stops_it() -> None:
    trim = CountingTrim()
    first = start_trimming(0.01, trim)
    second = start_trimming(5.0, CountingTrim())  # the first caller's interval and trim hold
    trimmer = shared_trimmer()
    assert trimmer is not None and trimmer.interval_s == 0.01
    assert len(_trim_threads()) == 1
    deadline = time.monotonic() + 5
    while trimmer.trims < 2 and time.monotonic() < deadline:  # the count follows each call's return
        time.sleep(0.01)
    assert trim.calls >= 2 and trim_figures()["malloc_trims"] >= 1
    assert set(trim_figures()) == set(TRIM_FIGURES)
    first()
    first()  # leaving twice counts once
    assert shared_trimmer() is trimmer and _trim_threads()
    second()
    assert shared_trimmer() is None and not _trim_threads()
    assert trim_figures() == dict.fromkeys(TRIM_FIGURES, 0)
    calls = trim.calls
    time.sleep(0.05)
    assert trim.calls == calls  # stopped: no trims after the last user left
    assert trimmer.trims == calls and trimmer.total_ms >= 0


def test_no_malloc_trim_on_the_system_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malloc_trim, "glibc_trim", lambda: None)
    leave = start_trimming(60)
    assert shared_trimmer() is None
    leave()


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        MallocTrimmer(0, CountingTrim())


def test_setting_defaults_to_a_minute_and_zero_turns_it_off() -> None:
    assert load_settings({}).runtime.malloc_trim_s == 60
    assert load_settings({"VDOCTOR_MALLOC_TRIM_S": "0"}).runtime.malloc_trim_s == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim is Linux's")
def test_glibc_trim_gives_free_pages_in_the_middle_of_the_heap_back() -> None:
    """~100 MB freed under live blocks stays resident until the trim, which gives most of it back."""
    assert glibc_trim() is not None
    script = textwrap.dedent(
        """
        from vdoctor.malloc_trim import MallocTrimmer, glibc_trim, resident_mb

        blocks = [bytes(1000) + bytes([i % 256]) for i in range(100_000)]
        kept = blocks[::50]  # live blocks all along the heap: free() cannot shrink its top
        del blocks
        before = resident_mb()
        trimmer = MallocTrimmer(60, glibc_trim())
        trimmer.trim_now()
        print(before, resident_mb(), trimmer.released_mb, len(kept))
        """
    )
    env = {"MALLOC_ARENA_MAX": "2", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    before, after, released, _ = (float(x) for x in out.stdout.split())
    assert before - after > 50, (before, after)
    assert released == pytest.approx(before - after, abs=2)  # what the trimmer reports it gave back

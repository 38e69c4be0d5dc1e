"""Give glibc's free memory back to the system on a schedule (``malloc_trim``).

glibc hands freed memory back to the system by itself only from the top of
its main heap. Pages freed in the middle of a heap, or in another arena, stay
resident until something reuses them. A job whose runs allocate and free on
many threads (sessions parsed and written, records decoded, requests built,
RocksDB's blocks) leaves such pages behind, so its resident memory creeps up
over hours though the memory in use does not. ``malloc_trim(0)`` gives every
free page of every arena back (``madvise``), and the next allocation there
takes a fresh zeroed page.

In thread mode the Python interpreter lives in the TaskManager's JVM, so one
trim covers the whole process: Python's objects, numpy's buffers, SQLite's
pages and RocksDB's native memory alike. The call is made through ``ctypes``,
which releases the GIL: runs go on while it walks the arenas, except when
they allocate in an arena it holds at that moment. In the 30-minute soak's
job (~1.2 GB resident) a trim took 2.3 ms in the first ten minutes and 5.3
ms in the last ten, and gave ~20 MB back; a heap with much free memory in
many small holes takes longer (~170 ms for 1 GB freed in 20,000 holes, ~17
ms to walk them again with nothing left to give back).

One trimmer per process, shared by the operators that ask for one (several
subtasks in one TaskManager); it stops when the last of them closes. On a
system without glibc's ``malloc_trim`` (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# The job's default: resident memory is trimmed once a minute.
DEFAULT_INTERVAL_S = 60.0


def glibc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)`` as a function (1: memory was given back), or None where there is none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


def resident_mb() -> float | None:
    """This process's resident memory in MB (Linux's ``/proc/self/statm``), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


class MallocTrimmer:
    """A daemon thread that calls ``trim`` every ``interval_s`` seconds until stopped."""

    def __init__(self, interval_s: float, trim: Callable[[], int]) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.interval_s = interval_s
        self._trim = trim
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="malloc-trim", daemon=True)
        self.trims = 0
        self.total_ms = 0.0
        # Resident memory given back by the trims, as /proc/self/statm saw it around each one: approximate,
        # since the other threads allocate and free meanwhile.
        self.released_mb = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.trim_now()

    def trim_now(self) -> None:
        before = resident_mb()
        started = time.perf_counter()
        self._trim()
        elapsed_ms = (time.perf_counter() - started) * 1000
        after = resident_mb()
        released = before - after if before is not None and after is not None else 0.0
        self.trims += 1
        self.total_ms += elapsed_ms
        self.released_mb += released
        log.debug("malloc_trim %d: %.1f ms, resident memory %.1f MB lower", self.trims, elapsed_ms, released)


_lock = threading.Lock()
_shared: MallocTrimmer | None = None
_users = 0


def start_trimming(interval_s: float, trim: Callable[[], int] | None = None) -> Callable[[], None]:
    """Join this process's trimmer (started on the first call) and return the call that leaves it.

    ``interval_s`` of 0 or less, or no ``malloc_trim`` on this system: nothing
    starts, and the returned call does nothing. The first caller's interval
    and ``trim`` hold for the process (``trim`` is for tests).
    """
    global _shared, _users
    if interval_s <= 0:
        return _nothing
    with _lock:
        if _shared is None:
            found = trim if trim is not None else glibc_trim()
            if found is None:
                return _nothing
            _shared = MallocTrimmer(interval_s, found)
            _shared.start()
            log.info("giving free memory back to the system every %g s (VDOCTOR_MALLOC_TRIM_S)", interval_s)
        _users += 1
    left = False

    def leave() -> None:
        global _shared, _users
        nonlocal left
        with _lock:
            if left:
                return
            left = True
            _users -= 1
            if _users == 0 and _shared is not None:
                _shared.stop()
                _shared = None

    return leave


def shared_trimmer() -> MallocTrimmer | None:
    """This process's running trimmer, if any (for metrics and tests)."""
    return _shared


# What ``trim_figures`` reports, by metric name.
TRIM_FIGURES = ("malloc_trims", "malloc_trim_ms", "malloc_trim_released_mb")


def trim_figures() -> dict[str, int]:
    """The running trimmer's totals (all 0 without one): trims made, their time and the memory they gave back."""
    trimmer = _shared
    if trimmer is None:
        return dict.fromkeys(TRIM_FIGURES, 0)
    return {
        "malloc_trims": trimmer.trims,
        "malloc_trim_ms": round(trimmer.total_ms),
        "malloc_trim_released_mb": round(trimmer.released_mb),
    }


def _nothing() -> None:
    return None

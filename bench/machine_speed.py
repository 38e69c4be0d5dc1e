"""A fixed reference workload, timed in CPU time: how fast this machine's core runs Python right now.

A shared or virtual machine's core does not run at one speed. A bench that
prints a CPU figure (``bench/engine_cpu.py``) prints this reference beside
it, measured in the same process just before and after, so that a slower
core can be told apart from a slower run. On the 2-core machine the README's
figures come from, the engine's CPU per alert moved by a quarter between
runs a minute apart while this reference stayed within a few per cent: that
spread is not the core's speed at plain Python.

The workload is a small mix of what the engine spends its time on, with no
I/O and no threads: JSON encoding and decoding, regular expressions, string
and dict work, and SQLite statements on an in-memory database. Its result is
the least CPU time of a few repetitions (a repetition that was interrupted
only ever takes longer).

    .venv/bin/python bench/machine_speed.py            # prints the reference in ms
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import time

_WORDS = "coolant temperature high misfire cylinder lean mixture voltage low battery sensor circuit".split()
_CODE = re.compile(r"\b[PBCU][0-9A-F]{4}\b")
REPETITIONS = 5


def _workload() -> int:
    """One repetition (~26 ms of CPU on the development machine); returns a checksum of the work done."""
    total = 0
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, vin TEXT, body TEXT)")
    for i in range(1500):
        words = [_WORDS[(i * 7 + j) % len(_WORDS)] for j in range(12)]
        doc = {"vin": f"VIN{i % 97:05d}", "codes": [f"P0{i % 90 + 10:02d}1", "U0100"], "text": " ".join(words),
               "readings": {w: (i * j) % 113 / 7 for j, w in enumerate(words[:6])}}  # fmt: skip
        body = json.dumps(doc)
        back = json.loads(body)
        total += len(_CODE.findall(body)) + len(back["text"].split())
        counts: dict[str, int] = {}
        for w in back["text"].split():
            counts[w] = counts.get(w, 0) + 1
        total += max(counts.values())
        conn.execute("INSERT INTO t (vin, body) VALUES (?, ?)", (doc["vin"], body))
        if i % 10 == 0:
            total += len(conn.execute("SELECT id FROM t WHERE vin = ? LIMIT 5", (doc["vin"],)).fetchall())
    conn.close()
    return total


def reference_ms(repetitions: int = REPETITIONS) -> float:
    """The least thread CPU time of ``repetitions`` runs of the workload, in ms."""
    best = float("inf")
    for _ in range(repetitions):
        start = time.thread_time()
        _workload()
        best = min(best, time.thread_time() - start)
    return best * 1000


def main() -> int:
    print(f"reference workload: {reference_ms():.1f} ms CPU (lower is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

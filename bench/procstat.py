"""Resident memory and CPU time of a process and all its descendants, from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants, in MB."""
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _cpu_ticks(pid: int) -> int:
    """Clock ticks of CPU (user + system) a process has used so far; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and all its descendants."""
    return sum(_cpu_ticks(p) for p in _tree(pid)) / os.sysconf("SC_CLK_TCK")


def children_cpu_s(pid: int, exclude: set[int] | frozenset[int] = frozenset()) -> float:
    """CPU seconds used so far by a process's descendants (itself left out), but for the children in ``exclude``
    and their own descendants."""
    left_out = {p for c in exclude for p in _tree(c)} | {pid}
    return sum(_cpu_ticks(p) for p in _tree(pid) if p not in left_out) / os.sysconf("SC_CLK_TCK")


def pin_tree(pid: int, cores: set[int]) -> int:
    """Restrict a process, all its threads and all its descendants to ``cores``; how many threads were pinned.

    Affinity is per thread in Linux, and a new thread or child process inherits its creator's: pinning every
    thread of the tree once pins what it starts later too (calling again catches anything that raced with it).
    """
    pinned = 0
    for p in _tree(pid):
        try:
            tids = [int(t.name) for t in Path(f"/proc/{p}/task").iterdir()]
        except OSError:
            continue  # exited meanwhile
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cores)
                pinned += 1
            except OSError:
                continue
    return pinned

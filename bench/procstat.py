"""Resident memory and CPU time of a process and all its descendants, from /proc (Linux)."""

from __future__ import annotations

import os
import re
from pathlib import Path

# A process's children, by parent pid (``process_children``).
Children = dict[int, list[int]]


def process_children() -> Children:
    """Every process's children, by parent pid, as of now: one scan of /proc, which a caller looking at several
    trees at once can share (each scan reads every process's stat)."""
    children: Children = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat_fields(entry / "stat")
        if stat is not None:
            children.setdefault(int(stat[1][1]), []).append(int(entry.name))
    return children


def _tree(pid: int, children: Children | None = None) -> list[int]:
    children = process_children() if children is None else children
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


_DIGITS = re.compile(r"\d+")


def _stat_fields(path: Path) -> tuple[str, list[str]] | None:
    """(name, the fields after it) of a /proc stat file; None if it is gone."""
    try:
        head, tail = path.read_text().rsplit(")", 1)
        return head.split("(", 1)[1], tail.split()
    except (OSError, IndexError, ValueError):
        return None


def _cpu_ticks(pid: int) -> int:
    """Clock ticks of CPU (user + system) a process has used so far; 0 if it is gone."""
    stat = _stat_fields(Path(f"/proc/{pid}/stat"))
    return _ticks(stat[1]) if stat is not None else 0


def _ticks(fields: list[str]) -> int:
    """User + system clock ticks from the fields after the name in a /proc stat file (a process's or a thread's)."""
    return int(fields[11]) + int(fields[12])


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by one process (all its threads), its children left out."""
    return _cpu_ticks(pid) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int, children: Children | None = None) -> float:
    """CPU seconds (user + system) used so far by a process and all its descendants."""
    return sum(_cpu_ticks(p) for p in _tree(pid, children)) / os.sysconf("SC_CLK_TCK")


def tree_cpu_parts(pid: int, children: Children | None = None) -> dict[str, float]:
    """CPU seconds used so far by a process tree, by part: the root's threads by name (digits shown as ``#``:
    a pool's threads are one part; threads that exited are ``(exited threads)``), each descendant process
    whole, by name, as ``child <name>``. The parts sum to ``tree_cpu_s(pid)``."""
    tick = os.sysconf("SC_CLK_TCK")
    parts: dict[str, float] = {}
    for p in _tree(pid, children):
        stat = _stat_fields(Path(f"/proc/{p}/stat"))
        if stat is None:
            continue
        name, fields = stat
        total = _ticks(fields)
        if p != pid:
            key = f"child {_DIGITS.sub('#', name)}"
            parts[key] = parts.get(key, 0.0) + total / tick
            continue
        live = 0
        try:
            tids = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            tids = []
        for task in tids:
            thread = _stat_fields(task / "stat")
            if thread is None:
                continue
            used = _ticks(thread[1])
            live += used
            key = _DIGITS.sub("#", thread[0])
            parts[key] = parts.get(key, 0.0) + used / tick
        if total > live:
            parts["(exited threads)"] = parts.get("(exited threads)", 0.0) + (total - live) / tick
    return parts


def machine_cpu_s() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine so far, summed over its cores (/proc/stat; I/O wait is idle)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is inside user)
    return busy / os.sysconf("SC_CLK_TCK"), idle / os.sysconf("SC_CLK_TCK")


def children_cpu_s(pid: int, exclude: set[int] | frozenset[int] = frozenset()) -> float:
    """CPU seconds used so far by a process's descendants (itself left out), but for the children in ``exclude``
    and their own descendants."""
    left_out = {p for c in exclude for p in _tree(c)} | {pid}
    return sum(_cpu_ticks(p) for p in _tree(pid) if p not in left_out) / os.sysconf("SC_CLK_TCK")


def pin_tree(pid: int, cores: set[int], children: Children | None = None) -> int:
    """Restrict a process, all its threads and all its descendants to ``cores``; how many threads were pinned.

    Affinity is per thread in Linux, and a new thread or child process inherits its creator's: pinning every
    thread of the tree once pins what it starts later too (calling again catches anything that raced with it).
    """
    pinned = 0
    for p in _tree(pid, children):
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


def stalled_s(resource: str, root: Path = Path("/proc/pressure")) -> float | None:
    """Seconds so far in which some task of this machine (or container) waited for ``resource`` ("cpu", "io"
    or "memory"), from Linux's pressure stall information (``/proc/pressure``); None where the kernel keeps
    none. Differences over a trial tell a starved trial from a slow one: the share of its wall time in which
    work was ready but waited for a core, or for the disk."""
    try:
        for line in (root / resource).read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return None
    return None

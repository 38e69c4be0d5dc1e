"""bench/scale_out.py's per-TaskManager pinning: a whole process tree, threads and later children, on its cores."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.procstat import pin_tree, tree_cpu_parts, tree_cpu_s
from bench.scale_out import core_sets, taskmanager_pids, window_of

pytestmark = pytest.mark.unit

# A parent with a second thread and a child process, both started before the pin; then, after a signal on
# stdin, a grandchild started after it. Each reports its affinity on stdout.
_TREE = r"""
import os, subprocess, sys, threading, time
report = lambda who, pid=0: print(who, sorted(os.sched_getaffinity(pid)), flush=True)
seen = {}
def worker():
    seen["tid"] = threading.get_native_id()
    time.sleep(60)
threading.Thread(target=worker, daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
time.sleep(0.3)
print("ready", seen["tid"], child.pid, flush=True)
sys.stdin.readline()
report("parent"); report("thread", seen["tid"]); report("child", child.pid)
late = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                      capture_output=True, text=True).stdout.strip()
print("late", late, flush=True)
child.kill()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to see a pin narrow anything")
def test_pin_tree_pins_every_thread_and_every_later_process() -> None:
    core = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", _TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        ready = proc.stdout.readline().split()
        assert ready[0] == "ready"
        assert pin_tree(proc.pid, {core}) >= 3  # the parent's threads and its child's
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert lines == {who: f"[{core}]" for who in ("parent", "thread", "child", "late")}


def test_pin_tree_of_a_process_gone_pins_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    time.sleep(0.05)
    assert pin_tree(proc.pid, {0}) == 0


def test_core_sets_give_each_taskmanager_its_own_cores() -> None:
    assert core_sets(1, 1) == [{0}]
    assert core_sets(2, 1) == [{0}, {1}]
    cores = os.cpu_count() or 1
    with pytest.raises(SystemExit, match="need"):
        core_sets(cores + 1, 1)


def test_taskmanager_pids_in_start_order(tmp_path: Path) -> None:
    (tmp_path / "flink-user-taskexecutor.pid").write_text("412\n97\n")
    (tmp_path / "flink-user-standalonesession.pid").write_text("5\n")
    assert taskmanager_pids(tmp_path) == [412, 97]


# A parent whose two named threads spin and then stay alive, a third that spins and exits, and a child that
# spins and then sleeps; it prints "done" when all the spinning is over and then waits on stdin.
_SPINNERS = r"""
import ctypes, subprocess, sys, threading, time
def spin(name, spun, hold):
    ctypes.CDLL(None).prctl(15, name.encode())  # PR_SET_NAME: this thread's name in /proc
    # By CPU time, not by a count: the same on a fast or a loaded machine. /proc counts it in clock ticks,
    # given to whoever runs at each tick: on a loaded core 0.15 s was once read as under 0.1 s. 0.3 s leaves
    # the assertions below twice their margin.
    while time.thread_time() < 0.3:
        pass
    spun.set()
    hold.wait()
child = subprocess.Popen(
    [sys.executable, "-c", "import time\nwhile time.process_time() < 0.3: pass\nprint(flush=True)\ntime.sleep(60)"],
    stdout=subprocess.PIPE,
)
hold, gone = threading.Event(), threading.Event()
threads = [threading.Thread(target=spin, args=(f"spin-{i}", threading.Event(), hold)) for i in (1, 2)]
threads.append(threading.Thread(target=spin, args=("gone-1", threading.Event(), gone)))
for t in threads:
    t.start()
for t in threads:
    t._args[1].wait()
gone.set()
threads[2].join()
child.stdout.readline()
print("done", flush=True)
sys.stdin.readline()
hold.set()
child.kill()
"""


def test_tree_cpu_parts_name_threads_and_children_and_sum_to_the_tree() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SPINNERS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "done"
        parts, whole = tree_cpu_parts(proc.pid), tree_cpu_s(proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    # Each loop spins for 0.3 s of its own CPU: the two named threads are one part, the exited one is counted
    # apart, and the child is one part of its own.
    assert parts["spin-#"] >= 0.2
    assert parts["(exited threads)"] >= 0.1
    children = {k: v for k, v in parts.items() if k.startswith("child ")}
    assert len(children) == 1 and next(iter(children.values())) >= 0.1, parts
    assert not any(k.startswith("gone") for k in parts)
    assert abs(sum(parts.values()) - whole) < 0.05


def test_window_of_counts_the_diagnoses_between_its_ends() -> None:
    arrived = [float(t) for t in range(11)]  # one diagnosis a second, 0 .. 10
    assert window_of(arrived, (0.0, 1.0)) == (10, 0.0, 10.0)
    assert window_of(arrived, (0.3, 0.9)) == (6, 3.0, 9.0)
    assert window_of([5.0], (0.0, 1.0)) == (0, 0.0, 0.0)

"""Scale-out: alerts/s of the Kafka job on a standalone cluster, 1 and 2 TaskManagers, thread and process mode.

One invocation runs every configuration over the same fleet, side by side:
a Kafka 4 broker (the jars from `scripts/install/kafka.sh`) holds the fleet
(`scripts/gen_demo.py --vins N`) in an input topic of 4 partitions, produced
once. For each configuration a fresh standalone cluster is started from the
PyFlink wheel's own distribution (JobManager + TaskManagers of the given
slots), the job is submitted with `flink run -py jobs/kafka_job.py` at
parallelism = total slots, reading the topic from the start into fresh output
topics and a fresh memory store, and the diagnoses topic is read back. The
rate is alerts/s from the first diagnosis to the last (start-up left out), or
over a window of the diagnoses (``--window 0.3 0.9``: from the one 30% of the
way through to the one 90% of the way, which leaves out the JVMs' warm-up, as
their JIT compilers run for minutes, and the tail of a finite fleet, which
one TaskManager may finish alone); the first-to-last rate is printed beside.

Configurations (default): thread mode with 1 TaskManager x 1 slot and with
2 TaskManagers x 1 slot; process mode the same; and process mode with 1
TaskManager x 2 slots. Thread mode runs one Python interpreter per
TaskManager JVM, so its slots share one GIL; process mode runs one Python
process per slot.

The model is the offline one (no model latency: each run is pure CPU), so
the figures are CPU per core; the broker, the JobManager and this script
share the same machine.

    .venv/bin/python bench/scale_out.py                      # 1500 vehicles, ~15 minutes on 2 cores
    .venv/bin/python bench/scale_out.py --vins 600 --configs thread:1x1 thread:2x1

Beside the rate, the TaskManagers' CPU (their process trees, Python workers
included) between the first and the last diagnosis is printed as cores used
and CPU per alert: on a machine shared with other work, a second TaskManager
that finds no idle core shows up as the same cores used, not as a job that
does not scale.

``--cores-per-taskmanager N`` gives each TaskManager N cores of its own
(TaskManager i gets cores i*N .. i*N+N-1): its JVM, its Python interpreter and
its embedding child are pinned to them (Linux CPU affinity, as a container's
CPU limit would hold it), while the broker, the JobManager and this script
may run on any core. On a 2-core machine, 1 core per TaskManager measures
what the second TaskManager adds with a core of its own; unpinned, one
TaskManager already spreads over both cores and leaves the second nothing
to add.

Where the CPU goes is printed by part, in CPU ms per alert: the JVMs' threads
by name (thread mode's Python threads among them, named after the JVM thread
that started them), the embedding child, and the cores the JobManager, the
broker and the bench itself used over the same span, and the cores left idle.
``--repeat N`` runs the configurations N times in turn and prints each
round's ratios and their median.

Prints a table with the ratios and writes out/bench/scale_out.{json,png} and
out/bench/scale_out_parts.png (CPU per alert by part, and the machine's cores
by who used them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.procstat import machine_cpu_s, pin_tree, process_children, process_cpu_s, tree_cpu_parts, tree_cpu_s  # noqa: E402
from tests.services.kafka_flink import FlinkCluster, KafkaBroker  # noqa: E402

PARTITIONS = 4
DEFAULT_CONFIGS = ["thread:1x1", "thread:2x1", "process:1x1", "process:2x1", "process:1x2"]
# Process mode: a bundle is sent to the Python worker at least this often
# (the 1000 ms default halves throughput; NOTES.md).
PROCESS_BUNDLE_MS = 10
# The rest of the machine, as CpuSampler records it: the sampler's thread is a part of "this bench", so it is
# printed indented under it and left out of every sum.
SAMPLER = "  its sampler"
# Seconds between CPU samples: each one reads every TaskManager thread's stat (0.05 cores at 0.5 s, 0.03 at 1 s).
SAMPLE_S = 1.0
# How often the bench counts the diagnoses (the topic's end offsets).
POLL_S = 0.1
MACHINE_PARTS = ("JobManager", "Kafka broker", "this bench", SAMPLER, "all else", "idle")
# The long-term store (--store): a fresh file per configuration that the TaskManagers share, or a database in
# each TaskManager's memory.
STORES = {"shared": "sqlite:///{path}", "private": "sqlite://"}
# The job is jobs/kafka_job.py as submitted; each shape sets its execution
# mode (and process mode's bundle time) with --flink-conf.
JOB = REPO_ROOT / "jobs" / "kafka_job.py"


@dataclass
class Result:
    mode: str
    taskmanagers: int
    slots: int
    parallelism: int
    diagnoses: int
    expected: int
    alerts_per_s: float
    startup_s: float
    # CPU of the TaskManagers (their Python workers included) from the first diagnosis to the last.
    cores_used: float
    cpu_ms_per_alert: float
    load_avg: float
    # Cores each TaskManager was pinned to (0: not pinned, any core).
    cores_per_taskmanager: int = 0
    # CPU ms per alert by part, over the same span (``procstat.tree_cpu_parts``: the JVM's threads by name, the
    # Python threads it runs in thread mode among them, and each child process), summed over the TaskManagers.
    cpu_ms_per_alert_by_part: dict[str, float] = field(default_factory=dict)
    # Cores used by the rest of the machine over the same span: the JobManager, the broker, this script, all
    # else, and idle.
    cores_outside: dict[str, float] = field(default_factory=dict)
    # Which round of --repeat this run was in (1 to N).
    round: int = 1
    # The window the rate and the CPU figures are over (--window: fractions of the diagnoses), and the rate
    # from the first diagnosis to the last.
    window: list[float] = field(default_factory=lambda: [0.0, 1.0])
    alerts_per_s_whole: float = float("nan")
    # The long-term store (--store): shared (one file) or private (each TaskManager's own, in memory).
    store: str = "shared"

    @property
    def label(self) -> str:
        pinned = f", {self.cores_per_taskmanager} core each" if self.cores_per_taskmanager else ""
        return f"{self.mode} {self.taskmanagers} TM x {self.slots} slot{pinned}"


def parse_config(text: str) -> tuple[str, int, int]:
    """``mode:TMxSLOTS`` -> (mode, taskmanagers, slots per taskmanager)."""
    m = re.fullmatch(r"(thread|process):(\d+)x(\d+)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected MODE:TMxSLOTS (e.g. thread:2x1), got {text!r}")
    return m.group(1), int(m.group(2)), int(m.group(3))


def count_arrivals(bootstrap: str, topic: str, expect: int, timeout_s: float, label: str) -> list[float]:
    """Count records until ``expect`` arrived; each one's arrival, in monotonic seconds, good to ``POLL_S``.

    The topic's end offsets, asked ``1 / POLL_S`` times a second, not its records read: the bench shares the
    cores it measures. Reading every diagnosis (kafka-python decodes each record in Python) took the bench
    0.04-0.06 of the 2 cores at 170-300 diagnoses/s; counting, 0.02-0.03 with its CPU sampler.
    The job's sinks deliver at least once (no transaction markers), so the end offsets count the records.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    arrived: list[float] = []
    last_print = 0.0
    deadline = time.monotonic() + timeout_s
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not partitions:
            raise SystemExit(f"{label}: topic {topic} has no partitions")
        while len(arrived) < expect and time.monotonic() < deadline:
            count = sum(consumer.end_offsets(partitions).values())
            now = time.monotonic()
            arrived += [now] * (min(count, expect) - len(arrived))
            if now - last_print > 5:
                last_print = now
                print(f"  [{label}] {len(arrived)}/{expect} diagnoses", file=sys.stderr, flush=True)
            if len(arrived) < expect:
                time.sleep(POLL_S)
    finally:
        consumer.close()
    return arrived


def window_of(arrived: list[float], window: tuple[float, float]) -> tuple[int, float, float]:
    """(diagnoses, start, end) of a window given as fractions of the diagnoses: (0.3, 0.9) runs from the
    arrival of the diagnosis 30% of the way through to the one 90% of the way through; (0, 1) from the first to
    the last. The diagnoses counted are those after its start up to its end."""
    if len(arrived) < 2:
        return 0, 0.0, 0.0
    first, last = round(window[0] * (len(arrived) - 1)), round(window[1] * (len(arrived) - 1))
    return last - first, arrived[first], arrived[last]


def taskmanager_pids(pid_dir: Path) -> list[int]:
    """The cluster's TaskManager JVMs, in the order they were started."""
    return _pids(pid_dir, "*taskexecutor*.pid")


def jobmanager_pids(pid_dir: Path) -> list[int]:
    """The cluster's JobManager JVM."""
    return _pids(pid_dir, "*standalonesession*.pid")


def _pids(pid_dir: Path, pattern: str) -> list[int]:
    return [int(x) for f in sorted(pid_dir.glob(pattern)) for x in f.read_text().split() if x.isdigit()]


def core_sets(taskmanagers: int, per_taskmanager: int) -> list[set[int]]:
    """TaskManager i's cores: i*N .. i*N+N-1 (the machine must have them all)."""
    cores = os.cpu_count() or 1
    if taskmanagers * per_taskmanager > cores:
        raise SystemExit(f"{taskmanagers} TaskManagers x {per_taskmanager} cores need {taskmanagers * per_taskmanager}"
                         f" cores; this machine has {cores}")  # fmt: skip
    return [set(range(i * per_taskmanager, (i + 1) * per_taskmanager)) for i in range(taskmanagers)]


class CpuSampler:
    """Samples the CPU time of the cluster's TaskManager process trees every ``SAMPLE_S``, on a thread.

    With ``pins`` (one core set per TaskManager, in start order) it also pins each TaskManager's tree to its
    cores at every sample, so a process started late (the embedding child) cannot escape them.
    """

    def __init__(self, pid_dir: Path, pins: list[set[int]] | None = None, broker_pid: int | None = None) -> None:
        self.pid_dir = pid_dir
        self.pins = pins or []
        self.broker_pid = broker_pid
        self.times: list[float] = []  # when each sample was taken (monotonic)
        # Each sample's CPU seconds by part (``procstat.tree_cpu_parts``, summed over the TaskManagers by name).
        self.parts: list[dict[str, float]] = []
        # Each sample's CPU seconds of the rest of the machine: the JobManager, the broker, this script, all else,
        # and the cores' idle time.
        self.machine: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self) -> list[int]:
        return taskmanager_pids(self.pid_dir)

    def _run(self) -> None:
        while not self._stop.is_set():
            children = process_children()  # one scan of /proc for every tree of this sample
            taskmanagers = self._pids()
            for pid, cores in zip(taskmanagers, self.pins, strict=False):
                pin_tree(pid, cores, children)
            parts: dict[str, float] = {}
            for pid in taskmanagers:
                for part, used in tree_cpu_parts(pid, children).items():
                    parts[part] = parts.get(part, 0.0) + used
            busy, idle = machine_cpu_s()
            outside = {
                "JobManager": sum(tree_cpu_s(p, children) for p in jobmanager_pids(self.pid_dir)),
                "Kafka broker": tree_cpu_s(self.broker_pid, children) if self.broker_pid else 0.0,
                "this bench": process_cpu_s(os.getpid()),
                SAMPLER: time.thread_time(),  # this thread (part of "this bench")
            }
            outside["all else"] = busy - sum(parts.values()) - sum(v for k, v in outside.items() if k != SAMPLER)
            outside["idle"] = idle
            self.times.append(time.monotonic())
            self.parts.append(parts)
            self.machine.append(outside)
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> float:
        """CPU seconds used between two monotonic times (nearest samples): the parts' sum."""
        return sum(self.parts_between(start, end).values()) if self.times else float("nan")

    def parts_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds by part used between two monotonic times (nearest samples), largest first."""
        return self._between(self.parts, start, end)

    def machine_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds of the rest of the machine (``machine``) between two monotonic times (nearest samples)."""
        return self._between(self.machine, start, end)

    def _between(self, series: list[dict[str, float]], start: float, end: float) -> dict[str, float]:
        if not self.times:
            return {}
        nearest = lambda t: min(range(len(self.times)), key=lambda i: abs(self.times[i] - t))  # noqa: E731
        first, last = series[nearest(start)], series[nearest(end)]
        used = {part: last.get(part, 0.0) - first.get(part, 0.0) for part in last.keys() | first.keys()}
        return dict(sorted(used.items(), key=lambda kv: -kv[1]))


def run_config(
    broker: KafkaBroker, config: tuple[str, int, int], topic: str, expect: int, work: Path, timeout_s: float,
    concurrency: int, cores_per_taskmanager: int = 0, turn: int = 1, window: tuple[float, float] = (0.0, 1.0),
    taskmanager_java_opts: str = "", store: str = "shared",
) -> Result:  # fmt: skip
    mode, tms, slots = config
    tag = f"{mode}-{tms}x{slots}-r{turn}"
    parallelism = tms * slots
    diag, dead = f"scale-{tag}.diagnoses", f"scale-{tag}.dead"
    broker.create_topics([diag, dead], partitions=PARTITIONS)
    conf = {"python.execution-mode": mode}
    if mode == "process":
        conf["python.fn-execution.bundle.time"] = str(PROCESS_BUNDLE_MS)
    cluster = FlinkCluster(
        work / f"flink-{tag}", slots=slots, taskmanagers=tms,
        env={"VDOCTOR_CONCURRENCY": str(concurrency), "VDOCTOR_KNOWLEDGE_URL": "memory://"},
        conf={"env.java.opts.taskmanager": taskmanager_java_opts} if taskmanager_java_opts else None,
    )  # fmt: skip
    print(f"{cluster_label(config)}: starting the cluster", file=sys.stderr, flush=True)
    cluster.start()
    job_id = None
    try:
        pins = core_sets(tms, cores_per_taskmanager) if cores_per_taskmanager else []
        tm_pids = taskmanager_pids(cluster.workdir / "pid")
        for pid, cores in zip(tm_pids, pins, strict=False):  # before the job: its threads start pinned
            print(f"  TaskManager {pid}: pinned to cores {sorted(cores)} ({pin_tree(pid, cores)} threads)",
                  file=sys.stderr, flush=True)  # fmt: skip
        launched = time.monotonic()
        submitted = cluster.flink(
            "run", "-d", "-py", str(JOB), "--kafka", broker.bootstrap, "--alerts-topic", topic,
            "--diagnoses-topic", diag, "--dead-letters-topic", dead, "--group-id", f"scale-{tag}",
            "--parallelism", str(parallelism), "--memory", STORES[store].format(path=work / f"memory-{tag}.db"),
            "--checkpoint-dir", str(work / f"chk-{tag}"), "--restart-attempts", "0",
            *(f"--flink-conf={k}={v}" for k, v in conf.items()),
        )  # fmt: skip
        if submitted.returncode != 0:
            raise SystemExit(f"{tag}: flink run failed:\n{submitted.stderr[-3000:]}")
        found = re.search(r"JobID ([0-9a-f]{32})", submitted.stdout + submitted.stderr)
        job_id = found.group(1) if found else None
        with CpuSampler(cluster.workdir / "pid", pins, broker.proc.pid if broker.proc else None) as cpu:
            arrived = count_arrivals(broker.bootstrap, diag, expect, timeout_s, tag)
            time.sleep(0.6)  # one more sample after the last diagnosis
        whole, start, end = window_of(arrived, (0.0, 1.0))
        whole_rate = whole / (end - start) if end > start else float("nan")
        count, first_at, last_at = window_of(arrived, window)
        span = last_at - first_at
        used = cpu.between(first_at, last_at)
        parts = (
            {part: round(s / count * 1000, 3) for part, s in cpu.parts_between(first_at, last_at).items()}
            if count
            else {}
        )
        outside = (
            {part: round(s / span, 3) for part, s in cpu.machine_between(first_at, last_at).items()} if span > 0 else {}
        )
        return Result(mode, tms, slots, parallelism, len(arrived), expect, count / span if span > 0 else float("nan"),
                      start - launched if start else float("nan"), used / span if span > 0 else float("nan"),
                      used / count * 1000 if count else float("nan"), os.getloadavg()[0],
                      cores_per_taskmanager, parts, outside, turn, list(window), whole_rate, store)  # fmt: skip
    finally:
        if job_id:
            cluster.flink("cancel", job_id, timeout=60)
        cluster.stop()


def cluster_label(config: tuple[str, int, int]) -> str:
    mode, tms, slots = config
    return f"{mode} mode, {tms} TaskManager(s) x {slots} slot(s)"


def largest_parts(results: list[Result]) -> list[str]:
    """Every part of the runs' CPU, largest first (by its largest CPU ms per alert in any run)."""
    most = lambda p: max(r.cpu_ms_per_alert_by_part.get(p, 0.0) for r in results)  # noqa: E731
    return sorted({p for r in results for p in r.cpu_ms_per_alert_by_part}, key=lambda p: -most(p))


def print_parts(results: list[Result], floor_ms: float = 0.1) -> None:
    """CPU ms per alert by part, one column per configuration: the parts of at least ``floor_ms`` somewhere,
    the rest summed as one row."""
    if not results:
        return
    most = lambda p: max(r.cpu_ms_per_alert_by_part.get(p, 0.0) for r in results)  # noqa: E731
    shown = [p for p in largest_parts(results) if most(p) >= floor_ms]
    rounds = len({r.round for r in results}) > 1
    names = [f"{r.mode[0]}:{r.taskmanagers}x{r.slots}" + (f" r{r.round}" if rounds else "") for r in results]
    print("\nCPU ms/alert by part (thread names with digits as '#'; thread mode's Python threads carry the name of"
          " the JVM thread that started them), summed over the TaskManagers")  # fmt: skip
    print(f"{'part':<24}" + "".join(f"{n:>10}" for n in names))
    for part in shown:
        print(f"{part[:24]:<24}" + "".join(f"{r.cpu_ms_per_alert_by_part.get(part, 0.0):>10.2f}" for r in results))
    rest = [sum(ms for p, ms in r.cpu_ms_per_alert_by_part.items() if p not in shown) for r in results]
    print(f"{'(the rest)':<24}" + "".join(f"{ms:>10.2f}" for ms in rest))
    print("\ncores used outside the TaskManagers over the same span, and the cores left idle")
    print(f"{'':<24}" + "".join(f"{n:>10}" for n in names))
    for part in MACHINE_PARTS:
        print(f"{part:<24}" + "".join(f"{r.cores_outside.get(part, float('nan')):>10.2f}" for r in results))


def plot(results: list[Result], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    colors = ["#4477aa" if r.mode == "thread" else "#cc6677" for r in results]
    rounds = len({r.round for r in results}) > 1
    labels = [r.label.replace(" x ", "\nx ") + (f"\nround {r.round}" if rounds else "") for r in results]
    bars = ax.bar(labels, [r.alerts_per_s for r in results], color=colors)
    ax.bar_label(bars, fmt="%.0f")
    ax.set_ylabel(f"alerts/s ({window_label(results[0].window)})" if results else "alerts/s")
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def window_label(window: list[float]) -> str:
    a, b = window
    return "first to last diagnosis" if (a, b) == (0.0, 1.0) else f"diagnoses {a:.0%} to {b:.0%}"


# What plot_parts draws apart: the largest parts of the TaskManagers' CPU, the rest summed.
PLOTTED_PARTS = 5


def plot_parts(results: list[Result], path: Path, title: str) -> None:
    """Two panels, one bar per run: the TaskManagers' CPU ms per alert stacked by part (the largest
    ``PLOTTED_PARTS``, the rest summed), and the machine's cores stacked by who used them (the TaskManagers, the
    JobManager, the broker, the bench, all else, idle)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not results:
        return
    rounds = len({r.round for r in results}) > 1
    labels = [f"{r.taskmanagers} TM x {r.slots}\n{r.mode}" + (f"\nround {r.round}" if rounds else "") for r in results]
    parts = largest_parts(results)[:PLOTTED_PARTS]
    fig, (cpu, cores) = plt.subplots(1, 2, figsize=(13, 4.4))
    bottom = [0.0] * len(results)
    rows = [(part, [r.cpu_ms_per_alert_by_part.get(part, 0.0) for r in results]) for part in parts]
    rows.append(
        ("the rest", [sum(v for p, v in r.cpu_ms_per_alert_by_part.items() if p not in parts) for r in results])
    )
    for part, values in rows:
        cpu.bar(labels, values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, total in enumerate(bottom):
        cpu.annotate(f"{total:.1f}", (x, total), ha="center", va="bottom", fontsize=8)
    cpu.set_ylabel(f"TaskManagers' CPU ms per alert ({window_label(results[0].window)})")
    cpu.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    bottom = [0.0] * len(results)
    for who, values in [("TaskManagers", [r.cores_used for r in results])] + [
        (who, [r.cores_outside.get(who, 0.0) for r in results]) for who in MACHINE_PARTS if who != SAMPLER
    ]:
        cores.bar(labels, values, bottom=bottom, label=who, color="#dddddd" if who == "idle" else None)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    cores.set_ylabel("cores, over the same span")
    cores.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for ax in (cpu, cores):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vins", type=int, default=1500, help="fleet size for scripts/gen_demo.py")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--configs", nargs="+", type=parse_config, default=[parse_config(c) for c in DEFAULT_CONFIGS],
                        metavar="MODE:TMxSLOTS")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=64, help="model calls in flight per subtask")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for one configuration's diagnoses")
    parser.add_argument("--cores-per-taskmanager", type=int, default=0, metavar="N",
                        help="pin each TaskManager (its JVM, Python, embedding child) to N cores of its own; "
                             "0 (default): any core")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run the configurations N times in turn (1x1, 2x1, 1x1, 2x1, ...), printing each "
                             "round's ratios and their median: a drift in the machine's speed moves both sides of "
                             "a round")  # fmt: skip
    parser.add_argument("--window", type=float, nargs=2, default=[0.0, 1.0], metavar=("FROM", "TO"),
                        help="measure the rate and the CPU between two diagnoses, given as fractions of them: "
                             "0.3 0.9 leaves out the JVMs' warm-up (their JIT compiles for minutes) and the tail "
                             "(a finite fleet ends on one TaskManager); default 0 1, first to last")  # fmt: skip
    parser.add_argument("--store", choices=sorted(STORES), default="shared",
                        help="shared (default): one SQLite file per configuration, which every TaskManager reads "
                             "and writes, as the job runs; private: each TaskManager a SQLite database in its own "
                             "memory (sqlite://), the same store code without a file to share (a diagnostic: the "
                             "TaskManagers do not see each other's cases)")  # fmt: skip
    parser.add_argument("--taskmanager-java-opts", default="", metavar="OPTS",
                        help="the TaskManagers' JVM options (env.java.opts.taskmanager), e.g. "
                             "'-XX:TieredStopAtLevel=1' (C1 only)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    args = parser.parse_args(argv)
    if not 0.0 <= args.window[0] < args.window[1] <= 1.0:
        parser.error(f"--window FROM TO: 0 <= FROM < TO <= 1, got {args.window[0]} {args.window[1]}")
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="vdoctor-scale-") as tmp:
        work = Path(tmp)
        alerts = work / "alerts.jsonl"
        gen = [
            sys.executable,
            str(REPO_ROOT / "scripts" / "gen_demo.py"),
            "--out",
            str(alerts),
            "--vins",
            str(args.vins),
        ]
        subprocess.run([*gen, "--seed", str(args.seed)], check=True, capture_output=True)
        expected = json.loads((work / "expected.json").read_text())
        expect, lines = int(expected["alerts"]), int(expected["lines"])
        print(f"scale-out: {lines} events, {expect} alerts, {args.vins} vehicles", file=sys.stderr, flush=True)
        broker = KafkaBroker(work / "kafka").start()
        try:
            broker.create_topics(["scale.alerts"], partitions=PARTITIONS)
            replay = [sys.executable, "-m", "jobs.cli", "replay", "--alerts", str(alerts), "--bootstrap"]
            subprocess.run([*replay, broker.bootstrap, "--topic", "scale.alerts", "--quiet"], cwd=REPO_ROOT, check=True)
            for turn in range(1, args.repeat + 1):  # the configurations in turn, round after round
                for config in args.configs:
                    r = run_config(broker, config, "scale.alerts", expect, work, args.timeout, args.concurrency,
                                   args.cores_per_taskmanager, turn, tuple(args.window),
                                   args.taskmanager_java_opts, args.store)  # fmt: skip
                    results.append(r)
                    print(f"  {r.label}: {r.alerts_per_s:.1f} alerts/s ({r.diagnoses}/{r.expected})", file=sys.stderr)
        finally:
            broker.stop()
    load_after = os.getloadavg()[0]
    print(f"\nKafka ({PARTITIONS} partitions) -> job on a standalone cluster -> Kafka; offline model, "
          f"concurrency {args.concurrency}; {lines} events ({expect} alerts); {os.cpu_count()} cores shared with "
          f"the broker and the JobManager; load average {load_before:.1f} before, {load_after:.1f} after")  # fmt: skip
    if args.store != "shared":
        print("the long-term store: a SQLite database in each TaskManager's memory (--store private)")
    if args.cores_per_taskmanager:
        print(f"each TaskManager pinned to {args.cores_per_taskmanager} core(s) of its own (TaskManager i: cores "
              f"i*N .. i*N+N-1); the broker, the JobManager and this script on any core")  # fmt: skip
    a, b = args.window
    over = (
        "from first to last diagnosis" if (a, b) == (0.0, 1.0) else f"from the diagnosis {a:.0%} of the way to {b:.0%}"
    )
    print(f"'alerts/s', 'cores' and 'CPU ms/alert' {over} ('whole': alerts/s from first to last); 'cores' and "
          "'CPU ms/alert': the TaskManagers' CPU (Python workers included)")  # fmt: skip
    print(f"{'configuration':<36} {'round':>5} {'parallelism':>11} {'diagnoses':>9} {'alerts/s':>9} {'whole':>6} "
          f"{'cores':>6} {'CPU ms/alert':>12} {'start-up s':>10} {'load':>5}")  # fmt: skip
    for r in results:
        print(f"{r.label:<36} {r.round:>5} {r.parallelism:>11} {r.diagnoses:>9} {r.alerts_per_s:>9.1f} "
              f"{r.alerts_per_s_whole:>6.1f} {r.cores_used:>6.2f} {r.cpu_ms_per_alert:>12.1f} {r.startup_s:>10.1f} "
              f"{r.load_avg:>5.1f}")  # fmt: skip
    ratios = {
        "thread mode: 2 TaskManagers / 1": (("thread", 2, 1), ("thread", 1, 1)),
        "process mode: 2 TaskManagers / 1": (("process", 2, 1), ("process", 1, 1)),
        "process mode: 1 TaskManager x 2 slots / 1 x 1": (("process", 1, 2), ("process", 1, 1)),
        "process / thread mode, 1 TaskManager x 1 slot": (("process", 1, 1), ("thread", 1, 1)),
    }
    for name, (top, bottom) in ratios.items():
        for rate, what in (("alerts_per_s", ""), ("alerts_per_s_whole", ", first to last diagnosis")):
            if what and args.window == [0.0, 1.0]:
                continue
            each = []
            for turn in range(1, args.repeat + 1):
                by = {(r.mode, r.taskmanagers, r.slots): r for r in results if r.round == turn}
                if top in by and bottom in by:
                    each.append(getattr(by[top], rate) / getattr(by[bottom], rate))
            if len(each) == 1:
                print(f"{name}{what} = {each[0]:.2f}")
            elif each:
                rounds = ", ".join(f"{x:.2f}" for x in each)
                print(f"{name}{what} = {statistics.median(each):.2f} (median; by round {rounds})")
    print_parts(results)
    (args.out / "scale_out.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    title = f"Kafka job on a standalone cluster, {expect} alerts, offline model"
    plot(results, args.out / "scale_out.png", title)
    plot_parts(results, args.out / "scale_out_parts.png", title)
    print(f"results: {args.out / 'scale_out.json'}, plots: {args.out / 'scale_out.png'}, "
          f"{args.out / 'scale_out_parts.png'}")  # fmt: skip
    return 0 if all(r.diagnoses == r.expected for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

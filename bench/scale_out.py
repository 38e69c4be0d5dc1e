"""Scale-out: alerts/s of the Kafka job on a standalone cluster, 1 and 2 TaskManagers, thread and process mode.

One invocation runs every configuration over the same fleet, side by side:
a Kafka 4 broker (the jars from `scripts/install/kafka.sh`) holds the fleet
(`scripts/gen_demo.py --vins N`) in an input topic of 4 partitions, produced
once. For each configuration a fresh standalone cluster is started from the
PyFlink wheel's own distribution (JobManager + TaskManagers of the given
slots), the job is submitted with `flink run -py jobs/kafka_job.py` at
parallelism = total slots, reading the topic from the start into fresh output
topics and a fresh memory store, and the diagnoses topic is read back. The
rate is alerts/s from the first diagnosis to the last (start-up left out).

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

Prints a table with the ratios and writes out/bench/scale_out.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.procstat import pin_tree, tree_cpu_s  # noqa: E402
from tests.services.kafka_flink import FlinkCluster, KafkaBroker  # noqa: E402

PARTITIONS = 4
DEFAULT_CONFIGS = ["thread:1x1", "thread:2x1", "process:1x1", "process:2x1", "process:1x2"]
# Process mode: a bundle is sent to the Python worker at least this often
# (the 1000 ms default halves throughput; NOTES.md).
PROCESS_BUNDLE_MS = 10
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


def _consume(bootstrap: str, topic: str, expect: int, timeout_s: float, label: str) -> tuple[int, float, float]:
    """Count records until ``expect`` arrived; (count, first_at, last_at) in monotonic seconds."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
        consumer_timeout_ms=1000,
    )  # fmt: skip
    count, first_at, last_at, last_print = 0, 0.0, 0.0, 0.0
    deadline = time.monotonic() + timeout_s
    try:
        while count < expect and time.monotonic() < deadline:
            for _ in consumer:
                now = time.monotonic()
                count += 1
                first_at, last_at = first_at or now, now
                if count >= expect:
                    break
            if time.monotonic() - last_print > 5:
                last_print = time.monotonic()
                print(f"  [{label}] {count}/{expect} diagnoses", file=sys.stderr, flush=True)
    finally:
        consumer.close()
    return count, first_at, last_at


def taskmanager_pids(pid_dir: Path) -> list[int]:
    """The cluster's TaskManager JVMs, in the order they were started."""
    return [int(x) for f in sorted(pid_dir.glob("*taskexecutor*.pid")) for x in f.read_text().split() if x.isdigit()]


def core_sets(taskmanagers: int, per_taskmanager: int) -> list[set[int]]:
    """TaskManager i's cores: i*N .. i*N+N-1 (the machine must have them all)."""
    cores = os.cpu_count() or 1
    if taskmanagers * per_taskmanager > cores:
        raise SystemExit(f"{taskmanagers} TaskManagers x {per_taskmanager} cores need {taskmanagers * per_taskmanager}"
                         f" cores; this machine has {cores}")  # fmt: skip
    return [set(range(i * per_taskmanager, (i + 1) * per_taskmanager)) for i in range(taskmanagers)]


class CpuSampler:
    """Samples the CPU time of the cluster's TaskManager process trees twice a second, on a thread.

    With ``pins`` (one core set per TaskManager, in start order) it also pins each TaskManager's tree to its
    cores at every sample, so a process started late (the embedding child) cannot escape them.
    """

    def __init__(self, pid_dir: Path, pins: list[set[int]] | None = None) -> None:
        self.pid_dir = pid_dir
        self.pins = pins or []
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self) -> list[int]:
        return taskmanager_pids(self.pid_dir)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid, cores in zip(self._pids(), self.pins, strict=False):
                pin_tree(pid, cores)
            self.samples.append((time.monotonic(), sum(tree_cpu_s(p) for p in self._pids())))
            self._stop.wait(0.5)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> float:
        """CPU seconds used between two monotonic times (nearest samples)."""
        if not self.samples:
            return float("nan")
        at = lambda t: min(self.samples, key=lambda s: abs(s[0] - t))[1]  # noqa: E731
        return at(end) - at(start)


def run_config(
    broker: KafkaBroker, config: tuple[str, int, int], topic: str, expect: int, work: Path, timeout_s: float,
    concurrency: int, cores_per_taskmanager: int = 0,
) -> Result:  # fmt: skip
    mode, tms, slots = config
    tag = f"{mode}-{tms}x{slots}"
    parallelism = tms * slots
    diag, dead = f"scale-{tag}.diagnoses", f"scale-{tag}.dead"
    broker.create_topics([diag, dead], partitions=PARTITIONS)
    conf = {"python.execution-mode": mode}
    if mode == "process":
        conf["python.fn-execution.bundle.time"] = str(PROCESS_BUNDLE_MS)
    cluster = FlinkCluster(
        work / f"flink-{tag}", slots=slots, taskmanagers=tms,
        env={"VDOCTOR_CONCURRENCY": str(concurrency), "VDOCTOR_KNOWLEDGE_URL": "memory://"},
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
            "--parallelism", str(parallelism), "--memory", f"sqlite:///{work}/memory-{tag}.db",
            "--checkpoint-dir", str(work / f"chk-{tag}"), "--restart-attempts", "0",
            *(f"--flink-conf={k}={v}" for k, v in conf.items()),
        )  # fmt: skip
        if submitted.returncode != 0:
            raise SystemExit(f"{tag}: flink run failed:\n{submitted.stderr[-3000:]}")
        found = re.search(r"JobID ([0-9a-f]{32})", submitted.stdout + submitted.stderr)
        job_id = found.group(1) if found else None
        with CpuSampler(cluster.workdir / "pid", pins) as cpu:
            count, first_at, last_at = _consume(broker.bootstrap, diag, expect, timeout_s, tag)
            time.sleep(0.6)  # one more sample after the last diagnosis
        span = last_at - first_at
        used = cpu.between(first_at, last_at)
        return Result(mode, tms, slots, parallelism, count, expect, count / span if span > 0 else float("nan"),
                      first_at - launched if first_at else float("nan"), used / span if span > 0 else float("nan"),
                      used / count * 1000 if count else float("nan"), os.getloadavg()[0],
                      cores_per_taskmanager)  # fmt: skip
    finally:
        if job_id:
            cluster.flink("cancel", job_id, timeout=60)
        cluster.stop()


def cluster_label(config: tuple[str, int, int]) -> str:
    mode, tms, slots = config
    return f"{mode} mode, {tms} TaskManager(s) x {slots} slot(s)"


def plot(results: list[Result], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    colors = ["#4477aa" if r.mode == "thread" else "#cc6677" for r in results]
    bars = ax.bar([r.label.replace(" x ", "\nx ") for r in results], [r.alerts_per_s for r in results], color=colors)
    ax.bar_label(bars, fmt="%.0f")
    ax.set_ylabel("alerts/s (first to last diagnosis)")
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vins", type=int, default=1500, help="fleet size for scripts/gen_demo.py")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--configs", nargs="+", type=parse_config, default=[parse_config(c) for c in DEFAULT_CONFIGS],
                        metavar="MODE:TMxSLOTS")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=64, help="runs in flight per subtask (VDOCTOR_CONCURRENCY)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for one configuration's diagnoses")
    parser.add_argument("--cores-per-taskmanager", type=int, default=0, metavar="N",
                        help="pin each TaskManager (its JVM, Python, embedding child) to N cores of its own; "
                             "0 (default): any core")  # fmt: skip
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    args = parser.parse_args(argv)
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
            for config in args.configs:
                results.append(run_config(broker, config, "scale.alerts", expect, work, args.timeout, args.concurrency,
                                          args.cores_per_taskmanager))  # fmt: skip
                r = results[-1]
                print(f"  {r.label}: {r.alerts_per_s:.1f} alerts/s ({r.diagnoses}/{r.expected})", file=sys.stderr)
        finally:
            broker.stop()
    load_after = os.getloadavg()[0]
    print(f"\nKafka ({PARTITIONS} partitions) -> job on a standalone cluster -> Kafka; offline model, "
          f"concurrency {args.concurrency}; {lines} events ({expect} alerts); {os.cpu_count()} cores shared with "
          f"the broker and the JobManager; load average {load_before:.1f} before, {load_after:.1f} after")  # fmt: skip
    if args.cores_per_taskmanager:
        print(f"each TaskManager pinned to {args.cores_per_taskmanager} core(s) of its own (TaskManager i: cores "
              f"i*N .. i*N+N-1); the broker, the JobManager and this script on any core")  # fmt: skip
    print("'cores' and 'CPU ms/alert': the TaskManagers' CPU (Python workers included) from first to last diagnosis")
    print(f"{'configuration':<28} {'parallelism':>11} {'diagnoses':>9} {'alerts/s':>9} {'cores':>6} "
          f"{'CPU ms/alert':>12} {'start-up s':>10} {'load':>5}")  # fmt: skip
    for r in results:
        print(f"{r.label:<28} {r.parallelism:>11} {r.diagnoses:>9} {r.alerts_per_s:>9.1f} {r.cores_used:>6.2f} "
              f"{r.cpu_ms_per_alert:>12.1f} {r.startup_s:>10.1f} {r.load_avg:>5.1f}")  # fmt: skip
    by = {(r.mode, r.taskmanagers, r.slots): r for r in results}
    for mode in ("thread", "process"):
        one, two = by.get((mode, 1, 1)), by.get((mode, 2, 1))
        if one and two:
            print(f"{mode} mode: 2 TaskManagers / 1 = {two.alerts_per_s / one.alerts_per_s:.2f}")
    if by.get(("process", 1, 2)) and by.get(("process", 1, 1)):
        print(f"process mode: 1 TaskManager x 2 slots / 1 x 1 = "
              f"{by[('process', 1, 2)].alerts_per_s / by[('process', 1, 1)].alerts_per_s:.2f}")  # fmt: skip
    if by.get(("thread", 1, 1)) and by.get(("process", 1, 1)):
        print(f"process / thread mode, 1 TaskManager x 1 slot = "
              f"{by[('process', 1, 1)].alerts_per_s / by[('thread', 1, 1)].alerts_per_s:.2f}")  # fmt: skip
    (args.out / "scale_out.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    plot(results, args.out / "scale_out.png", f"Kafka job on a standalone cluster, {expect} alerts, offline model")
    print(f"results: {args.out / 'scale_out.json'}, plot: {args.out / 'scale_out.png'}")
    return 0 if all(r.diagnoses == r.expected for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

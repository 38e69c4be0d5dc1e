"""Resident memory per 10,000 vehicles with open sessions, heap and RocksDB state backends, side by side.

For each state backend the Kafka job (`jobs/kafka_job.py`, the same job as
`vdoctor run --kafka`, offline model, checkpoints every 10 s) runs on the
local MiniCluster against a Kafka 4 broker. Once it is up and idle its
resident memory (the whole process tree: the Python client and the JVM, which
holds the operator's Python interpreter in thread mode) is sampled; then
``--vehicles`` vehicles send one alert each, which opens a session that stays
open (U0140 concludes only when seen twice); when every diagnosis is out and
a checkpoint has completed, memory is sampled again. Figures: resident memory
before and after, the difference per 10,000 vehicles, the JVM heap in use
after a full GC before and after (the heap backend keeps the sessions there), and the size of
the last checkpoint (the keyed state as stored).

    .venv/bin/python bench/state_memory.py                    # 10,000 vehicles, both backends (~10 minutes)
    .venv/bin/python bench/state_memory.py --vehicles 20000 --backends rocksdb

Prints a table and writes out/bench/state_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.procstat import tree_rss_mb  # noqa: E402
from tests.services.kafka_flink import KafkaBroker  # noqa: E402

VIN_ALPHABET = "0123456789ABCDEFGHJKLMNPRSTUVWXYZ"
CHECKPOINT_S = 10
# Resident memory is the median of this many samples, one a second.
SAMPLES = 10


@dataclass
class Result:
    backend: str
    vehicles: int
    rss_idle_mb: float
    rss_after_mb: float
    heap_idle_mb: float
    heap_used_after_gc_mb: float
    checkpoint_mb: float
    load_avg: float

    @property
    def per_10k_mb(self) -> float:
        return (self.rss_after_mb - self.rss_idle_mb) / self.vehicles * 10_000


def vin(i: int) -> str:
    digits = []
    for _ in range(6):
        i, r = divmod(i, len(VIN_ALPHABET))
        digits.append(VIN_ALPHABET[r])
    return "LSVSTATE000" + "".join(reversed(digits))


def write_fleet(path: Path, vehicles: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for v in range(vehicles):
            fh.write(json.dumps({
                "type": "alert", "event_id": f"s-{v}", "vin": vin(v), "series": "EV-A", "ts": "2026-11-01T08:00:00Z",
                "alert_text": "CAN bus communication lost with battery module", "dtc_codes": ["U0140"],
                "signals": {"can_timeout_s": 0.2, "pack_voltage_v": 398.5},
            }) + "\n")  # fmt: skip


def rss_mb(pid: int) -> float:
    samples = []
    for _ in range(SAMPLES):
        samples.append(tree_rss_mb(pid))
        time.sleep(1.0)
    return statistics.median(samples)


def jvm_of(pid: int) -> str | None:
    found = subprocess.run(["pgrep", "-P", str(pid), "java"], capture_output=True, text=True).stdout.split()
    return found[0] if found else None


def heap_used_after_gc_mb(java: str | None) -> float:
    if java is None:
        return float("nan")
    subprocess.run(["jcmd", java, "GC.run"], capture_output=True, timeout=60)
    info = subprocess.run(["jcmd", java, "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"used (\d+)K", info)
    return int(found.group(1)) / 1024 if found else float("nan")


def count_records(bootstrap: str, topic: str, expect: int, timeout_s: float) -> int:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)  # fmt: skip
    count, deadline, last = 0, time.monotonic() + timeout_s, 0.0
    try:
        while count < expect and time.monotonic() < deadline:
            for _ in consumer:
                count += 1
                if count >= expect:
                    break
            if time.monotonic() - last > 10:
                last = time.monotonic()
                print(f"  {count}/{expect} diagnoses", file=sys.stderr, flush=True)
    finally:
        consumer.close()
    return count


def newest_checkpoint_mb(folder: Path) -> float:
    done = sorted(folder.glob("*/chk-*/_metadata"), key=lambda p: p.stat().st_mtime)
    if not done:
        return float("nan")
    shared = done[-1].parent.parent / "shared"
    files = [*done[-1].parent.rglob("*"), *(shared.rglob("*") if shared.exists() else [])]
    return sum(f.stat().st_size for f in files if f.is_file()) / 1e6


def run_backend(backend: str, broker: KafkaBroker, fleet: Path, vehicles: int, work: Path, timeout_s: float) -> Result:
    tag = f"{backend}-{vehicles}"
    topic, diag, dead = f"state-{tag}.alerts", f"state-{tag}.diagnoses", f"state-{tag}.dead"
    broker.create_topics([topic, diag, dead], partitions=4)
    # The heap backend's checkpoints are full (the whole state); RocksDB's are incremental (the Kafka job's default).
    ckpt = work / f"chk-{tag}"
    env = {**os.environ, "VDOCTOR_KNOWLEDGE_URL": "memory://"}
    job = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", "--kafka", broker.bootstrap, "--alerts-topic", topic,
         "--diagnoses-topic", diag,
         "--dead-letters-topic", dead, "--group-id", f"state-{tag}", "--memory", f"sqlite:///{work}/memory-{tag}.db",
         "--checkpoint-dir", str(ckpt), "--checkpoint-interval", str(CHECKPOINT_S), "--restart-attempts", "0",
         f"--flink-conf=state.backend.type={backend}"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not list(ckpt.glob("*/chk-*/_metadata")) and time.monotonic() < deadline:
            if job.poll() is not None:
                raise SystemExit(f"{backend}: the job exited with {job.returncode}")
            time.sleep(1.0)
        time.sleep(15)  # settle after start-up
        idle = rss_mb(job.pid)
        heap_idle = heap_used_after_gc_mb(jvm_of(job.pid))
        print(f"{backend}: idle {idle:.0f} MB; producing {vehicles} alerts", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "jobs.cli", "replay", "--alerts", str(fleet), "--bootstrap",
                        broker.bootstrap, "--topic", topic, "--quiet"], cwd=REPO_ROOT, check=True)  # fmt: skip
        got = count_records(broker.bootstrap, diag, vehicles, timeout_s)
        if got != vehicles:
            raise SystemExit(f"{backend}: {got} of {vehicles} diagnoses")
        time.sleep(2 * CHECKPOINT_S)  # a checkpoint with every session in it
        after = rss_mb(job.pid)
        heap = heap_used_after_gc_mb(jvm_of(job.pid))
        return Result(backend, vehicles, idle, after, heap_idle, heap, newest_checkpoint_mb(ckpt), os.getloadavg()[0])
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vehicles", type=int, default=10_000)
    parser.add_argument("--backends", nargs="+", choices=["hashmap", "rocksdb"], default=["hashmap", "rocksdb"])
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="vdoctor-state-mem-") as tmp:
        work = Path(tmp)
        fleet = work / "fleet.jsonl"
        write_fleet(fleet, args.vehicles)
        broker = KafkaBroker(work / "kafka").start()
        try:
            for backend in args.backends:
                results.append(run_backend(backend, broker, fleet, args.vehicles, work, args.timeout))
        finally:
            broker.stop()
    print(f"\nopen sessions: {args.vehicles} vehicles, one alert each (session left open); Kafka job on the local "
          f"MiniCluster, offline model, checkpoints every {CHECKPOINT_S} s; resident memory of the job's process tree "
          f"(median of {SAMPLES} samples)")  # fmt: skip
    print(f"{'backend':<9} {'idle MB':>8} {'after MB':>9} {'per 10k MB':>10} {'JVM heap after GC, idle -> after':>33} "
          f"{'checkpoint MB':>13} {'load':>5}")  # fmt: skip
    for r in results:
        heap = f"{r.heap_idle_mb:.0f} -> {r.heap_used_after_gc_mb:.0f} MB"
        print(f"{r.backend:<9} {r.rss_idle_mb:>8.0f} {r.rss_after_mb:>9.0f} {r.per_10k_mb:>10.0f} {heap:>33} "
              f"{r.checkpoint_mb:>13.1f} {r.load_avg:>5.1f}")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "state_memory.json").write_text(
        json.dumps([asdict(r) | {"per_10k_mb": r.per_10k_mb} for r in results], indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

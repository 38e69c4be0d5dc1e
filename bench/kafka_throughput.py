"""Alerts/s through Kafka -> diagnosis job -> Kafka, with the offline model, at parallelism 1 and 2.

Starts a real Kafka 4.x broker (the jars from `scripts/install/kafka.sh`),
generates a seeded fleet with scripts/gen_demo.py, produces it to an input
topic, then for each parallelism runs `vdoctor run --kafka` on the local
MiniCluster against fresh topics and a fresh memory store, and reads the
diagnoses topic back. Both runs happen in the same invocation, so the ratio
is measured side by side.

Figures: alerts/s (and input events/s, rechecks and lifecycle events
included) from the first diagnosis to the last (job start-up excluded), and
wall time from launch to the last diagnosis (start-up included). As a
baseline the same file also goes through `vdoctor run --alerts` (file source
and sink, no Kafka) at parallelism 1 in the same invocation, so the cost of
the Kafka path shows as a ratio. Writes a PNG plot next to the JSON results.

    .venv/bin/python bench/kafka_throughput.py                 # 600 vehicles, about 4 minutes on 2 cores
    .venv/bin/python bench/kafka_throughput.py --vins 1000 --parallelism 1 2 4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.services.kafka_flink import KafkaBroker  # noqa: E402

PARTITIONS = 4


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vins", type=int, default=600, help="fleet size for scripts/gen_demo.py (default 600)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeat", type=int, default=1, help="rounds of all runs, interleaved; the median is reported")
    p.add_argument("--no-baseline", action="store_true", help="skip the file-replay baseline run")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for one run's diagnoses")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench", help="folder for JSON and PNG")
    return p.parse_args(argv)


def _consume(bootstrap: str, topic: str, expect: int, timeout_s: float, label: str) -> tuple[int, float, float]:
    """Count records until ``expect`` arrived; return (count, first_at, last_at) in monotonic seconds."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    count, first_at, last_at = 0, 0.0, 0.0
    deadline = time.monotonic() + timeout_s
    last_print = 0.0
    try:
        while count < expect and time.monotonic() < deadline:
            for _ in consumer:
                now = time.monotonic()
                count += 1
                first_at = first_at or now
                last_at = now
                if count >= expect:
                    break
                if now - last_print > 2:
                    last_print = now
                    print(f"  [{label}] {count}/{expect} diagnoses", file=sys.stderr, flush=True)
            if time.monotonic() - last_print > 2:
                last_print = time.monotonic()
                print(f"  [{label}] {count}/{expect} diagnoses", file=sys.stderr, flush=True)
    finally:
        consumer.close()
    return count, first_at, last_at


def run_file_baseline(alerts: Path, lines: int, work: Path, round_no: int = 0) -> dict[str, float]:
    """`vdoctor run --alerts` over the same file: its summary reports events/s after the first result."""
    print("  [file baseline] vdoctor run --alerts ... (no Kafka), parallelism 1", file=sys.stderr, flush=True)
    launched = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(work / f"file-out-r{round_no}"),
         "--memory", f"sqlite:///{work}/memory-file-r{round_no}.db"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    )
    wall = time.monotonic() - launched
    found = re.search(r"wall time\s+[\d.]+ s; (\d+) events/s", proc.stdout)
    diagnoses = re.search(r"diagnoses\s+(\d+)", proc.stdout)
    if not found or not diagnoses:
        raise RuntimeError(f"unexpected vdoctor run summary:\n{proc.stdout}")
    events_per_s = float(found.group(1))
    span = lines / events_per_s
    return {
        "run": "file", "parallelism": 1, "diagnoses": int(diagnoses.group(1)),
        "alerts_per_s": int(diagnoses.group(1)) / span, "events_per_s": events_per_s,
        "startup_s": wall - span, "wall_s": wall,
    }


def run_once(broker: KafkaBroker, alerts_topic: str, expect: int, lines: int, parallelism: int, work: Path,
             timeout_s: float, round_no: int = 0) -> dict[str, float]:
    tag = f"r{round_no}-p{parallelism}"
    diag, dead = f"bench-{tag}.diagnoses", f"bench-{tag}.dead"
    broker.create_topics([diag, dead], partitions=PARTITIONS)
    log = (work / f"job-{tag}.log").open("w")
    launched = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", "--kafka", broker.bootstrap, "--alerts-topic", alerts_topic,
         "--diagnoses-topic", diag, "--dead-letters-topic", dead, "--group-id", f"bench-{tag}",
         "--parallelism", str(parallelism), "--memory", f"sqlite:///{work}/memory-{tag}.db",
         "--checkpoint-dir", str(work / f"chk-{tag}"), "--restart-attempts", "0"],
        cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        count, first_at, last_at = _consume(broker.bootstrap, diag, expect, timeout_s, f"parallelism {parallelism}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    span = last_at - first_at
    return {
        "run": "kafka",
        "parallelism": parallelism,
        "diagnoses": count,
        "expected": expect,
        "alerts_per_s": count / span if span > 0 else float("nan"),
        "events_per_s": lines / span if span > 0 else float("nan"),
        "startup_s": first_at - launched if first_at else float("nan"),
        "wall_s": last_at - launched if last_at else float("nan"),
    }


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run with the median alerts/s (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda r: r["alerts_per_s"])
    return ordered[(len(ordered) - 1) // 2]


def _plot(results: list[dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    labels = [f"{r['run']} p={int(r['parallelism'])}" for r in results]
    bars = ax.bar(labels, [r["alerts_per_s"] for r in results], color="#4477aa")
    ax.bar_label(bars, fmt="%.0f")
    ax.set_ylim(0, 1.15 * max(r["alerts_per_s"] for r in results))
    ax.set_ylabel("alerts/s (first to last diagnosis)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="vdoctor-bench-") as tmp:
        work = Path(tmp)
        alerts = work / "alerts.jsonl"
        subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gen_demo.py"), "--out", str(alerts),
                        "--vins", str(args.vins), "--seed", str(args.seed)], check=True, capture_output=True)
        expected = json.loads((work / "expected.json").read_text())
        expect, lines = int(expected["alerts"]), int(expected["lines"])
        print(f"bench: {expected['lines']} events, {expect} alerts to diagnose, {args.vins} vehicles",
              file=sys.stderr)
        broker = KafkaBroker(work / "kafka").start()
        try:
            broker.create_topics(["bench.alerts"], partitions=PARTITIONS)
            subprocess.run([sys.executable, "-m", "jobs.cli", "replay", "--alerts", str(alerts), "--bootstrap",
                            broker.bootstrap, "--topic", "bench.alerts", "--quiet"], cwd=REPO_ROOT, check=True)
            rounds: list[list[dict[str, float]]] = []
            for n in range(args.repeat):
                one = [run_once(broker, "bench.alerts", expect, lines, p, work, args.timeout, n)
                       for p in args.parallelism]
                if not args.no_baseline:
                    one.append(run_file_baseline(alerts, lines, work, n))
                rounds.append(one)
        finally:
            broker.stop()
    results = [_median(list(runs)) for runs in zip(*rounds, strict=True)]
    if args.repeat > 1:
        for runs in zip(*rounds, strict=True):
            rates = ", ".join(f"{r['alerts_per_s']:.0f}" for r in runs)
            print(f"{runs[0]['run']} p={int(runs[0]['parallelism'])}: alerts/s per round {rates}")
    print(f"\nKafka -> job -> Kafka, offline model, {lines} events ({expect} alerts), {os.cpu_count()} cores, "
          f"load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after (other work on the machine "
          "skews the figures)")
    print(f"{'run':>5}  {'parallelism':>11}  {'diagnoses':>9}  {'alerts/s':>8}  {'events/s':>8}  "
          f"{'start-up s':>10}  {'wall s':>7}")
    for r in results:
        print(f"{r['run']:>5}  {int(r['parallelism']):>11}  {int(r['diagnoses']):>9}  {r['alerts_per_s']:>8.0f}  "
              f"{r['events_per_s']:>8.0f}  {r['startup_s']:>10.1f}  {r['wall_s']:>7.1f}")
    base = results[0]
    for r in results[1:]:
        print(f"ratio {r['run']} p={int(r['parallelism'])} / kafka p={int(base['parallelism'])}: "
              f"{r['alerts_per_s'] / base['alerts_per_s']:.2f}")
    (args.out / "kafka_throughput.json").write_text(json.dumps({"median": results, "rounds": rounds}, indent=2))
    _plot(results, args.out / "kafka_throughput.png", f"Kafka -> job -> Kafka, {expect} alerts, offline model")
    print(f"results: {args.out / 'kafka_throughput.json'}, plot: {args.out / 'kafka_throughput.png'}")
    return 0 if all(r["diagnoses"] == expect for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""What a deterministic replay costs: the same fleet at concurrency 64 with and without ``--deterministic``.

Workload: the PyFlink job (`vdoctor run --model openai`, parallelism 1, the
local MiniCluster) over the demo fleet (or a generated one, ``--vins``: it
has rechecks, scrappings and vehicles that recall each other's verified
cases), the real ``openai`` client against the local model server
(devtools.model_server) answering after a fixed latency. One invocation
runs, side by side:

- the reference: concurrency 1 (one run at a time in file order), at 0 ms
  model latency (its answers do not depend on the latency; only its results
  are used);
- concurrency 64 without the rule, and with it (``--deterministic``), each at
  ``--latency-ms``, ``--repeat`` times.

For each run: alerts/s measured at the model server (first request to last
reply, so Flink's start-up is left out), and how many events' recalled cases
(``memory``) and diagnoses differ from the reference's.

    .venv/bin/python bench/deterministic_replay.py                       # the demo, 200 ms, 2 trials
    .venv/bin/python bench/deterministic_replay.py --vins 600 --repeat 1

Prints a table and writes out/bench/deterministic_replay.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.concurrency import TimedResponder  # noqa: E402
from devtools.model_server import ModelServer, ServerConfig  # noqa: E402

DEMO = REPO_ROOT / "data" / "demo" / "alerts.jsonl"
# Processing-time fields of a diagnosis: when it ran, not what it said.
PROCESSING_TIME = {"latency_ms", "model_latency_ms"}


@dataclass
class Run:
    label: str
    concurrency: int
    deterministic: bool
    latency_ms: float
    alerts: int
    alerts_per_s: float
    wall_s: float
    memory_differs: int = 0
    diagnosis_differs: int = 0
    load_avg: float = 0.0


def replay(alerts: Path, out: Path, concurrency: int, deterministic: bool, latency_ms: float,
           label: str) -> tuple[Run, dict[str, dict[str, Any]]]:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.db").unlink(missing_ok=True)
    responder = TimedResponder()
    with ModelServer(ServerConfig(latency_ms=latency_ms), responder) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "bench-key-not-secret"}
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(out),
             "--memory", f"sqlite:///{out}/memory.db", "--model", "openai", "--concurrency", str(concurrency),
             "--deterministic" if deterministic else "--no-deterministic"],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{label}: the job failed:\n{proc.stderr[-3000:]}")
    diagnoses = {}
    for line in (out / "diagnoses.jsonl").read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        diagnoses[d["event_id"]] = {k: v for k, v in d.items() if k not in PROCESSING_TIME}
    span = responder.span_s() + latency_ms / 1000.0
    run = Run(label, concurrency, deterministic, latency_ms, len(diagnoses), len(diagnoses) / span, wall,
              load_avg=os.getloadavg()[0])  # fmt: skip
    return run, diagnoses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vins", type=int, help="generate a fleet of this many vehicles instead of the demo")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--repeat", type=int, default=2, help="trials of each setting at --concurrency")
    parser.add_argument("--out", default=str(REPO_ROOT / "out" / "bench"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    work = out / "deterministic_replay"
    work.mkdir(parents=True, exist_ok=True)
    alerts = DEMO
    if args.vins:
        alerts = work / "fleet.jsonl"
        gen = [sys.executable, str(REPO_ROOT / "scripts" / "gen_demo.py"), "--out", str(alerts)]
        subprocess.run([*gen, "--vins", str(args.vins), "--seed", str(args.seed)], check=True, capture_output=True)
    print(f"fleet: {alerts.name} ({sum(1 for _ in alerts.open())} lines)", flush=True)
    reference, ref_diagnoses = replay(alerts, work / "c1", 1, False, 0.0, "concurrency 1 (reference), 0 ms")
    runs = [reference]
    for trial in range(args.repeat):
        for deterministic in (False, True):
            label = f"concurrency {args.concurrency}, {'--deterministic' if deterministic else 'no rule'}"
            run, diagnoses = replay(alerts, work / f"c{args.concurrency}-{int(deterministic)}-{trial}",
                                    args.concurrency, deterministic, args.latency_ms, label)  # fmt: skip
            run.memory_differs = sum(diagnoses.get(e, {}).get("memory") != d["memory"]
                                     for e, d in ref_diagnoses.items())
            run.diagnosis_differs = sum(diagnoses.get(e) != d for e, d in ref_diagnoses.items())
            print(f"  {label}: {run.alerts_per_s:.1f} alerts/s, {run.memory_differs} events recalled differently",
                  flush=True)  # fmt: skip
            runs.append(run)
    print(f"\n{reference.alerts} alerts; model latency {args.latency_ms:g} ms at concurrency {args.concurrency}")
    print("| run | alerts/s | events whose recall differs from concurrency 1 | diagnoses that differ | wall s | load |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        rate = "-" if r is reference else f"{r.alerts_per_s:.1f}"
        print(f"| {r.label} | {rate} | {r.memory_differs} | {r.diagnosis_differs} | {r.wall_s:.0f} "
              f"| {r.load_avg:.1f} |")
    off = [r.alerts_per_s for r in runs[1:] if not r.deterministic]
    on = [r.alerts_per_s for r in runs[1:] if r.deterministic]
    if off and on:
        print(f"\nwith the rule / without, mean of {len(on)} trial(s): {sum(on) / len(on) / (sum(off) / len(off)):.2f}")
    (out / "deterministic_replay.json").write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

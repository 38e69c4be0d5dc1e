"""Engine CPU per alert with another process on the same core: what sharing a core costs the interpreter.

Two TaskManagers on a 2-core machine share their cores with the Kafka broker,
the JobManager and the bench (``bench/scale_out.py``), while one TaskManager
leaves them the other core. Their CPU is small (0.1-0.2 of a core), but each
time one of them runs on a TaskManager's core it takes the core's caches, and
the Python interpreter, whose time goes to code and data spread over more
than a core's caches, pays for it on its next steps. This bench measures that
cost without Flink: ``bench/engine_cpu.py`` (the engine over the generated
fleet, ``use-m3`` in its child process, sessions read from their stored JSON)
pinned to one core, alone and beside a neighbour pinned to the same core,
alternating, each run in a fresh process.

A neighbour wakes every PERIOD, writes to every cache line of a buffer of
SIZE and sleeps again (numpy, so its own CPU is a small share of the core: it
is printed). It stands for a process that does little work over a lot of
memory per wake-up, as a JVM's threads do; it is not a model of the broker.

    .venv/bin/python bench/core_neighbour.py                     # none, 2 MB every 2 ms, 4 MB every 1 ms; 3 runs each
    .venv/bin/python bench/core_neighbour.py --neighbours 1024:5 4096:1 --repeat 5

Prints engine CPU ms per alert (model excluded) for each neighbour, its ratio
to the runs alone, and the neighbour's share of the core, and writes
out/bench/core_neighbour.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.procstat import tree_cpu_s  # noqa: E402

# The neighbour: writes to each cache line of its buffer, then sleeps (argv: KiB, microseconds).
_NEIGHBOUR = """
import sys, time
import numpy as np
buf = np.zeros(int(sys.argv[1]) * 1024, dtype=np.uint8)
lines = buf[::64]
pause = int(sys.argv[2]) / 1e6
while True:
    lines += 1
    time.sleep(pause)
"""


@dataclass
class Run:
    neighbour: str
    engine_ms: float
    child_ms: float
    neighbour_share: float


def parse_neighbour(text: str) -> tuple[int, int]:
    """``KIB:MS``: a neighbour writing KIB KiB every MS milliseconds."""
    try:
        kib, ms = text.split(":")
        return int(kib), int(float(ms) * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected KIB:MS (e.g. 4096:1), got {text!r}") from None


def label(neighbour: tuple[int, int] | None) -> str:
    if neighbour is None:
        return "alone"
    kib, us = neighbour
    return f"{kib / 1024:g} MB every {us / 1000:g} ms"


def engine_run(core: int, python: str, neighbour: tuple[int, int] | None, vins: int) -> Run:
    """One ``engine_cpu.py --no-stages`` run pinned to ``core``, beside ``neighbour`` on it (None: alone)."""

    def pin() -> None:
        os.sched_setaffinity(0, {core})

    side = None
    if neighbour is not None:
        side = subprocess.Popen([sys.executable, "-c", _NEIGHBOUR, *map(str, neighbour)], preexec_fn=pin)
        time.sleep(0.5)
    try:
        side_cpu_before = tree_cpu_s(side.pid) if side else 0.0
        started = time.monotonic()
        done = subprocess.run(
            [python, str(REPO_ROOT / "bench" / "engine_cpu.py"), "--embed-child", "--no-stages", "--repeat", "1",
             "--vins", str(vins)],
            check=True, capture_output=True, text=True, preexec_fn=pin, cwd=REPO_ROOT,
        )  # fmt: skip
        wall = time.monotonic() - started
        share = (tree_cpu_s(side.pid) - side_cpu_before) / wall if side else 0.0
    finally:
        if side is not None:
            side.kill()
            side.wait()
    found = json.loads(done.stdout.strip().splitlines()[-1])
    engine = float(found["process_ms_per_alert"]) - float(found.get("model_ms_per_alert", 0.0))
    return Run(label(neighbour), engine, float(found.get("child_ms_per_alert", 0.0)), share)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--neighbours", nargs="+", type=parse_neighbour, default=[(2048, 2000), (4096, 1000)],
                        metavar="KIB:MS", help="neighbours beside the engine (default 2048:2 4096:1)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (alternating)")
    parser.add_argument("--core", type=int, default=0, help="the core both are pinned to")
    parser.add_argument("--vins", type=int, default=600, help="fleet size (bench/engine_cpu.py)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the engine")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    args = parser.parse_args(argv)

    shapes: list[tuple[int, int] | None] = [None, *args.neighbours]
    runs: list[Run] = []
    total = args.repeat * len(shapes)
    for _ in range(args.repeat):
        for shape in shapes:
            print(f"run {len(runs) + 1} of {total}: {label(shape)} ...", file=sys.stderr, flush=True)
            runs.append(engine_run(args.core, args.python, shape, args.vins))

    alone = statistics.median(r.engine_ms for r in runs if r.neighbour == "alone")
    print(f"\nengine CPU per alert (model excluded), bench/engine_cpu.py --embed-child over {args.vins} vehicles, "
          f"pinned to core {args.core} with its embedding child; median of {args.repeat} alternating runs; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'neighbour on the same core':<28} {'engine ms/alert':>16} {'range':>14} {'x alone':>8} "
          f"{'child ms/alert':>15} {'its core share':>15}")  # fmt: skip
    summary = []
    for shape in shapes:
        mine = [r for r in runs if r.neighbour == label(shape)]
        engine = [r.engine_ms for r in mine]
        row = {
            "neighbour": label(shape),
            "engine_ms": statistics.median(engine),
            "range": [min(engine), max(engine)],
            "ratio": statistics.median(engine) / alone,
            "child_ms": statistics.median(r.child_ms for r in mine),
            "share": statistics.median(r.neighbour_share for r in mine),
        }
        summary.append(row)
        print(f"{row['neighbour']:<28} {row['engine_ms']:>16.3f} {min(engine):>6.3f}-{max(engine):<7.3f} "
              f"{row['ratio']:>8.2f} {row['child_ms']:>15.3f} {row['share']:>15.2f}")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "core_neighbour.json"
    path.write_text(json.dumps({"summary": summary, "runs": [asdict(r) for r in runs]}, indent=2))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

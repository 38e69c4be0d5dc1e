"""Runs per second of the diagnosis operator at several concurrencies, against the ideal bound.

Workload: the PyFlink job (`vdoctor run --model openai`, parallelism 1, the
local MiniCluster) diagnoses alerts through the real ``openai`` client against
the local OpenAI-compatible server (devtools.model_server), which
answers every call after a fixed latency. Every alert's run makes exactly 2
model calls (look the code up, then answer), so at concurrency c the ideal is
c / (2 x latency) runs/s.

The rate is measured at the model server, from the first request to the last
reply (one latency after the last request): Flink's start-up is left out, the operator's own overhead (state,
timers, polling, the engine's memory work) is in. All levels run in the same
invocation, so the ratios compare like with like.

    .venv/bin/python bench/concurrency.py                 # 1, 8, 64 at 200 ms, 3 trials each (~5 min)
    .venv/bin/python bench/concurrency.py --levels 1 8 64 256 --seconds 30 --repeat 1

Each level runs ``--repeat`` times (a fresh job each time) and the median
trial is reported with the lowest and highest: on a shared 2-core machine one
trial of the 64 level varies by a few hundredths of the ratio.

Prints a table and writes bench/out/concurrency.png (and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from devtools.model_server import ModelServer, ServerConfig, offline_responder  # noqa: E402
from vdoctor.models.base import ChatResponse, Message, ToolSpec  # noqa: E402

# Exactly 2 calls per run with the offline decision: U0140 is confirmed by
# repetition, so each alert looks the code up, then answers.
CODE = "U0140"
CALLS_PER_RUN = 2
ALERTS_PER_VIN = 4
VIN_ALPHABET = "0123456789ABCDEFGHJKLMNPRSTUVWXYZ"


@dataclass
class Level:
    concurrency: int
    events: int
    runs_per_s: float
    bound: float
    calls_per_run: float
    wall_s: float
    # Ratios of all trials of this level (the reported one is their median).
    trials: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        return self.runs_per_s / self.bound

    @property
    def spread(self) -> str:
        return f"{min(self.trials):.2f}-{max(self.trials):.2f}" if len(self.trials) > 1 else ""


def median_trial(trials: list[Level]) -> Level:
    """The trial with the median rate, carrying every trial's ratio."""
    ranked = sorted(trials, key=lambda lv: lv.runs_per_s)
    chosen = ranked[(len(ranked) - 1) // 2]
    chosen.trials = tuple(lv.ratio for lv in trials)
    return chosen


class TimedResponder:
    """Wraps the offline responder and records when the first and the last call arrived.

    The server composes a reply as a call arrives and sends it when the call's
    latency is up, so the last reply goes out one latency after the last call
    came in.
    """

    def __init__(self) -> None:
        self._inner = offline_responder()
        self._lock = threading.Lock()
        self.first: float | None = None
        self.last: float = 0.0
        self.calls = 0

    def __call__(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        arrived = time.perf_counter()
        reply = self._inner(messages, tools)
        with self._lock:
            if self.first is None:
                self.first = arrived
            self.calls += 1
            self.last = max(self.last, arrived)
        return reply


def vin(i: int) -> str:
    digits = []
    for _ in range(6):
        i, r = divmod(i, len(VIN_ALPHABET))
        digits.append(VIN_ALPHABET[r])
    return "LSVBENCH000" + "".join(reversed(digits))


def write_alerts(path: Path, vins: int) -> int:
    lines = []
    for k in range(ALERTS_PER_VIN):
        for v in range(vins):
            lines.append(
                json.dumps(
                    {
                        "type": "alert",
                        "event_id": f"b-{v}-{k}",
                        "vin": vin(v),
                        "series": "EV-A",
                        "ts": f"2026-11-01T{8 + k:02d}:00:00Z",
                        "alert_text": "CAN bus communication lost with battery module",
                        "dtc_codes": [CODE],
                        "signals": {"can_timeout_s": 0.2},
                    }
                )
            )
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def run_level(concurrency: int, latency_ms: float, seconds: float, work: Path) -> Level:
    bound = concurrency / (CALLS_PER_RUN * latency_ms / 1000.0)
    # Enough alerts to keep the level busy for ~`seconds` at the bound; at
    # least 4 per in-flight slot so that start and drain are a small share.
    vins = max(concurrency * 2, int(bound * seconds / ALERTS_PER_VIN))
    out = work / f"c{concurrency}"
    out.mkdir(parents=True, exist_ok=True)
    alerts = out / "alerts.jsonl"
    events = write_alerts(alerts, vins)
    responder = TimedResponder()
    with ModelServer(ServerConfig(latency_ms=latency_ms), responder) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "bench-key-not-secret"}
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(out),
             "--memory", f"sqlite:///{out}/memory.db", "--model", "openai",
             "--concurrency", str(concurrency)],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        while proc.poll() is None:
            time.sleep(2.0)
            print(f"  c={concurrency}: {responder.calls}/{events * CALLS_PER_RUN} model calls", flush=True)
        stdout, stderr = proc.communicate()
        wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the job failed at concurrency {concurrency}:\n{stderr[-3000:]}")
    diagnoses = [json.loads(line) for line in (out / "diagnoses.jsonl").read_text().splitlines()]
    if len(diagnoses) != events:
        raise SystemExit(f"expected {events} diagnoses at concurrency {concurrency}, got {len(diagnoses)}")
    calls = sum(d["llm_calls"] for d in diagnoses) / len(diagnoses)
    span = responder.last - (responder.first or responder.last) + latency_ms / 1000.0
    return Level(concurrency, events, len(diagnoses) / span, bound, calls, wall)


def run_pool_only(concurrency: int, latency_ms: float, seconds: float, work: Path) -> Level:
    """The same workload through the engine and KeyedRunPool in this process, without Flink.

    Separates what scheduling and the engine's own CPU cost from what the
    Flink operator adds. The model server runs as its own process, like the
    job's.
    """
    from pydantic import SecretStr

    from vdoctor.diagnosis import DiagnosisEngine
    from vdoctor.embedders.hashing import HashingEmbedder
    from vdoctor.events import parse_event
    from vdoctor.knowledge import load_pack
    from vdoctor.memory.session import DedupState
    from vdoctor.models.openai import OpenAIChatModel
    from vdoctor.runs import KeyedRunPool
    from vdoctor.stores import open_store

    bound = concurrency / (CALLS_PER_RUN * latency_ms / 1000.0)
    vins = max(concurrency * 2, int(bound * seconds / ALERTS_PER_VIN))
    out = work / f"pool-c{concurrency}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.db").unlink(missing_ok=True)
    events = write_alerts(out / "alerts.jsonl", vins)
    server = subprocess.Popen(
        [sys.executable, "-m", "devtools.model_server", "--latency-ms", str(latency_ms)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = (server.stdout.readline() if server.stdout else "").split()[-1]
        model = OpenAIChatModel("bench", SecretStr("bench-key-not-secret"), url)
        engine = DiagnosisEngine(open_store(f"sqlite:///{out / 'memory.db'}"), model, HashingEmbedder(), load_pack())

        def step(key: str, carry: tuple, item: tuple[object, str]) -> tuple[tuple, int]:
            result = engine.on_event(carry[0], carry[1], item[0], item[1])  # type: ignore[arg-type]
            return (result.session, result.dedup), sum(d.llm_calls for d in result.diagnoses)

        pool: KeyedRunPool[tuple[object, str], int] = KeyedRunPool(concurrency, step, name="bench")
        lines = (out / "alerts.jsonl").read_text().splitlines()
        started = time.perf_counter()
        for line in lines:
            event = parse_event(line)
            if pool.knows(event.vin):
                pool.add(event.vin, (event, line))
            else:
                pool.start(event.vin, (None, DedupState()), [(event, line)])
        calls = []
        for key in {parse_event(line).vin for line in lines}:
            pool.wait(key)
            calls += pool.take(key)
        wall = time.perf_counter() - started
        pool.close()
        engine.close()
    finally:
        server.terminate()
        server.communicate()
    return Level(concurrency, events, len(calls) / wall, bound, sum(calls) / len(calls), wall)


def plot(levels: list[Level], latency_ms: float, path: Path, pool_only: Level | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [lv.concurrency for lv in levels]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.plot(xs, [lv.bound for lv in levels], "k--", label=f"ideal: c / (2 x {latency_ms:g} ms)")
    ax.plot(xs, [lv.runs_per_s for lv in levels], "o-", label="measured (PyFlink, thread mode, 1 subtask)")
    if pool_only is not None:
        ax.plot([pool_only.concurrency], [pool_only.runs_per_s], "s", label="engine + run pool, no Flink")
    for lv in levels:
        ax.annotate(f"{lv.ratio:.2f}", (lv.concurrency, lv.runs_per_s), textcoords="offset points", xytext=(6, -12))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("runs in flight per subtask (concurrency)")
    ax.set_ylabel("runs / s per subtask")
    ax.set_title("Diagnosis runs per second vs. the ideal bound")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=12.0, help="target busy time per level")
    parser.add_argument("--no-pool-only", action="store_true", help="skip the Flink-free reference row")
    parser.add_argument("--repeat", type=int, default=3, help="trials per level; the median is reported")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "out"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    levels = []
    for c in args.levels:
        trials = []
        for trial in range(1, args.repeat + 1):
            print(f"concurrency {c}, trial {trial}/{args.repeat}: starting the job", flush=True)
            trials.append(run_level(c, args.latency_ms, args.seconds, out / "work"))
            print(f"  ratio {trials[-1].ratio:.3f}", flush=True)
        levels.append(median_trial(trials))
    pool_only = None
    if not args.no_pool_only:
        c = max(args.levels)
        trials = []
        for trial in range(1, args.repeat + 1):
            print(f"concurrency {c}: the run pool alone (no Flink), trial {trial}/{args.repeat}", flush=True)
            trials.append(run_pool_only(c, args.latency_ms, args.seconds, out / "work"))
        pool_only = median_trial(trials)
    print(f"\nmodel latency {args.latency_ms:g} ms, {CALLS_PER_RUN} calls per run, parallelism 1")
    print(f"median trial of {args.repeat}; 'trials' gives the lowest and highest ratio")
    print(f"{'concurrency':>11} {'events':>7} {'calls/run':>9} {'runs/s':>8} {'bound':>8} {'ratio':>6} {'trials':>10}")
    for lv in levels:
        print(
            f"{lv.concurrency:>11} {lv.events:>7} {lv.calls_per_run:>9.2f} {lv.runs_per_s:>8.1f} "
            f"{lv.bound:>8.1f} {lv.ratio:>6.2f} {lv.spread:>10}"
        )
    if pool_only is not None:
        lv = pool_only
        print(
            f"{'pool only':>11} {lv.events:>7} {lv.calls_per_run:>9.2f} {lv.runs_per_s:>8.1f} "
            f"{lv.bound:>8.1f} {lv.ratio:>6.2f} {lv.spread:>10}   (c={lv.concurrency}, engine + pool, no Flink)"
        )
    rows = [lv.__dict__ | {"ratio": lv.ratio, "trials": list(lv.trials), "flink": True} for lv in levels]
    if pool_only is not None:
        rows.append(pool_only.__dict__ | {"ratio": pool_only.ratio, "trials": list(pool_only.trials), "flink": False})
    (out / "concurrency.json").write_text(json.dumps(rows, indent=2))
    plot(levels, args.latency_ms, out / "concurrency.png", pool_only)
    print(f"plot: {out / 'concurrency.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runs per second of the diagnosis operator at several concurrencies, against the ideal bound.

Workload: the PyFlink job (`vdoctor run --model openai`, parallelism 1, the
local MiniCluster) diagnoses alerts through the real ``openai`` client against
the local OpenAI-compatible server (devtools.model_server), which
answers every call after a fixed latency. Every alert's run makes exactly 2
model calls (look the code up, then answer), so at concurrency c (model
calls in flight, ``--concurrency``) and model latency L the ideal is
c / (2 x L) runs/s. Each level names its own latency (``C@MS``): real models
answer in 1-5 s, so hundreds of runs in flight are what keeps a subtask busy.
The job runs c plus a quarter more runs by default, the extra ones doing
their memory work while the others hold the c model slots
(``vdoctor.models.gate``); ``C@MS+E`` gives it E extra runs instead (``+0``:
exactly c runs, each holding its slot through its memory work). The model
server counts the calls it has in flight at once, and the bench stops if
that ever exceeds c: the bound would not hold.

Every vehicle sends the same alert (one text, one code), and vehicles whose
runs move in step (they start together, and every call takes the same time)
ask the embedder for the same recall query and the same case text at the
same moment: a storm, whose repeated texts the embedder sends to the model
once. ``--distinct-texts`` gives each vehicle's alert its own module number,
so no recall query or case text is shared: the embedder's worst case, as
with a real model that words every cause its own way.

The rate is measured at the model server, from the first request to the last
reply (one latency after the last request): Flink's start-up is left out, the operator's own overhead (state,
timers, completion, the engine's memory work) is in. All levels run in the same
invocation, so the ratios compare like with like. Beside the rate, the job's
CPU per run (every thread of the job's process tree, JVM included, between
10% and 90% of the model calls) is printed: on a shared machine the rate
suffers from other work, the CPU per run much less. Also printed: the
model server's own CPU per call (it runs in this bench's process and shares
the cores with the job), and the "steady" ratio, the rate between 10% and 90%
of the model calls, which leaves out the start (the first runs of hundreds
of vehicles opening at once) and the drain (the last vehicles' runs, fewer
than the level in flight).

    .venv/bin/python bench/concurrency.py        # 64@200, 256@1000, 512@2000, 3 trials each (~7-15 min)
    .venv/bin/python bench/concurrency.py --levels 1@200 8@200 64@200 --repeat 1

Each level runs ``--repeat`` times (a fresh job each time) and the median
trial is reported with the lowest and highest: on a shared 2-core machine one
trial varies by a few hundredths of the ratio.

Prints a table and writes out/bench/concurrency.png (and .json), and
out/bench/concurrency-timeline.png: the model calls in flight at the server
over each level's median trial. Levels that share one latency (at least
three) also get out/bench/concurrency-curve.png, runs/s against the calls in
flight: where the rate leaves the bound, and whether it holds past it.

    .venv/bin/python bench/concurrency.py --repeat 2 --no-pool-only \
        --levels 64@1000 128@1000 256@1000 384@1000 512@1000 768@1000 1024@1000
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
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.procstat import stalled_s, tree_cpu_s  # noqa: E402
from devtools.browser import free_port  # noqa: E402
from devtools.model_server import ModelServer, ServerConfig, offline_responder  # noqa: E402
from devtools.prometheus import UNREACHABLE, scrape  # noqa: E402
from operators.metrics import PROMETHEUS_PREFIX  # noqa: E402
from vdoctor.embedders import query_file  # noqa: E402
from vdoctor.models.base import ChatResponse, Message, ToolSpec  # noqa: E402
from vdoctor.settings import RuntimeSettings  # noqa: E402

# Exactly 2 calls per run with the offline decision: U0140 is confirmed by
# repetition, so each alert looks the code up, then answers.
CODE = "U0140"
ALERT_TEXT = "CAN bus communication lost with battery module"
CALLS_PER_RUN = 2
ALERTS_PER_VIN = 4
VIN_ALPHABET = "0123456789ABCDEFGHJKLMNPRSTUVWXYZ"


@dataclass
class Level:
    concurrency: int
    latency_ms: float
    events: int
    runs_per_s: float
    bound: float
    calls_per_run: float
    wall_s: float
    # CPU of the job's whole process tree per run, in ms (0 where not measured).
    cpu_ms_per_run: float = 0.0
    load_avg: float = 0.0
    # CPU of the model server (this bench's own process) per model call, in ms: work the 2 cores also do.
    server_ms_per_call: float = 0.0
    # Runs/s between 10% and 90% of the model calls: the rate once started and before the drain.
    steady_runs_per_s: float = 0.0
    # Ratios of all trials of this level (the reported one is their median).
    trials: tuple[float, ...] = ()
    # From the job's own metrics (the last 1,000 of each, at the last scrape), in ms: p50 and p95 of
    # embedding what a concluding run writes (the wait for a shared model call included) and of the
    # L3 write itself; empty where not scraped.
    embed_ms: tuple[float, ...] = ()
    write_ms: tuple[float, ...] = ()
    # --extra-runs given to the job (None: the product's default).
    extra_runs: int | None = None
    # The most model calls the server had in flight at once: never more than ``concurrency``.
    peak_calls: int = 0
    # Model calls in flight at the server every TIMELINE_STEP_S from the first call to the last reply.
    in_flight: tuple[int, ...] = ()
    # Shares of the trial's wall time in which some task of the machine waited for a core, and for the disk
    # (``procstat.stalled_s``; None where the kernel keeps no pressure figures): a trial starved by other work
    # shows here, a slow one that had its cores does not.
    stall_cpu: float | None = None
    stall_io: float | None = None

    @property
    def ratio(self) -> float:
        return self.runs_per_s / self.bound

    @property
    def runs_in_flight(self) -> int:
        """The job's runs in flight at this level: ``concurrency`` plus the extra runs."""
        return RuntimeSettings(concurrency=self.concurrency, extra_runs=self.extra_runs).runs_in_flight()

    @property
    def label(self) -> str:
        extra = "" if self.extra_runs is None else f" +{self.extra_runs}"
        return f"{self.concurrency} @ {self.latency_ms:g} ms{extra}"

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
    """Wraps the offline responder and records when each call arrived.

    The server composes a reply as a call arrives and sends it when the call's
    latency is up, so the last reply goes out one latency after the last call
    came in.
    """

    def __init__(self) -> None:
        self._inner = offline_responder()
        self._lock = threading.Lock()
        self.arrivals: list[float] = []

    def __call__(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        arrived = time.perf_counter()
        reply = self._inner(messages, tools)
        with self._lock:
            self.arrivals.append(arrived)
        return reply

    @property
    def calls(self) -> int:
        return len(self.arrivals)

    def span_s(self) -> float:
        """From the first call's arrival to the last call's (0 before two calls)."""
        return max(self.arrivals) - min(self.arrivals) if self.arrivals else 0.0


def vin(i: int) -> str:
    digits = []
    for _ in range(6):
        i, r = divmod(i, len(VIN_ALPHABET))
        digits.append(VIN_ALPHABET[r])
    return "LSVBENCH000" + "".join(reversed(digits))


def write_alerts(path: Path, vins: int, distinct: bool = False) -> int:
    """``ALERTS_PER_VIN`` alerts per vehicle, all of one code; ``distinct``: each vehicle's alert text its own."""
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
                        "alert_text": f"{ALERT_TEXT} {v + 1}" if distinct else ALERT_TEXT,
                        "dtc_codes": [CODE],
                        "signals": {"can_timeout_s": 0.2},
                    }
                )
            )
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def cpu_ms_per_run(samples: list[tuple[int, float]], total_calls: int) -> float:
    """From (model calls so far, job CPU s) samples: CPU per run between 10% and 90% of the calls."""
    inside = [(c, cpu) for c, cpu in samples if 0.1 * total_calls <= c <= 0.9 * total_calls]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return 0.0
    runs = (inside[-1][0] - inside[0][0]) / CALLS_PER_RUN
    return (inside[-1][1] - inside[0][1]) / runs * 1000.0


def steady_rate(samples: list[tuple[int, float]], total_calls: int) -> float:
    """From (model calls so far, wall s) samples: runs/s between 10% and 90% of the calls (0: too few samples)."""
    ms_per_run = cpu_ms_per_run(samples, total_calls)  # the same window, with wall time in place of CPU
    return 1000.0 / ms_per_run if ms_per_run > 0 else 0.0


TIMELINE_STEP_S = 0.05


def in_flight_timeline(arrivals: list[float], latency_s: float, step_s: float = TIMELINE_STEP_S) -> tuple[int, ...]:
    """Calls in flight at the model server every ``step_s`` from the first arrival to the last reply: a call
    arriving at ``a`` is in flight over [a, a + latency) (the server answers after the latency)."""
    import numpy as np

    if not arrivals:
        return ()
    times = np.sort(np.asarray(arrivals, dtype=np.float64) - min(arrivals))
    grid = np.arange(0.0, times[-1] + latency_s, step_s)
    started = np.searchsorted(times, grid, side="right")
    ended = np.searchsorted(times, grid - latency_s, side="right")
    return tuple((started - ended).tolist())


def scrape_quantiles(port: int, names: tuple[str, ...]) -> dict[str, tuple[float, ...]]:
    """p50 and p95 in ms of the job's microsecond histograms ``names`` (empty if the endpoint is not up)."""
    try:
        samples = scrape(port, timeout_s=2.0)
    except UNREACHABLE:
        return {}
    found: dict[str, tuple[float, ...]] = {}
    for name in names:
        series = samples.get(PROMETHEUS_PREFIX + name, [])
        quantile = {labels.get("quantile"): value / 1000.0 for labels, value in series}
        if "0.5" in quantile and "0.95" in quantile:
            found[name] = (quantile["0.5"], quantile["0.95"])
    return found


class Stalls:
    """Pressure stall seconds at a trial's start (``procstat.stalled_s``), to give its shares at the end."""

    def __init__(self) -> None:
        self._start = {resource: stalled_s(resource) for resource in ("cpu", "io")}

    def shares(self, wall_s: float) -> dict[str, float | None]:
        """``stall_cpu`` and ``stall_io`` of a ``Level`` over ``wall_s`` seconds since the start."""
        out: dict[str, float | None] = {}
        for resource, start in self._start.items():
            now = stalled_s(resource)
            out[f"stall_{resource}"] = None if start is None or now is None else (now - start) / wall_s
        return out


def parse_level(text: str, default_latency_ms: float) -> tuple[int, float, int | None]:
    """``C@MS+E`` -> (concurrency, latency in ms, extra runs); ``@MS`` and ``+E`` may be left out
    (the default latency; the product's default extra runs, None)."""
    head, _, extra = text.partition("+")
    c, _, ms = head.partition("@")
    return int(c), float(ms) if ms else default_latency_ms, int(extra) if extra else None


def run_level(
    concurrency: int,
    latency_ms: float,
    seconds: float,
    work: Path,
    rate_factor: float = 0.0,
    distinct: bool = False,
    extra_runs: int | None = None,
) -> Level:
    bound = concurrency / (CALLS_PER_RUN * latency_ms / 1000.0)
    # Enough alerts to keep the level busy for ~`seconds` at the bound; at
    # least 4 per in-flight slot so that start and drain are a small share.
    vins = max(concurrency * 2, int(bound * seconds / ALERTS_PER_VIN))
    out = work / (f"c{concurrency}-{latency_ms:g}ms" + ("" if extra_runs is None else f"+{extra_runs}"))
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("memory.db", "memory.db" + query_file.SUFFIX):  # every trial starts from an empty store and file
        (out / stale).unlink(missing_ok=True)
    alerts = out / "alerts.jsonl"
    events = write_alerts(alerts, vins, distinct)
    responder = TimedResponder()
    metrics_port = free_port()
    histograms: dict[str, tuple[float, ...]] = {}
    with ModelServer(ServerConfig(latency_ms=latency_ms), responder) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "bench-key-not-secret"}
        started, stalls = time.perf_counter(), Stalls()
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(out),
             "--memory", f"sqlite:///{out}/memory.db", "--model", "openai",
             "--concurrency", str(concurrency), "--metrics-port", str(metrics_port),
             *(["--rate", f"{rate_factor * bound:.1f}"] if rate_factor else []),
             *(["--extra-runs", str(extra_runs)] if extra_runs is not None else [])],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        samples: list[tuple[int, float]] = []
        server_samples: list[tuple[int, float]] = []
        clock_samples: list[tuple[int, float]] = []
        last_print = time.perf_counter()
        while proc.poll() is None:
            time.sleep(0.5)
            samples.append((responder.calls, tree_cpu_s(proc.pid)))
            server_samples.append((responder.calls, time.process_time()))
            clock_samples.append((responder.calls, time.perf_counter()))
            if time.perf_counter() - last_print > 2.0:
                last_print = time.perf_counter()
                print(f"  c={concurrency}: {responder.calls}/{events * CALLS_PER_RUN} model calls", flush=True)
                histograms |= scrape_quantiles(metrics_port, ("l3_embed_latency_us", "l3_write_latency_us"))
        stdout, stderr = proc.communicate()
        wall = time.perf_counter() - started
        peak = server.peak_in_flight
    if proc.returncode != 0:
        raise SystemExit(f"the job failed at concurrency {concurrency}:\n{stderr[-3000:]}")
    diagnoses = [json.loads(line) for line in (out / "diagnoses.jsonl").read_text().splitlines()]
    if len(diagnoses) != events:
        raise SystemExit(f"expected {events} diagnoses at concurrency {concurrency}, got {len(diagnoses)}")
    if peak > concurrency:  # the bound assumes at most `concurrency` calls in flight
        raise SystemExit(f"the model server saw {peak} calls at once at concurrency {concurrency}")
    calls = sum(d["llm_calls"] for d in diagnoses) / len(diagnoses)
    span = responder.span_s() + latency_ms / 1000.0
    return Level(concurrency, latency_ms, events, len(diagnoses) / span, bound, calls, wall,
                 cpu_ms_per_run(samples, events * CALLS_PER_RUN), os.getloadavg()[0],
                 cpu_ms_per_run(server_samples, events * CALLS_PER_RUN) / CALLS_PER_RUN,
                 steady_rate(clock_samples, events * CALLS_PER_RUN),
                 embed_ms=histograms.get("l3_embed_latency_us", ()),
                 write_ms=histograms.get("l3_write_latency_us", ()), extra_runs=extra_runs,
                 peak_calls=peak, in_flight=in_flight_timeline(responder.arrivals, latency_ms / 1000.0),
                 **stalls.shares(wall))  # fmt: skip


def run_pool_only(
    concurrency: int,
    latency_ms: float,
    seconds: float,
    work: Path,
    distinct: bool = False,
    extra_runs: int | None = None,
) -> Level:
    """The same workload through the engine and KeyedRunPool in this process, without Flink.

    Separates what scheduling and the engine's own CPU cost from what the
    Flink operator adds. The model server runs as its own process, like the
    job's. Runs in flight and model slots as in the job.
    """
    from pydantic import SecretStr

    from vdoctor.diagnosis import DiagnosisEngine
    from vdoctor.embedders.hashing import HashingEmbedder
    from vdoctor.events import parse_event
    from vdoctor.knowledge import load_pack
    from vdoctor.memory.session import DedupState
    from vdoctor.models.gate import GatedChatModel, ModelGate
    from vdoctor.models.openai import OpenAIChatModel
    from vdoctor.runs import KeyedRunPool, tune_gc_for_runs
    from vdoctor.stores import open_store

    bound = concurrency / (CALLS_PER_RUN * latency_ms / 1000.0)
    vins = max(concurrency * 2, int(bound * seconds / ALERTS_PER_VIN))
    out = work / f"pool-c{concurrency}-{latency_ms:g}ms"
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.db").unlink(missing_ok=True)
    events = write_alerts(out / "alerts.jsonl", vins, distinct)
    server = subprocess.Popen(
        [sys.executable, "-m", "devtools.model_server", "--latency-ms", str(latency_ms)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = (server.stdout.readline() if server.stdout else "").split()[-1]
        model = GatedChatModel(OpenAIChatModel("bench", SecretStr("bench-key-not-secret"), url), ModelGate(concurrency))
        engine = DiagnosisEngine(open_store(f"sqlite:///{out / 'memory.db'}"), model, HashingEmbedder(), load_pack())
        tune_gc_for_runs()  # as the operator does

        def step(key: str, carry: tuple[Any, Any], item: tuple[object, str]) -> tuple[tuple[Any, Any], int]:
            result = engine.on_event(carry[0], carry[1], item[0], item[1])  # type: ignore[arg-type]
            return (result.session, result.dedup), sum(d.llm_calls for d in result.diagnoses)

        runs = RuntimeSettings(concurrency=concurrency, extra_runs=extra_runs).runs_in_flight()  # as the operator
        pool: KeyedRunPool[tuple[object, str], int] = KeyedRunPool(runs, step, name="bench")
        lines = (out / "alerts.jsonl").read_text().splitlines()
        started, cpu0, stalls = time.perf_counter(), time.process_time(), Stalls()
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
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
        shares = stalls.shares(wall)
        pool.close()
        engine.close()
    finally:
        server.terminate()
        server.communicate()
    return Level(concurrency, latency_ms, events, len(calls) / wall, bound, sum(calls) / len(calls), wall,
                 cpu / len(calls) * 1000.0, os.getloadavg()[0], extra_runs=extra_runs, **shares)  # fmt: skip


def plot(levels: list[Level], path: Path, pool_only: Level | None = None, distinct: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.2))
    xs = list(range(len(levels)))
    ticks = [lv.label.replace(" @ ", " @\n").replace(" +", "\n+") for lv in levels]
    ax.bar([x - 0.2 for x in xs], [lv.bound for lv in levels], 0.4, color="#bbbbbb", label="ideal c / (2 x latency)")
    bars = ax.bar([x + 0.2 for x in xs], [lv.runs_per_s for lv in levels], 0.4, color="#4477aa",
                  label="measured (PyFlink, thread mode, 1 subtask)")  # fmt: skip
    ax.bar_label(bars, labels=[f"{lv.ratio:.2f}\n(steady {lv.steady_runs_per_s / lv.bound:.2f})" for lv in levels],
                 fontsize=8)  # fmt: skip
    ax.set_xticks(xs, ticks)
    ax.set_xlabel("model calls in flight (--concurrency) @ model latency [+ extra runs]")
    ax.set_ylabel("runs / s per subtask (median trial)")
    ax.set_title("Diagnosis runs per second vs. the ideal bound" + (" (--distinct-texts)" if distinct else ""))
    ax.set_ylim(0, 1.3 * max(lv.bound for lv in levels))  # room for the labels and the pool's note above the bars
    ax.legend(fontsize=8, loc="lower right")
    ax2.bar(xs, [lv.cpu_ms_per_run for lv in levels], color="#cc6677")
    ax2.set_xticks(xs, ticks)
    ax2.set_ylabel("job CPU per run, ms (all threads, JVM included)")
    ax2.set_title("CPU per run")
    # A concluding run's waits beside its time in the model (2 x latency), p50 with p95 as the error bar.
    width = 0.27
    for shift, name, values, color in ((-width, "case embedding", [lv.embed_ms for lv in levels], "#ddaa33"),
                                       (0.0, "L3 write", [lv.write_ms for lv in levels], "#228833")):  # fmt: skip
        p50 = [v[0] if v else 0.0 for v in values]
        p95 = [v[1] - v[0] if v else 0.0 for v in values]
        ax3.bar([x + shift for x in xs], p50, width, yerr=[[0.0] * len(xs), p95], capsize=3, color=color,
                label=f"{name}, p50 (bar to p95)")  # fmt: skip
    ax3.bar([x + width for x in xs], [2 * lv.latency_ms for lv in levels], width, color="#bbbbbb",
            label="the run's 2 model calls")  # fmt: skip
    ax3.set_xticks(xs, ticks)
    ax3.set_ylabel("ms")
    ax3.set_title("A concluding run's waits (job metrics)")
    ax3.legend(fontsize=8, loc="upper left")
    if pool_only is not None:
        ax.annotate(f"engine + pool alone, {pool_only.label}: {pool_only.ratio:.2f} of the bound",
                    (0.01, 0.97), xycoords="axes fraction", fontsize=8, va="top")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_timeline(levels: list[Level], path: Path) -> None:
    """Model calls in flight over each level's median trial, against its ``--concurrency``: the start (runs
    opening at once), waves of runs concluding together, and the drain (the last vehicles' runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [lv for lv in levels if lv.in_flight]
    if not shown:
        return
    fig, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 3.6), squeeze=False)
    for ax, lv in zip(axes[0], shown, strict=True):
        xs = [i * TIMELINE_STEP_S for i in range(len(lv.in_flight))]
        ax.plot(xs, lv.in_flight, color="#4477aa", lw=1.0, label="calls in flight at the model server")
        ax.axhline(lv.concurrency, color="#bbbbbb", ls="--", lw=1.0, label=f"--concurrency {lv.concurrency}")
        ideal = lv.events / lv.bound
        ax.axvline(ideal, color="#cc6677", ls=":", lw=1.0, label=f"the bound's time, {ideal:.1f} s")
        ax.set_title(f"{lv.label}: ratio {lv.ratio:.2f}", fontsize=10)
        ax.set_xlabel("s from the first model call")
        ax.set_ylim(0, lv.concurrency * 1.15)
        ax.legend(fontsize=7, loc="lower center")
    axes[0][0].set_ylabel("model calls in flight")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_curve(levels: list[Level], path: Path) -> bool:
    """Runs per second against the model calls in flight, at one model latency: where the rate leaves the bound
    (the cores are full) and whether it holds past it. Drawn only when at least three levels share one latency
    and run the job's default extra runs; returns whether it was."""
    shown = sorted((lv for lv in levels if lv.extra_runs is None), key=lambda lv: lv.concurrency)
    if len(shown) < 3 or len({lv.latency_ms for lv in shown}) != 1:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    xs = [lv.concurrency for lv in shown]
    ax.plot(xs, [lv.bound for lv in shown], color="#bbbbbb", ls="--", marker="o", label="ideal c / (2 x latency)")
    # A trial's rate is its ratio times the level's bound.
    low = [lv.runs_per_s - min(lv.trials) * lv.bound if lv.trials else 0.0 for lv in shown]
    high = [max(lv.trials) * lv.bound - lv.runs_per_s if lv.trials else 0.0 for lv in shown]
    ax.errorbar(xs, [lv.runs_per_s for lv in shown], yerr=[low, high], color="#4477aa", marker="o", capsize=3,
                label="measured, median trial (bars: lowest and highest)")  # fmt: skip
    for lv in shown:
        ax.annotate(f"{lv.cpu_ms_per_run:.1f} ms", (lv.concurrency, lv.runs_per_s), textcoords="offset points",
                    xytext=(0, -14), ha="center", fontsize=7, color="#cc6677")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    top = 1.1 * max(max(lv.bound for lv in shown), max(lv.runs_per_s for lv in shown))
    ax.set_ylim(-0.06 * top, top)  # room below the lowest point for its CPU label
    ax.set_xlabel(f"model calls in flight (--concurrency), each answered after {shown[0].latency_ms:g} ms")
    ax.set_ylabel("runs / s per subtask")
    ax.set_title("Past the cores' capacity (red: the job's CPU ms per run)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def _row(lv: Level, name: str = "") -> str:
    steady = f"{lv.steady_runs_per_s / lv.bound:.2f}" if lv.steady_runs_per_s else "-"  # not measured
    server = f"{lv.server_ms_per_call:.2f}" if lv.server_ms_per_call else "-"  # the pool-only row's server is apart
    embed = "/".join(f"{v:.0f}" for v in lv.embed_ms) or "-"  # the pool-only row has no metrics
    write = "/".join(f"{v:.0f}" for v in lv.write_ms) or "-"
    peak = str(lv.peak_calls) if lv.peak_calls else "-"  # the pool-only row's server is apart
    stall = "/".join("-" if v is None else f"{100 * v:.0f}" for v in (lv.stall_cpu, lv.stall_io))
    return (
        f"{name or lv.label:>20} {lv.runs_in_flight:>5} {peak:>5} {lv.events:>7} {lv.calls_per_run:>9.2f} "
        f"{lv.runs_per_s:>8.1f} {lv.bound:>8.1f} "
        f"{lv.ratio:>6.2f} {lv.spread:>10} {steady:>6} {lv.cpu_ms_per_run:>11.1f} {server:>14} {lv.load_avg:>5.1f}"
        f" {embed:>11} {write:>11} {stall:>9}"
    )


def _json(lv: Level, flink: bool) -> dict[str, Any]:
    derived = {"ratio": lv.ratio, "runs_in_flight": lv.runs_in_flight, "trials": list(lv.trials), "flink": flink}
    return lv.__dict__ | derived


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", nargs="+", default=["64@200", "256@1000", "512@2000"],
                        help="concurrency@latency-ms[+extra-runs] per level (a bare concurrency uses --latency-ms; "
                        "without +N the job's default extra runs, a quarter of the concurrency)")  # fmt: skip
    parser.add_argument("--latency-ms", type=float, default=200.0, help="latency of levels given without one")
    parser.add_argument("--seconds", type=float, default=12.0, help="target busy time per level")
    parser.add_argument("--no-pool-only", action="store_true", help="skip the Flink-free reference row")
    parser.add_argument("--repeat", type=int, default=3, help="trials per level; the median is reported")
    parser.add_argument("--rate-factor", type=float, default=0.0,
                        help="stream the file at this multiple of the bound (events/s) instead of all at once: "
                        "events arrive while runs finish, as from Kafka")  # fmt: skip
    parser.add_argument("--distinct-texts", action="store_true",
                        help="each vehicle's alert text names its own battery module, so no two vehicles' recall "
                        "queries or case texts are alike and the embedder shares none (by default every vehicle "
                        "sends the same alert, and the texts of runs in step go to the model once)")  # fmt: skip
    parser.add_argument("--out", default=str(REPO_ROOT / "out" / "bench"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    levels = []
    for c, latency, extra in (parse_level(t, args.latency_ms) for t in args.levels):
        trials = []
        for trial in range(1, args.repeat + 1):
            more = "" if extra is None else f", {extra} extra runs"
            print(f"concurrency {c} @ {latency:g} ms{more}, trial {trial}/{args.repeat}: starting the job", flush=True)
            trials.append(
                run_level(c, latency, args.seconds, out / "work", args.rate_factor, args.distinct_texts, extra)
            )
            print(f"  ratio {trials[-1].ratio:.3f}, {trials[-1].cpu_ms_per_run:.1f} ms CPU per run", flush=True)
        levels.append(median_trial(trials))
    pool_only = None
    if not args.no_pool_only:
        c, latency, extra = levels[-1].concurrency, levels[-1].latency_ms, levels[-1].extra_runs
        trials = []
        for trial in range(1, args.repeat + 1):
            print(f"concurrency {c} @ {latency:g} ms: the run pool alone (no Flink), trial {trial}/{args.repeat}")
            trials.append(run_pool_only(c, latency, args.seconds, out / "work", args.distinct_texts, extra))
        pool_only = median_trial(trials)
    print(f"\n{CALLS_PER_RUN} model calls per run, parallelism 1, thread mode, {os.cpu_count()} cores; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")  # fmt: skip
    print(f"median trial of {args.repeat}; 'trials' gives the lowest and highest ratio; 'load' at the trial's end")
    if args.distinct_texts:
        print("every vehicle's alert text its own (--distinct-texts): no recall query or case text is shared")
    if args.rate_factor:
        print(f"input streamed at {args.rate_factor:g} x the bound (events/s), not read all at once")
    print(f"{'level':>20} {'runs':>5} {'peak':>5} {'events':>7} {'calls/run':>9} {'runs/s':>8} {'bound':>8} "
          f"{'ratio':>6} {'trials':>10} {'steady':>6} {'CPU ms/run':>11} {'server ms/call':>14} {'load':>5} "
          f"{'embed ms':>11} {'L3 write ms':>11} {'stall %':>9}")  # fmt: skip
    print(
        "'level': model calls in flight (--concurrency) @ latency [+ --extra-runs, else the default, a quarter];"
        " 'runs': runs in flight; 'peak': the most calls the model server had at once"
    )
    print("'ratio': runs/s from the first call to the last reply, over the bound; 'steady': the same between 10% and"
          " 90% of the calls (start and drain left out)")  # fmt: skip
    print("'CPU ms/run': the job's process tree; 'server ms/call': the model server's CPU (this process), which"
          " shares the cores")  # fmt: skip
    print("'embed ms', 'L3 write ms': p50/p95 from the job's metrics (last 1,000 writes): a concluding run embedding"
          " its case (waits for shared model calls included), then writing it")  # fmt: skip
    print("'stall %': the share of the trial's wall time in which some task of the machine waited for a core / for"
          " the disk (Linux pressure stall information; '-' where the kernel keeps none): a trial starved by other"
          " work shows here")  # fmt: skip
    for lv in levels:
        print(_row(lv))
    if pool_only is not None:
        print(_row(pool_only, f"pool {pool_only.label}") + "   (engine + pool in one process, no Flink)")
    rows = [_json(lv, flink=True) for lv in levels]
    if pool_only is not None:
        rows.append(_json(pool_only, flink=False))
    (out / "concurrency.json").write_text(json.dumps(rows, indent=2))
    plot(levels, out / "concurrency.png", pool_only, args.distinct_texts)
    plot_timeline(levels, out / "concurrency-timeline.png")
    curve = plot_curve(levels, out / "concurrency-curve.png")
    print(
        f"plots: {out / 'concurrency.png'}, {out / 'concurrency-timeline.png'} (calls in flight over time)"
        + (f", {out / 'concurrency-curve.png'} (runs/s against calls in flight)" if curve else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

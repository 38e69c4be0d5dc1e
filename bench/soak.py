"""Soak: a steady replay for a long time, with faults on a schedule, nothing lost or doubled.

The production path, for real: a Kafka 4 broker (started from the jars that
``scripts/setup.sh`` fetched), ``vdoctor replay --rate`` producing a large
generated fleet to the alerts topic at a steady rate, and ``vdoctor run
--kafka`` consuming it with ``--model openai`` against the local model server
(the real ``openai`` client over HTTP), RocksDB checkpoints every 5 s, and
diagnoses and dead letters written to their topics. On a schedule the soak
injects:

- model storms: for ``--storm-s`` seconds every ``--storm-every-s``, 30% of
  model calls answer 500 and 10% answer 429 (retried with backoff, or the run
  is flagged ``model_failed``);
- crashes: every ``--kill-every-s`` the job's whole process group is killed
  (SIGKILL) and the job is restarted from its newest complete checkpoint
  (``--from-savepoint``), as an operator would after a crash.

Long-term-memory outages are covered by tests/integration/test_store_outage.py
(a real MariaDB behind a proxy); this soak runs on the embedded store.

Every ``--sample-s`` it records the job's resident memory (the process tree)
and the checkpoint size (the keyed state), and reads the job's malloc
trimmer figures from its Prometheus endpoint (``--metrics-port``: trims,
their time, the memory they gave back; ``VDOCTOR_MALLOC_TRIM_S``). At the
end it reports events in and out, dead letters, L3 records, losses and
duplicates, and plots memory and state over time.

Diagnoses are delivered at least once (what a killed job emitted after its
last checkpoint is emitted again by the restored job), so duplicates are
counted raw and by event_id, which is what downstream consumers key on. L3
records are unique by (vin, session_id) and must never double; a loss is a
valid alert without any diagnosis, or a concluded session without its
L3 record.

Usage: .venv/bin/python bench/soak.py [--minutes 30] [--rate 8] [--vins 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.procstat import tree_rss_mb  # noqa: E402
from devtools.browser import free_port  # noqa: E402
from devtools.model_server import ModelServer, ServerConfig  # noqa: E402
from devtools.prometheus import UNREACHABLE, scrape  # noqa: E402
from jobs.job_settings import latest_checkpoint  # noqa: E402
from operators.metrics import PROMETHEUS_PREFIX  # noqa: E402
from tests.services.kafka_flink import KafkaBroker, read_topic  # noqa: E402
from vdoctor.errors import EventError  # noqa: E402
from vdoctor.events import AlertEvent, parse_event  # noqa: E402
from vdoctor.malloc_trim import TRIM_FIGURES  # noqa: E402

STORM_RATES = {"500": 0.3, "429": 0.1}
TOPIC, DIAGNOSES, DEAD = "soak-alerts", "soak-diagnoses", "soak-dead-letters"
# After the last line is produced, the job gets this long to drain before it is stopped.
DRAIN_S = 90.0


def _dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6 if path.exists() else 0.0


def _trim_figures(port: int) -> dict[str, int] | None:
    """The job's malloc trimmer totals now (one subtask: parallelism 1), or None if its endpoint does not answer."""
    try:
        samples = scrape(port)
    except UNREACHABLE:
        return None
    found = {name: samples.get(PROMETHEUS_PREFIX + name) for name in TRIM_FIGURES}
    if not all(found.values()):
        return None
    return {name: int(max(v for _, v in values or [])) for name, values in found.items()}


def _start_job(bootstrap: str, ckpt: Path, db: Path, url: str, restore: Path | None, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "jobs.cli", "run", "--kafka", bootstrap, "--alerts-topic", TOPIC,
           "--diagnoses-topic", DIAGNOSES, "--dead-letters-topic", DEAD, "--group-id", "soak",
           "--memory", f"sqlite:///{db}", "--knowledge", "memory://", "--model", "openai",
           "--checkpoint-dir", str(ckpt), "--checkpoint-interval-ms", "5000", "--metrics-port", str(port)]  # fmt: skip
    if restore is not None:
        cmd += ["--from-savepoint", str(restore)]
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "soak-local", "VDOCTOR_MODEL_MAX_ATTEMPTS": "3"}
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip


def _growth_after(samples: list[tuple[float, float, float, int]], start_s: float) -> dict[str, float]:
    """Resident memory from ``start_s`` (warm-up over) to the last sample, and its growth in per cent."""
    later = [s for s in samples if s[0] >= start_s]
    if not later:
        return {}
    first, last = later[0][1], later[-1][1]
    return {"rss_mb_after_warmup": first, "rss_mb_last": last,
            "rss_growth_after_warmup_pct": round((last - first) / first * 100, 2) if first else 0.0}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=8.0, help="input lines per second")
    parser.add_argument("--vins", type=int, default=3000)
    parser.add_argument("--storm-every-s", type=float, default=300.0)
    parser.add_argument("--storm-s", type=float, default=60.0)
    parser.add_argument("--kill-every-s", type=float, default=600.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "out" / "bench" / "soak.png")
    parser.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args(argv)

    work = args.work or Path(tempfile.mkdtemp(prefix="vdoctor-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    full = work / "fleet.jsonl"
    subprocess.run([sys.executable, "scripts/gen_demo.py", "--vins", str(args.vins), "--out", str(full)],
                   cwd=REPO_ROOT, check=True, stderr=subprocess.DEVNULL)  # fmt: skip
    lines = full.read_text(encoding="utf-8").splitlines()
    wanted = int(args.minutes * 60 * args.rate)
    alerts = work / "soak.jsonl"
    alerts.write_text("\n".join(lines[:wanted]) + "\n", encoding="utf-8")
    print(f"[soak] {min(wanted, len(lines))} lines at {args.rate}/s for {args.minutes} min; work folder {work}",
          file=sys.stderr, flush=True)  # fmt: skip

    ckpt, db = work / "checkpoints", work / "memory.db"
    samples: list[tuple[float, float, float, int]] = []
    kills = storms = 0
    broker = KafkaBroker(work / "kafka").start()
    try:
        with ModelServer(ServerConfig(latency_ms=50, jitter_ms=20, seed=7)) as server:
            replay = subprocess.Popen(
                [sys.executable, "-m", "jobs.cli", "replay", "--alerts", str(alerts), "--bootstrap", broker.bootstrap,
                 "--topic", TOPIC, "--rate", str(args.rate), "--quiet"],
                cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            port = free_port()
            trims: dict[str, int] | None = None
            job = _start_job(broker.bootstrap, ckpt, db, server.base_url, None, port)
            t0 = time.monotonic()
            next_kill, next_storm, storm_end, drain_until = args.kill_every_s, args.storm_every_s, -1.0, -1.0
            while True:
                time.sleep(args.sample_s)
                now = time.monotonic() - t0
                if storm_end > 0 and now >= storm_end:
                    server.config.error_rates.clear()
                    storm_end = -1.0
                if now >= next_storm and replay.poll() is None:
                    server.config.error_rates.update(STORM_RATES)
                    storm_end, next_storm, storms = now + args.storm_s, next_storm + args.storm_every_s, storms + 1
                samples.append((now, tree_rss_mb(job.pid), _dir_mb(ckpt), server.stats["ok"]))
                trims = _trim_figures(port) or trims
                print(f"[soak] t={now:6.0f}s rss={samples[-1][1]:6.0f} MB state={samples[-1][2]:6.1f} MB "
                      f"model calls ok={server.stats['ok']} storms={storms} kills={kills}"
                      + (f" trims={trims['malloc_trims']} ({trims['malloc_trim_ms']} ms, "
                         f"{trims['malloc_trim_released_mb']} MB back)" if trims else ""),
                      file=sys.stderr, flush=True)  # fmt: skip
                if job.poll() is not None:
                    print(f"[soak] the job exited with {job.returncode}", file=sys.stderr)
                    return 1
                if now >= next_kill and replay.poll() is None:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
                    kills, next_kill = kills + 1, next_kill + args.kill_every_s
                    job = _start_job(broker.bootstrap, ckpt, db, server.base_url, latest_checkpoint(ckpt), port)
                if replay.poll() is not None and drain_until < 0:
                    server.config.error_rates.clear()
                    drain_until = now + DRAIN_S
                if drain_until > 0 and now >= drain_until:
                    break
            job.send_signal(signal.SIGTERM)  # a clean stop: the job is cancelled
            job.wait(timeout=120)
            model_stats = dict(server.stats)
        diags = [json.loads(v) for _, v in read_topic(broker.bootstrap, DIAGNOSES, 10**9, 60.0, committed_only=False)]
        dead = [json.loads(v) for _, v in read_topic(broker.bootstrap, DEAD, 10**9, 20.0, committed_only=False)]
    finally:
        broker.stop()

    valid: list[str] = []
    for line in alerts.read_text(encoding="utf-8").splitlines():
        try:
            event = parse_event(line)
        except EventError:
            continue
        if isinstance(event, AlertEvent):
            valid.append(event.event_id)
    valid_ids = set(valid)
    by_id = Counter(d["event_id"] for d in diags)
    concluded = {d["session_id"] for d in diags if d["phase"] == "CONCLUDED" and "model_failed" not in d["flags"]}
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT vin, session_id, merged_sessions FROM case_memory WHERE kind = 'final'").fetchall()
    l3_keys = Counter((v, s) for v, s, _ in rows)
    in_l3 = {s for _, s, _ in rows} | {m for *_, merged in rows for m in json.loads(merged)}
    report = {
        "minutes": round((samples[-1][0] if samples else 0) / 60, 1),
        "events_in": len(alerts.read_text(encoding="utf-8").splitlines()),
        "valid_alerts": len(valid_ids),
        "diagnoses_raw": len(diags),
        "diagnoses_distinct": len(by_id),
        "duplicates_raw": sum(n - 1 for n in by_id.values()),
        "lost_alerts": len(valid_ids - set(by_id)),
        "dead_letters": len(dead),
        "l3_records": len(l3_keys),
        "l3_duplicates": sum(n - 1 for n in l3_keys.values()),
        "concluded_sessions_missing_from_l3": len(concluded - in_l3),
        "model_failed_flags": sum(1 for d in diags if "model_failed" in d["flags"]),
        "storms": storms,
        "kills": kills,
        "model_calls": model_stats,
        "rss_mb_max": max((s[1] for s in samples), default=0.0),
        **_growth_after(samples, 300.0),
        "state_mb_max": max((s[2] for s in samples), default=0.0),
        # The last job's trimmer, as its metrics last showed it (a restarted job counts from 0).
        "malloc_trim": trims,
    }
    print(json.dumps(report, indent=2))
    (work / "soak.json").write_text(json.dumps({"report": report, "samples": samples}, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.8))
    ts = [s[0] / 60 for s in samples]
    ax.plot(ts, [s[1] for s in samples], label="job RSS (MB)", color="#2b7bba")
    ax2 = ax.twinx()
    ax2.plot(ts, [s[2] for s in samples], label="checkpoint size (MB)", color="#e07b39")
    ax.set_xlabel("minutes")
    ax.set_ylabel("resident memory, MB")
    ax2.set_ylabel("keyed state (checkpoint), MB")
    ax.set_title(f"vdoctor soak: {report['kills']} kills, {report['storms']} model storms, "
                 f"{report['lost_alerts']} lost, {report['l3_duplicates']} L3 duplicates")  # fmt: skip
    fig.legend(loc="upper left")
    fig.tight_layout()
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=110)
    print(f"[soak] plot: {args.plot}", file=sys.stderr)
    return 0 if report["lost_alerts"] == 0 and report["l3_duplicates"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

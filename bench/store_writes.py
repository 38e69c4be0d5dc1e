"""Concurrent L3 writes to the embedded store: combined statements against one statement a record, side by side.

When hundreds of diagnosis runs are in flight, the cases they conclude reach
the store together, from threads of one Python interpreter. This bench has
``--threads`` writer threads upsert ``--writes`` records between them (each
thread its share, one record a call, as fast as it can), beside ``--busy``
threads that run pure Python the whole time (the other runs' work, which
competes for the GIL). Records look like the job's: a 512-d vector (use-m3's
size), a summary of ~270 characters, codes, cause and fix. Each level runs,
in the same invocation and on fresh files:

- ``combined``: the store as it is (``SqliteStore.upsert``: callers that wait
  together are written by one statement in one transaction);
- ``one each``: the release before's upsert, one statement a record, the
  callers queued on the store's write lock.

Printed per level and mode: writes/s, p50 / p95 of an upsert call's wall
time, the writer threads' CPU per write, and the ratio of the two modes'
writes/s. Writes a plot to out/bench/store_writes.png.

    .venv/bin/python bench/store_writes.py                       # 8, 64 and 256 writers, 2,048 writes each (~1 minute)
    .venv/bin/python bench/store_writes.py --threads 64 --writes 4096 --busy 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from vdoctor.records import MemoryRecord  # noqa: E402
from vdoctor.stores import sqlite as sqlite_store  # noqa: E402
from vdoctor.stores.sqlite import SqliteStore  # noqa: E402
from vdoctor.stores.sqlite_rows import epoch, to_row  # noqa: E402

MODES = ("combined", "one each")
DIM = 512


class OneStatementEach(SqliteStore):
    """The release before's upsert: one statement a record, writers queued on the write lock."""

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        if records:
            rows = [(*to_row(r, self._no_priority), epoch(r.concluded_at)) for r in records]
            self._write(sqlite_store._UPSERT, rows)


@dataclass
class Level:
    threads: int
    mode: str
    writes: int
    writes_per_s: float
    p50_ms: float
    p95_ms: float
    cpu_ms_per_write: float
    # Statements' calls of the combined mode (0 for one each): writes / calls is the mean batch.
    calls: int


def records(n: int, seed: int) -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    summary = (
        "{vin}: coolant pump current fell to 0.4 A while the inverter rose from 61 to 78 C in 12 min; P0A93 "
        "and P0C73 three times; the pump relay was corroded and replaced; after it 58-62 C over two drives. "
        "Evidence: signal://{vin}/inverter_temp, dtc://P0A93."
    )
    out = []
    for i in range(n):
        vin = f"LSVAU2180N2{i:06d}"
        vec = rng.standard_normal(DIM).astype(np.float32)
        out.append(
            MemoryRecord(
                vin=vin,
                session_id=f"{vin}-s1",
                series=f"EV-{i % 8}",
                concluded_at=t0 + timedelta(seconds=i),
                summary=summary.format(vin=vin),
                summary_vec=(vec / np.linalg.norm(vec)).tolist(),
                root_cause="corroded coolant pump relay",
                fix_action="replace the pump relay and its connector",
                priority="P2",
                dtc_codes=["P0A93", "P0C73"],
                prompt_version="bench",
                embedder="bench-512",
                alert_text="inverter over temperature, coolant pump current low",
            )  # fmt: skip
        )
    return out


def run_level(threads: int, mode: str, batch: list[MemoryRecord], busy: int, folder: Path) -> Level:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{mode.replace(' ', '-')}-{threads}.db"
    store = OneStatementEach(str(path)) if mode == "one each" else SqliteStore(str(path))
    shares = [batch[i::threads] for i in range(threads)]
    latencies: list[list[float]] = [[] for _ in range(threads)]
    cpu = [0.0] * threads
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def write(k: int) -> None:
        start.wait()
        began = time.thread_time()
        for record in shares[k]:
            t = time.perf_counter()
            store.upsert(record)
            latencies[k].append(time.perf_counter() - t)
        cpu[k] = time.thread_time() - began

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x = sum(range(200)) + x % 7

    spinners = [threading.Thread(target=spin, daemon=True) for _ in range(busy)]
    writers = [threading.Thread(target=write, args=(k,)) for k in range(threads)]
    for t in [*spinners, *writers]:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in writers:
        t.join()
    wall = time.perf_counter() - began
    stop.set()
    for t in spinners:
        t.join()
    calls = store._upserts.calls if mode == "combined" else 0
    assert store.count() == len(batch), f"{mode}: {store.count()} rows for {len(batch)} writes"
    store.close()
    flat = sorted(x for per in latencies for x in per)
    return Level(
        threads=threads,
        mode=mode,
        writes=len(batch),
        writes_per_s=len(batch) / wall,
        p50_ms=statistics.median(flat) * 1000.0,
        p95_ms=flat[int(0.95 * (len(flat) - 1))] * 1000.0,
        cpu_ms_per_write=sum(cpu) / len(batch) * 1000.0,
        calls=calls,
    )


def plot(levels: list[Level], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    counts = sorted({lv.threads for lv in levels})
    xs = list(range(len(counts)))
    for shift, mode, color in ((-0.2, "one each", "#bbbbbb"), (0.2, "combined", "#4477aa")):
        rows = [next(lv for lv in levels if lv.threads == c and lv.mode == mode) for c in counts]
        ax.bar([x + shift for x in xs], [lv.writes_per_s for lv in rows], 0.4, color=color, label=mode)
        ax2.bar([x + shift for x in xs], [lv.p50_ms for lv in rows], 0.4, color=color, label=f"{mode}, p50",
                yerr=[[0.0] * len(rows), [lv.p95_ms - lv.p50_ms for lv in rows]], capsize=3)  # fmt: skip
    for a in (ax, ax2):
        a.set_xticks(xs, [str(c) for c in counts])
        a.set_xlabel("writer threads")
        a.legend(fontsize=8)
    ax.set_ylabel("upserts / s")
    ax.set_title("Concurrent upserts to the SQLite store")
    ax2.set_yscale("log")
    ax2.set_ylabel("ms per upsert call (bar to p95, log scale)")
    ax2.set_title("Upsert latency")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[8, 64, 256], help="writer threads per level")
    parser.add_argument("--writes", type=int, default=2048, help="records written per level")
    parser.add_argument("--busy", type=int, default=2, help="threads running pure Python beside the writers")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    args = parser.parse_args()

    batch = records(args.writes, args.seed)
    levels: list[Level] = []
    with tempfile.TemporaryDirectory(prefix="vd-store-writes-") as tmp:
        # Untimed: the first store of a process pays for imports and first statements.
        for mode in MODES:
            run_level(1, mode, batch[:512], 0, Path(tmp) / "warm-up")
        for i, threads in enumerate(args.threads):
            # Both modes within a level, so both see the same machine; which goes first alternates by level.
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                print(f"{threads} writer threads, {mode}: {args.writes} upserts ...", flush=True)
                levels.append(run_level(threads, mode, batch, args.busy, Path(tmp)))
    load = os.getloadavg()[0]
    print(
        f"\n{args.writes} upserts per level (512-d vectors, ~270-character summaries), {args.busy} threads running "
        f"Python beside the writers, SQLite store (WAL, synchronous=normal) on a fresh file; load average {load:.1f}"
    )
    print(f"{'writers':>8} {'mode':>10} {'upserts/s':>10} {'p50 ms':>8} {'p95 ms':>8} {'CPU ms/write':>13} "
          f"{'rows/call':>10} {'combined / one each':>20}")  # fmt: skip
    for i, lv in enumerate(levels):
        pair = levels[i - i % 2 : i - i % 2 + 2]  # the level's two modes, run one after the other
        other = next(o for o in pair if o.mode == "one each")
        ratio = f"{lv.writes_per_s / other.writes_per_s:.2f}x" if lv.mode == "combined" else ""
        per_call = f"{lv.writes / lv.calls:.1f}" if lv.calls else "1"
        print(f"{lv.threads:>8} {lv.mode:>10} {lv.writes_per_s:>10.0f} {lv.p50_ms:>8.2f} {lv.p95_ms:>8.2f} "
              f"{lv.cpu_ms_per_write:>13.3f} {per_call:>10} {ratio:>20}")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "store_writes.json").write_text(json.dumps([asdict(lv) for lv in levels], indent=2))
    plot(levels, args.out / "store_writes.png")
    print(f"plot: {args.out / 'store_writes.png'}")


if __name__ == "__main__":
    main()

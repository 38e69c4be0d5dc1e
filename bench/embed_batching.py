"""Embedding with many callers at once: a model call per caller, against calls shared by the callers that wait.

The job's diagnosis runs embed on many worker threads (``VDOCTOR_CONCURRENCY`` plus extra runs):
a session's recall query when it opens, a case text when it concludes. The
model embeds one call at a time. ``vdoctor/embedders/batching.py`` lets the
callers that wait share the next call. This bench runs both ways side by side,
in one run, over the same texts:

- one call each: every caller calls the model in turn (the model's own lock;
  the job before ``CoalescingEmbedder``);
- shared calls: ``CoalescingEmbedder`` in front of the same model instance.

Texts are the vehicle retrieval set's (``bench/vehicle_retrieval.py``): its
symptom queries (Chinese and English, as a session describes a fault), its
case texts as a concluded session's vector embeds them (alert as reported,
codes, root cause, fix, the summary's words: ``retrieval.text.dense_text``)
and, for comparison, the whole case texts (summary readings, times and
addresses included, as they were embedded before). Each caller thread embeds
one text per call, as a run does; the query cache is not in the way (every
text goes to the model). Every text is embedded once before any is timed:
``use-m3`` keeps each piece's first steps once computed
(``vdoctor/embedders/use_pieces.py``), so both ways find them kept, as in a
job that has run for a while.

For each number of caller threads (``--threads``) and each kind of text, the
two ways run one after the other with the same texts; printed: process CPU ms
per text (every thread's), texts/s (wall), and texts per model call.
Writes out/bench/embed_batching.{json,png}.

    .venv/bin/python bench/embed_batching.py                       # use-m3, 1 / 8 / 64 threads, ~1 minute
    .venv/bin/python bench/embed_batching.py --embedder e5-small --threads 1 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from vehicle_retrieval import build as vehicle_set  # noqa: E402

from vdoctor.embedders import DEFAULT_EMBEDDER, EMBEDDERS, Embedder, open_embedder  # noqa: E402
from vdoctor.embedders.batching import CoalescingEmbedder  # noqa: E402
from vdoctor.embedders.cache import QueryCache  # noqa: E402
from vdoctor.retrieval.text import record_dense_text, record_text  # noqa: E402


@dataclass
class Row:
    kind: str
    threads: int
    way: str
    texts: int
    cpu_ms_per_text: float
    texts_per_s: float
    texts_per_call: float


def run(embedder: Embedder, method: str, texts: list[str], threads: int) -> tuple[float, float]:
    """Process CPU ms per text and texts/s, ``threads`` callers embedding one text per call."""
    shares = [texts[i::threads] for i in range(threads)]
    start = threading.Barrier(threads + 1)

    def work(share: list[str]) -> None:
        call = getattr(embedder, method)
        start.wait()
        for text in share:
            call([text])

    workers = [threading.Thread(target=work, args=(share,)) for share in shares]
    for w in workers:
        w.start()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    start.wait()
    for w in workers:
        w.join()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return cpu * 1e3 / len(texts), len(texts) / wall


def plot(rows: list[Row], path: Path, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(dict.fromkeys(r.kind for r in rows))
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.8), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        for way, style in (("one call each", "o--"), ("shared calls", "s-")):
            points = [r for r in rows if r.kind == kind and r.way == way]
            ax.plot([r.threads for r in points], [r.cpu_ms_per_text for r in points], style, label=way)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("caller threads")
        ax.set_ylabel("CPU ms per text")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{model}: {kind}")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER, choices=[e for e in EMBEDDERS if e != "openai"])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--per-fault", type=int, default=3, help="vehicle set size (bench/vehicle_retrieval.py)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench" / "embed_batching.json")
    args = parser.parse_args(argv)

    cases, queries = vehicle_set(args.per_fault, seed=7)
    kinds = {
        "queries": ("embed_queries", [q.text for q in queries]),
        "case texts": ("embed", [record_dense_text(r) for r in cases]),
        # The whole indexed text, summary readings, times and addresses included (embedded before).
        "whole case texts": ("embed", [record_text(r) for r in cases]),
    }
    opened = open_embedder(args.embedder)
    # The model itself, behind neither the query cache nor the job's coalescer.
    model = opened.model if isinstance(opened, QueryCache) else opened
    model = model.model if isinstance(model, CoalescingEmbedder) else model
    model.embed(["warm-up"])
    # use-m3 keeps each piece's first steps once computed (vdoctor/embedders/use_pieces.py): every text
    # once first, so that both ways, whichever runs first, find the pieces kept, as a running job does.
    for method, texts in kinds.values():
        getattr(model, method)(texts)
    rows: list[Row] = []
    for kind, (method, texts) in kinds.items():
        for threads in args.threads:
            shared = CoalescingEmbedder(model)
            for way, embedder in (("one call each", model), ("shared calls", shared)):
                cpu, rate = run(embedder, method, texts, threads)
                per_call = shared.texts / shared.calls if embedder is shared and shared.calls else 1.0
                rows.append(Row(kind, threads, way, len(texts), cpu, rate, per_call))
                print(f"  {kind}, {threads} threads, {way}: {cpu:.2f} CPU ms/text, {rate:.0f} texts/s", flush=True)

    load = os.getloadavg()[0]
    chars = ", ".join(f"{kind} {sum(map(len, texts)) / len(texts):.0f}" for kind, (_, texts) in kinds.items())
    print(f"\nmean characters per text: {chars}")
    print(f"{model.name}: {len(queries)} queries, {len(cases)} case texts, one text per call; "
          f"{os.cpu_count()} cores, load average {load:.1f} after")  # fmt: skip
    print(f"{'texts':<16} {'threads':>7}  {'way':<14} {'CPU ms/text':>11} {'texts/s':>8} {'texts/call':>10}")
    for r in rows:
        print(f"{r.kind:<16} {r.threads:>7}  {r.way:<14} {r.cpu_ms_per_text:>11.2f} {r.texts_per_s:>8.0f} "
              f"{r.texts_per_call:>10.1f}")  # fmt: skip
    for kind in kinds:
        for threads in args.threads:
            one, shared_row = (next(r for r in rows if (r.kind, r.threads, r.way) == (kind, threads, w))
                               for w in ("one call each", "shared calls"))  # fmt: skip
            print(f"{kind}, {threads} threads: shared calls take {shared_row.cpu_ms_per_text / one.cpu_ms_per_text:.2f}"
                  f" of the CPU per text of one call each")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"embedder": model.name, "load_avg": load, "rows": [asdict(r) for r in rows]}, indent=1)
    )
    plot(rows, args.out.with_suffix(".png"), model.name)
    print(f"results: {args.out}, plot: {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

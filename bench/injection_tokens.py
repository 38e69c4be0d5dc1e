"""Tokens that long-term memory injects per event, on the demo replay through the real PyFlink job.

Runs ``vdoctor run`` on data/demo/alerts.jsonl (the local MiniCluster, a fresh
sqlite memory) and reads ``memory.tokens`` of every diagnosis: p50, p95 and max
over events where memory was injected, against the 800-token budget; a
histogram goes to a PNG. Takes about a minute on 2 cores.

Usage: .venv/bin/python bench/injection_tokens.py [--alerts FILE] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
BUDGET = 800


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alerts", type=Path, default=REPO_ROOT / "data" / "demo" / "alerts.jsonl")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: a temporary one)")
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "out" / "bench" / "injection_tokens.png")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        print(f"[injection-tokens] replaying {args.alerts} through the PyFlink job ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(args.alerts), "--out", str(out),
               "--memory", f"sqlite:///{out.resolve()}/memory.db"]  # fmt: skip
        proc = subprocess.run(cmd, cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE)
        if proc.returncode != 0:
            print(proc.stdout, file=sys.stderr)
            return proc.returncode
        rows = [json.loads(x) for x in (out / "diagnoses.jsonl").read_text(encoding="utf-8").splitlines()]
    tokens = np.asarray([r["memory"]["tokens"] for r in rows if r["memory"]["injected"]], dtype=float)
    print(f"demo replay: {len(rows)} diagnoses, memory injected into {len(tokens)}")
    if len(tokens):
        p50, p95 = np.percentile(tokens, [50, 95])
        print(f"injected tokens: p50 {p50:.0f}, p95 {p95:.0f}, max {tokens.max():.0f} (budget {BUDGET})")
        plot(tokens, args.plot)
        print(f"plot: {args.plot}")
    return 0


def plot(tokens: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.hist(tokens, bins=40, color="tab:blue")
    ax.axvline(BUDGET, color="red", linestyle="--", label=f"budget {BUDGET}")
    ax.axvline(float(np.percentile(tokens, 95)), color="black", linestyle=":", label="p95")
    ax.set_xlabel("tokens injected by long-term memory per event")
    ax.set_ylabel("events")
    ax.set_title("Demo replay: memory injection per event")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

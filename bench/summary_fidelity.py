"""Summary fidelity on the demo replay: every summary checked, how many passed, and how much they compress.

Replays the demo through the diagnosis engine in-process (the engine the
Flink operator runs) and prints the engine's fidelity counters (rolling and
case summaries alike) and the compression of the case summaries. With
``--diagnoses`` it also counts the ``summary_fidelity_failed`` flags in the
output of a real ``vdoctor run``.

    .venv/bin/python bench/summary_fidelity.py [--alerts FILE] [--diagnoses out/demo/diagnoses.jsonl]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

from demo_replay import DEMO_ALERTS, replay


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--alerts", type=Path, default=DEMO_ALERTS)
    p.add_argument("--diagnoses", type=Path, default=None, help="diagnoses.jsonl of a `vdoctor run` to count flags in")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    run = replay(args.alerts)
    m = run.metrics
    print(f"in-process replay of {args.alerts.name}: {len(run.diagnoses)} diagnoses")
    for key, value in m.items():
        print(f"  {key:<30} {value}")
    passed = m["summaries_checked"] - m["summary_fidelity_failed"]
    print(f"  pass rate                      {100 * passed / max(1, m['summaries_checked']):.1f}%")
    flags = Counter(f for d in run.diagnoses for f in d.flags)
    print(f"  summary_fidelity_failed flags  {flags['summary_fidelity_failed']}")
    if run.case_ratios:
        print(
            f"  case summaries: {len(run.case_ratios)}, source/summary chars median "
            f"{statistics.median(run.case_ratios):.1f}:1, min {min(run.case_ratios):.1f}:1"
        )
    if args.diagnoses:
        rows = [json.loads(line) for line in args.diagnoses.read_text(encoding="utf-8").splitlines() if line.strip()]
        failed = sum("summary_fidelity_failed" in r.get("flags", []) for r in rows)
        concluded = sum(r.get("phase") == "CONCLUDED" for r in rows)
        print(
            f"{args.diagnoses}: {len(rows)} diagnoses, {concluded} concluded, {failed} flagged summary_fidelity_failed"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

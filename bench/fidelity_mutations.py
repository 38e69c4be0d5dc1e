"""How well the fidelity check catches broken case summaries, and how often it rejects good ones.

For each fleet file: replay it through the diagnosis engine (offline model),
take every case summary written to long-term memory with the request it was
written from, and check

- the summaries as written (the offline summarizer), and
- summaries of the same requests written by ``ModelSummarizer`` through the
  real ``openai`` client over HTTP against the local model server, whose
  summary writer lays a summary out its own way (``devtools/summary_writer.py``);

unmutated and rewritten without changing what they say (lines reordered,
the session's own cause stated, ``conf`` written ``confidence``, an alert
line dropped whose codes and readings are stated elsewhere): a rejection of
any of these is a false alarm; and broken one way per kind by
``vdoctor/evaluation/mutations.py`` (a mutation counts as caught when the
check reports a missing, invented or contradicted fact; a rejection for
length alone does not count). A kind a summary has nothing to break for
(no voided conclusion, say) is not applicable to it.

Neither summarizer is a language model: this is a pipeline check of the
check (it shows the check catches these breakages in these layouts, not how
a real model's summaries fare). The check has no tuned thresholds; it was
written against the demo and ``wide-1``; ``gen-demo-other`` and ``wide-2``
are held out.

    .venv/bin/python bench/fidelity_mutations.py [--files demo gen-demo-other wide-2] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from case_replay import REPO_ROOT, fleet_files, replay_cases
from pydantic import SecretStr

from devtools.model_server import ModelServer
from vdoctor.evaluation.mutations import BENIGN_KINDS, KINDS, mutate, rewrite
from vdoctor.memory.fidelity import FidelityReport, check_request
from vdoctor.memory.request import SummaryRequest, request_from_json
from vdoctor.memory.summarizer import ModelSummarizer
from vdoctor.models.openai import OpenAIChatModel

# Targets of issue 14.
TARGET_CATCH = 0.99
TARGET_FALSE_ALARM = 0.01


def caught(report: FidelityReport) -> bool:
    return bool(report.missing or report.invented or report.contradicted)


@dataclass
class Tally:
    summaries: int = 0
    false_alarms: int = 0
    # Meaning-preserving rewrites checked, and rejected (false alarms too).
    rewrites: int = 0
    rewrite_alarms: int = 0
    stating_cause: int = 0
    applicable: Counter[str] = field(default_factory=Counter)
    caught: Counter[str] = field(default_factory=Counter)
    by: Counter[tuple[str, str]] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)


def run(cases: list[tuple[str, SummaryRequest]], causes: list[str], seed: int) -> Tally:
    t = Tally()
    for i, (text, request) in enumerate(cases):
        t.summaries += 1
        t.stating_cause += "cause:" in text
        report = check_request(text, request)
        if not report.ok:
            t.false_alarms += 1
            t.examples.append(f"false alarm: {report.describe()[:160]}")
            continue  # not a faithful summary to break
        for kind in BENIGN_KINDS:
            r = rewrite(text, request, kind, random.Random(f"{seed}:{i}:{kind}"))
            if r is None:
                continue
            t.rewrites += 1
            if not check_request(r.text, request).ok:
                t.rewrite_alarms += 1
                t.examples.append(f"false alarm on {kind}: {check_request(r.text, request).describe()[:120]}")
        for kind in KINDS:
            m = mutate(text, request, kind, random.Random(f"{seed}:{i}:{kind}"), causes)
            if m is None:
                continue
            t.applicable[kind] += 1
            found = check_request(m.text, request)
            if caught(found):
                t.caught[kind] += 1
                for what in ("missing", "invented", "contradicted"):
                    t.by[(kind, what)] += bool(getattr(found, what))
            else:
                t.examples.append(f"missed {kind}: {m.note}")
    return t


def _print(name: str, tallies: dict[str, Tally]) -> None:
    print(f"\n{name}")
    head = f"{'kind':<18}" + "".join(f"{s + ' caught':>26}" for s in tallies)
    print(head)
    for kind in KINDS:
        row = f"{kind:<18}"
        for t in tallies.values():
            a, c = t.applicable[kind], t.caught[kind]
            row += f"{f'{c}/{a} ({100 * c / a:.1f}%)' if a else 'n/a':>26}"
        print(row)
    row = f"{'false alarms':<18}"
    for t in tallies.values():
        row += f"{f'{t.false_alarms}/{t.summaries} ({100 * t.false_alarms / max(1, t.summaries):.1f}%)':>26}"
    print(row)
    row = f"{'false al. rewrites':<18}"
    for t in tallies.values():
        row += f"{f'{t.rewrite_alarms}/{t.rewrites} ({100 * t.rewrite_alarms / max(1, t.rewrites):.1f}%)':>26}"
    print(row)
    print(f"{'stating a cause':<18}" + "".join(f"{f'{t.stating_cause}/{t.summaries}':>26}" for t in tallies.values()))
    for s, t in tallies.items():
        found_by = ", ".join(
            f"{k} {'/'.join(w[0] for w in ('missing', 'invented', 'contradicted') if t.by[(k, w)])}"
            for k in KINDS
            if t.caught[k]
        )
        print(f"  {s}: caught by (m)issing/(i)nvented/(c)ontradicted findings: {found_by}")
        for line in t.examples[:4]:
            print(f"  {s}: {line}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", nargs="+", default=["demo", "gen-demo-other", "wide-2"])
    p.add_argument("--seed", type=int, default=1, help="seed of the mutations")
    p.add_argument("--work", type=Path, default=REPO_ROOT / "out" / "bench" / "fleets")
    args = p.parse_args(argv)
    print(f"mutation seed {args.seed}; load average {os.getloadavg()[0]:.1f}")
    worst_catch, worst_alarm = 1.0, 0.0
    with ModelServer() as server:
        client = OpenAIChatModel("summary-writer", SecretStr("local-test-key"), server.base_url)
        model = ModelSummarizer(client)
        for name, path in zip(args.files, fleet_files(args.work, args.files), strict=True):
            started = time.monotonic()
            replay = replay_cases(path)
            records = [r for r in replay.cases.values() if r is not None and r.source]
            causes = sorted({r.root_cause for r in records})
            requests = [request_from_json(r.source) for r in records]
            offline = [(r.summary, q) for r, q in zip(records, requests, strict=True)]
            over_http = [(model.summarize(q), q) for q in requests]
            tallies = {"offline": run(offline, causes, args.seed), "model over HTTP": run(over_http, causes, args.seed)}
            _print(f"{name}: {len(records)} case summaries ({time.monotonic() - started:.0f} s)", tallies)
            for t in tallies.values():
                alarms = (t.false_alarms / max(1, t.summaries), t.rewrite_alarms / max(1, t.rewrites))
                worst_alarm = max(worst_alarm, *alarms)
                rates = [t.caught[k] / t.applicable[k] for k in KINDS if t.applicable[k]]
                worst_catch = min([worst_catch, *rates])
        client.close()
    print(
        f"\nlowest catch rate of any kind {100 * worst_catch:.1f}% (target >= {100 * TARGET_CATCH:.0f}%), "
        f"highest false-alarm rate {100 * worst_alarm:.1f}% (target <= {100 * TARGET_FALSE_ALARM:.0f}%); "
        "a pipeline check: neither summarizer is a language model"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Readings kept in case summaries: every signal's first, lowest, highest and latest reading, every code.

For each fleet file, replays it through the diagnosis engine in-process
(offline model and summarizer) and, for every concluded session, counts the
key readings of its alerts (per signal the distinct values among first,
lowest, highest and latest) and its codes: stated in the case summary as
written when the session concluded, declared omitted on the record (its
``omitted`` field: gave way to fit 300 characters, flagged), or missing
(neither: lost). Target: 0 missing.

Counted independently of the fidelity checker: the expected readings come
from the alert file (each alert's session from the diagnoses' session ids),
and a reading counts as stated only where the summary writes
``<signal>=<value>`` in its role (first, →latest, ↓lowest, ↑highest) ending in
the unit of the signal's suffix (none for an unknown suffix).

Files: the demo; ``scripts/gen_demo.py --vins 400 --seed 7`` (settings the demo
does not use); ``wide_fleet.py --seed 2`` (6-16 readings per alert, exclusions
and voided conclusions; this project's own generator, written for this check).

    .venv/bin/python bench/summary_readings.py [--files demo gen-demo-other wide-2] [--work out/bench/fleets]
"""

from __future__ import annotations

import argparse
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from case_replay import REPO_ROOT, CaseReplay, fleet_files, replay_cases

from vdoctor.units import unit_of

_NUM = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_CODE = re.compile(r"^[PCBU][0-9A-F]{4}$")


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _roles(values: list[float]) -> dict[str, str]:
    return {
        "first": _fmt(values[0]),
        "latest": _fmt(values[-1]),
        "lowest": _fmt(min(values)),
        "highest": _fmt(max(values)),
    }


def _stated_roles(text: str, name: str, any_unit: bool = False) -> list[dict[str, str]]:
    """Every statement of ``name`` in ``text`` with its unit, as roles (the bench's own reading of the format).

    ``any_unit``: also count a statement with no unit or another one (for summaries written before
    units were shown).
    """
    unit = unit_of(name) or ""
    out = []
    pattern = rf"(?<![A-Za-z0-9_]){re.escape(name)}=({_NUM})(?:→({_NUM}))?(?:↓({_NUM}))?(?:↑({_NUM}))?(\S*)"
    for m in re.finditer(pattern, text):
        first, latest, low, high, rest = m.groups()
        if not any_unit and rest != unit and not (unit == "" and not re.match(r"[A-Za-z0-9]", rest or "")):
            continue  # another unit, or no unit where the signal has one
        latest = latest or first
        lo, hi = sorted((first, latest), key=float)
        out.append({"first": first, "latest": latest, "lowest": low or lo, "highest": high or hi})
    return out


@dataclass
class Counts:
    sessions: int = 0
    records: int = 0
    readings: int = 0
    readings_stated: int = 0
    readings_omitted: int = 0
    readings_missing: int = 0
    codes: int = 0
    codes_stated: int = 0
    codes_omitted: int = 0
    codes_missing: int = 0
    flagged: int = 0


def count(run: CaseReplay, missing_examples: list[str], any_unit: bool = False) -> tuple[Counts, list[int]]:
    c = Counts()
    lengths: list[int] = []
    for sid, record in run.cases.items():
        c.sessions += 1
        alerts = run.alerts.get(sid, [])
        summary = record.summary if record else ""
        omitted = "\n".join(getattr(record, "omitted", [])) if record else ""  # (records before issue 14 have none)
        if record is not None:
            c.records += 1
            lengths.append(len(summary))
            c.flagged += bool(getattr(record, "omitted", []))
        series: dict[str, list[float]] = {}
        for alert in alerts:
            for name, value in alert.signals.items():
                series.setdefault(name, []).append(value)
        for name, values in series.items():
            roles = _roles(values)
            in_summary, in_omitted = _stated_roles(summary, name, any_unit), _stated_roles(omitted, name, any_unit)
            for value in dict.fromkeys(roles.values()):
                mine = {r for r, v in roles.items() if v == value}
                c.readings += 1
                if any(all(s[r] == value for r in mine) for s in in_summary):
                    c.readings_stated += 1
                elif any(all(s[r] == value for r in mine) for s in in_omitted):
                    c.readings_omitted += 1
                else:
                    c.readings_missing += 1
                    missing_examples.append(f"{sid}: {name} {'/'.join(sorted(mine))} {value}")
        for code in dict.fromkeys(code for alert in alerts for code in alert.dtc_codes):
            c.codes += 1
            if re.search(rf"\b{code}\b", summary):
                c.codes_stated += 1
            elif f"code {code}" in omitted:
                c.codes_omitted += 1
            else:
                c.codes_missing += 1
                missing_examples.append(f"{sid}: code {code}")
    return c, lengths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", nargs="+", default=["demo", "gen-demo-other", "wide-2"])
    p.add_argument("--work", type=Path, default=REPO_ROOT / "out" / "bench" / "fleets")
    p.add_argument("--any-unit", action="store_true", help="count a reading stated without its unit too")
    args = p.parse_args(argv)
    print(f"{'file':<16} {'concluded':>9} {'records':>7} {'readings':>8} {'stated':>7} {'omitted':>7} {'missing':>7} "
          f"{'codes':>6} {'stated':>6} {'omitted':>7} {'missing':>7} {'flagged':>7} {'chars p50/max':>13}")  # fmt: skip
    for name, path in zip(args.files, fleet_files(args.work, args.files), strict=True):
        run = replay_cases(path)
        examples: list[str] = []
        c, lengths = count(run, examples, args.any_unit)
        chars = f"{statistics.median(lengths):.0f}/{max(lengths)}" if lengths else "-"
        print(
            f"{name:<16} {c.sessions:>9} {c.records:>7} {c.readings:>8} {c.readings_stated:>7} {c.readings_omitted:>7} "
            f"{c.readings_missing:>7} {c.codes:>6} {c.codes_stated:>6} {c.codes_omitted:>7} {c.codes_missing:>7} "
            f"{c.flagged:>7} {chars:>13}"
        )
        if examples:
            print(
                "  missing: " + "; ".join(examples[:5]) + (f" (+{len(examples) - 5} more)" if len(examples) > 5 else "")
            )
        failed = run.metrics.get("summary_fidelity_failed", 0)
        print(f"  fidelity: {run.metrics.get('summaries_checked', 0)} summaries checked, {failed} failed")
    print("stated: in the case summary as written; omitted: gave way to fit 300 characters, listed on the record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

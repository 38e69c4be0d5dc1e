"""Memory health: were the memories recalled for a session relevant to how it ended?

Reads a diagnoses log (the job's output), samples concluded sessions that had
long-term memory injected, fetches each recalled record, and scores it
against the session's final diagnosis: 1.0 for the same root cause, 0.5 for a
shared trouble code only, 0 otherwise. Reported per kind (own history,
similar cases) and per week, with a PNG plot of relevance over time.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from vdoctor.errors import ConfigError
from vdoctor.stores.base import MemoryStore

SAME_CAUSE, SHARED_CODE = 1.0, 0.5
DEFAULT_SAMPLE = 500


@dataclass
class Scored:
    week: str
    kind: str  # "own" | "similar"
    relevance: float


@dataclass
class HealthReport:
    sessions_seen: int = 0
    sessions_with_memory: int = 0
    sampled: int = 0
    missing_records: int = 0
    scores: list[Scored] = field(default_factory=list)

    def mean(self, kind: str | None = None) -> float:
        values = [s.relevance for s in self.scores if kind is None or s.kind == kind]
        return sum(values) / len(values) if values else float("nan")

    def hit_rate(self, kind: str | None = None) -> float:
        values = [s.relevance for s in self.scores if kind is None or s.kind == kind]
        return sum(1 for v in values if v > 0) / len(values) if values else float("nan")

    def by_week(self) -> dict[str, float]:
        buckets: dict[str, list[float]] = defaultdict(list)
        for s in self.scores:
            buckets[s.week].append(s.relevance)
        return {week: sum(v) / len(v) for week, v in sorted(buckets.items())}

    def render(self) -> str:
        def f(x: float) -> str:
            return "n/a" if x != x else f"{x:.3f}"

        lines = [
            "memory health",
            f"  concluded sessions in the log   {self.sessions_seen}",
            f"  ... with memory injected         {self.sessions_with_memory}",
            f"  sampled                          {self.sampled} ({len(self.scores)} recalled records scored,"
            f" {self.missing_records} no longer in the store)",
            f"  mean relevance                   all {f(self.mean())}  own {f(self.mean('own'))}"
            f"  similar {f(self.mean('similar'))}",
            f"  share relevant (score > 0)       all {f(self.hit_rate())}  own {f(self.hit_rate('own'))}"
            f"  similar {f(self.hit_rate('similar'))}",
        ]
        return "\n".join(lines)


def read_diagnoses(diagnoses: Path) -> list[dict[str, Any]]:
    """The diagnoses in the job's output file (``diagnoses.jsonl``), in order: ``memory health``'s
    ``--diagnoses`` and ``vdoctor serve``'s, checked the same way.

    A file that cannot be read, or a line that is no diagnosis of the job's output (not a JSON object, no
    ``session_id`` or ``phase``, a ``memory`` that is no object), is a ``ConfigError`` naming the file (and
    the line). A last line without its newline that does not read is left out, not an error: a running job
    is writing it (its buffer may have been flushed inside the line, or inside a character of it).
    """
    try:
        data = diagnoses.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the diagnoses {diagnoses}: {e.strerror}") from None
    raw_lines = data.split(b"\n")
    # The line a running job is writing: the last, without its newline, after at least one whole line (a file of
    # one line without a newline, or of lines ended by "\r" alone, is no output of the job's: a review).
    writing = len(raw_lines) if len(raw_lines) > 1 else 0
    out: list[dict[str, Any]] = []
    for number, raw in enumerate(raw_lines, 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            if number == writing:
                break
            raise ConfigError(f"cannot read the diagnoses {diagnoses}: not UTF-8 text (line {number})") from None
        try:
            d = json.loads(line)
        except ValueError as e:
            if number == writing:
                break
            problem: str | None = str(e)
        else:
            problem = _not_a_diagnosis(d)
        if problem is not None:
            raise ConfigError(
                f"{diagnoses}, line {number}: not a diagnosis of the job's output (diagnoses.jsonl): {problem}"
            )
        out.append(d)
    return out


def _not_a_diagnosis(d: object) -> str | None:
    """Why a line's JSON is no diagnosis of the job's output; None when it is one."""
    if not isinstance(d, dict):
        return f"not a JSON object but {type(d).__name__}"
    for key in ("session_id", "phase"):
        if key not in d:
            return f"no field {key!r}"
    if not isinstance(d["session_id"], str):
        return f"session_id is not text but {type(d['session_id']).__name__}"
    memory = d.get("memory")
    if memory is not None and not isinstance(memory, dict):
        return f"memory is not an object but {type(memory).__name__}"
    for kind in ("own", "similar"):
        refs = (memory or {}).get(kind)
        if refs is not None and not isinstance(refs, list):
            return f"memory.{kind} is not a list but {type(refs).__name__}"
    return None


def _sessions(diagnoses: Path) -> dict[str, dict[str, Any]]:
    """Per concluded session: its final diagnosis, the memory refs it saw, and when it concluded
    (``read_diagnoses``: a file that is not the job's diagnoses is a ``ConfigError``)."""
    out: dict[str, dict[str, Any]] = {}
    refs: dict[str, dict[str, list[dict[str, str]]]] = {}
    for d in read_diagnoses(diagnoses):
        sid = d["session_id"]
        memory = d.get("memory") or {}
        seen = refs.setdefault(sid, {"own": [], "similar": []})
        for kind in ("own", "similar"):
            for ref in memory.get(kind) or []:
                if ref not in seen[kind]:
                    seen[kind].append(ref)
        if d["phase"] == "CONCLUDED":
            out[sid] = {"diagnosis": d, "refs": seen}
    return out


def _relevance(root_cause: str, codes: set[str], record_cause: str, record_codes: list[str]) -> float:
    if record_cause and record_cause == root_cause:
        return SAME_CAUSE
    if codes & set(record_codes):
        return SHARED_CODE
    return 0.0


def assess(diagnoses: Path, store: MemoryStore, sample: int = DEFAULT_SAMPLE, seed: int = 0) -> HealthReport:
    sessions = _sessions(diagnoses)
    report = HealthReport(sessions_seen=len(sessions))
    with_memory = [s for s in sessions.values() if any(s["refs"].values())]
    report.sessions_with_memory = len(with_memory)
    picked = random.Random(seed).sample(with_memory, min(sample, len(with_memory)))
    report.sampled = len(picked)
    for session in picked:
        d = session["diagnosis"]
        assert isinstance(d, dict)
        codes = {str(e).removeprefix("dtc://") for e in d["evidence"] if str(e).startswith("dtc://")}
        week = _week_of(str(d["session_id"]))
        for kind, refs in session["refs"].items():
            for ref in refs:
                record = store.get(ref["vin"], ref["session_id"])
                if record is None:
                    report.missing_records += 1
                    continue
                score = _relevance(str(d["root_cause"]), codes, record.root_cause, record.dtc_codes)
                report.scores.append(Scored(week=week, kind=kind, relevance=score))
    return report


def _week_of(session_id: str) -> str:
    # session ids hold the opening alert's UTC time, YYYYMMDDTHHMMSS, after the VIN (and before a "-2" of a
    # session opened in the same second as the one before it)
    opened = datetime.strptime(session_id.split("-")[1][:15], "%Y%m%dT%H%M%S")
    year, week, _ = opened.isocalendar()
    return f"{year}-W{week:02d}"


def plot(report: HealthReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    weeks = sorted({s.week for s in report.scores})
    for kind, color in (("own", "#2b7bba"), ("similar", "#e07b39")):
        buckets: dict[str, list[float]] = defaultdict(list)
        for s in report.scores:
            if s.kind == kind:
                buckets[s.week].append(s.relevance)
        means = [sum(buckets[w]) / len(buckets[w]) if buckets[w] else float("nan") for w in weeks]
        ax.plot(range(len(weeks)), means, marker="o", color=color, label=kind)
    ax.set_xticks(range(len(weeks)), weeks)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("mean relevance to the final diagnosis")
    ax.set_title("vdoctor memory health: relevance of recalled memories over time")
    ax.legend()
    ax.tick_params(axis="x", rotation=45, labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""Replay a fleet file through the diagnosis engine in-process and keep every case summary as written.

Shared by ``summary_readings.py`` and ``fidelity_mutations.py``. Each
concluded session's record is read back right after the alert that concluded
it (a later session of the same fault merges into that record and replaces its
summary, so reading at the end would lose the earlier summary). Also the
fleet files: the demo, ``scripts/gen_demo.py`` with settings the demo does not
use, and ``wide_fleet.py``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import AlertEvent, parse_event
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import DedupState, SessionState
from vdoctor.memory.summarizer import Summarizer
from vdoctor.memory.write_policy import record_key_for_session
from vdoctor.models.offline import OfflineModel
from vdoctor.records import Diagnosis, MemoryRecord, Phase
from vdoctor.stores import open_store

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_ALERTS = REPO_ROOT / "data" / "demo" / "alerts.jsonl"
# Settings of scripts/gen_demo.py that the demo (240 vehicles, seed 20261101) does not use.
GEN_DEMO_OTHER = ("--vins", "400", "--seed", "7")


@dataclass
class CaseReplay:
    path: Path
    diagnoses: list[Diagnosis] = field(default_factory=list)
    # session id -> the alerts of that session, in order
    alerts: dict[str, list[AlertEvent]] = field(default_factory=dict)
    # concluded session id -> its record as written when it concluded (None: no record written)
    cases: dict[str, MemoryRecord | None] = field(default_factory=dict)
    metrics: dict[str, int] = field(default_factory=dict)


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as fh:
        yield from (line for line in fh if line.strip())


def replay_cases(path: Path, summarizer: Summarizer | None = None) -> CaseReplay:
    store = open_store("memory://")
    engine = DiagnosisEngine(
        store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack(), summarizer=summarizer
    )
    out = CaseReplay(path)
    sessions: dict[str, SessionState | None] = {}
    dedups: dict[str, DedupState] = {}
    for raw in _lines(path):
        try:
            event = parse_event(raw)
        except Exception:  # noqa: BLE001 - bad lines are the dead-letter path, not this benchmark's
            continue
        result = engine.on_event(sessions.get(event.vin), dedups.setdefault(event.vin, DedupState()), event, raw)
        sessions[event.vin] = result.session
        dedups[event.vin] = result.dedup
        for d in result.diagnoses:
            out.diagnoses.append(d)
            if isinstance(event, AlertEvent):
                out.alerts.setdefault(d.session_id, []).append(event)
            if d.phase is Phase.CONCLUDED and d.session_id not in out.cases:
                key = record_key_for_session(store, d.vin, d.session_id)
                out.cases[d.session_id] = store.get(d.vin, key) if key else None
    out.metrics = engine.summary_metrics.as_dict()
    engine.close()
    return out


def fleet_files(work: Path, which: list[str]) -> list[Path]:
    """The fleet files by name: ``demo``, ``gen-demo-other`` (generated), ``wide-N`` (generated, seed N)."""
    work.mkdir(parents=True, exist_ok=True)
    files = []
    for name in which:
        if name == "demo":
            files.append(DEMO_ALERTS)
        elif name == "gen-demo-other":
            path = work / "gen_demo_other" / "alerts.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, str(REPO_ROOT / "scripts" / "gen_demo.py"), "--out", str(path), *GEN_DEMO_OTHER]
            subprocess.run(cmd, check=True, capture_output=True)
            files.append(path)
        elif name.startswith("wide-"):
            from wide_fleet import generate, write

            path = work / f"{name}.jsonl"
            write(generate(vins=120, seed=int(name.split("-", 1)[1])), path)
            files.append(path)
        else:
            files.append(Path(name))
    return files

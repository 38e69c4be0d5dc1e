"""Replay the demo alerts through the diagnosis engine in-process (no Flink), for benchmarks.

The engine is the one the Flink operator runs; replaying it directly keeps a
benchmark to seconds and lets it see every prompt the model is sent.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import parse_event
from vdoctor.knowledge import load_pack
from vdoctor.memory import summary as case_summary
from vdoctor.memory.session import DedupState, SessionState
from vdoctor.models.base import ChatModel, ChatResponse, Message, ToolSpec
from vdoctor.models.offline import OfflineModel
from vdoctor.records import Diagnosis
from vdoctor.stores import open_store

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_ALERTS = REPO_ROOT / "data" / "demo" / "alerts.jsonl"


class RecordingModel:
    """Passes every call to the offline model and keeps the prompts it was sent."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.prompts: list[list[Message]] = []

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.prompts.append(list(messages))
        return self.inner.chat(messages, tools)

    def close(self) -> None:
        self.inner.close()


@dataclass
class Replay:
    diagnoses: list[Diagnosis] = field(default_factory=list)
    prompts: list[list[Message]] = field(default_factory=list)
    summaries_checked: int = 0
    summary_failures: int = 0
    metrics: dict[str, int] = field(default_factory=dict)
    # source chars / summary chars of each case summary written to L3
    case_ratios: list[float] = field(default_factory=list)


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield line


def replay(path: Path = DEMO_ALERTS, limit: int | None = None, progress: bool = True) -> Replay:
    model = RecordingModel(OfflineModel())
    engine = DiagnosisEngine(store=open_store("memory://"), model=model, embedder=HashingEmbedder(), pack=load_pack())
    sessions: dict[str, SessionState | None] = {}
    dedups: dict[str, DedupState] = {}
    out = Replay()
    real_summarize = case_summary.summarize_case

    def summarize_and_measure(*args: object, **kwargs: object) -> case_summary.CaseSummary:
        case = real_summarize(*args, **kwargs)  # type: ignore[arg-type]
        out.case_ratios.append(case.report.ratio)
        return case

    # Observe (not change) each case summary's compression ratio.
    import vdoctor.diagnosis as diagnosis_module

    diagnosis_module.summarize_case = summarize_and_measure  # type: ignore[assignment]
    started = last = time.monotonic()
    for i, raw in enumerate(_lines(path)):
        if limit is not None and i >= limit:
            break
        try:
            event = parse_event(raw)
        except Exception:  # noqa: BLE001 - bad lines are the dead-letter path, not this benchmark's
            continue
        result = engine.on_event(sessions.get(event.vin), dedups.setdefault(event.vin, DedupState()), event, raw)
        sessions[event.vin] = result.session
        dedups[event.vin] = result.dedup
        out.diagnoses += result.diagnoses
        if progress and time.monotonic() - last > 2:
            last = time.monotonic()
            print(f"  replayed {i + 1} events in {last - started:.0f} s", file=sys.stderr)
    diagnosis_module.summarize_case = real_summarize
    out.prompts = model.prompts
    out.metrics = engine.summary_metrics.as_dict()
    engine.close()
    return out

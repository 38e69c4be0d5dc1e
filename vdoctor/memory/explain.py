"""Why a session was given what it was given: one recall, explained from the recall itself.

``explain_recall`` runs the job's own recall (``SessionRecall.for_alert``: the
code path of every session and of ``vdoctor memory recall``) with a trace,
and lays out, for a session of ``vin`` opening at event time T:

- own history: every record of the vehicle, in its version current at T,
  given or not and why (not concluded by T, invalidated by T, concluded more
  than two years before T, the opening session's own, beyond the newest ten,
  over the token budget);
- similar cases: every stage-1 candidate (the union of the lexical and the
  dense channel's top candidates) with its named scores (each channel's own
  score, the fused retrieval score, the reranker's score and its weighted
  parts: ``Scored.parts``), chosen or why not (below the rerank top-5, over
  the token budget);
- the records of the series the filters removed before retrieval, counted
  per filter (the vehicle itself, not concluded by T, invalidated by T, not
  verified by T, below both channels' top candidates), the nearest few of
  each with the dense score they would have had; records of other series
  are counted.

What was chosen, and the rendered block, are the recall's own, never
recomputed here. The filters are attributed over the versions the store's
read-only views (``stores.audit``) return, at most ``SCAN_LIMIT`` of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import numpy as np

from vdoctor.events import session_id_for
from vdoctor.memory.recall import (
    EVENT_TIME_STEP,
    OWN_HISTORY_LIMIT,
    OWN_HISTORY_WINDOW,
    SIMILAR_TOP,
    Recall,
    RecallTrace,
    SessionRecall,
    render_record,
)
from vdoctor.memory.write_policy import MILESTONE_SEPARATOR
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.cases import PART_DENSE
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES, LEXICAL_CANDIDATES
from vdoctor.stores.audit import RecordVersion, StoreAudit
from vdoctor.stores.base import MemoryStore, Scored, SimilarQuery

# Versions of a series read to attribute the filters; beyond it the counts cover the newest ones only.
SCAN_LIMIT = 20_000
# Removed records shown per filter, nearest to the query first (all are counted).
NEAREST_REMOVED = 5
# A store's vector score may differ from an exact one in the last float32 bits.
_SCORE_EPS = 1e-5

Key = tuple[str, str]


class Outcome(StrEnum):
    """What became of a record in one recall: given, or the first rule that kept it out."""

    CHOSEN = "chosen"
    OWN_VEHICLE = "the vehicle itself"
    NOT_CONCLUDED = "not concluded by T"
    INVALIDATED = "invalidated by T"
    NOT_VERIFIED = "not verified by T"
    OUTSIDE_WINDOW = "concluded over 2 years before T"
    # Its own case is never a session's history, even when it exists at T (``recall.own_history``).
    OPENING_SESSION = "the session opening at T itself"
    BEYOND_OWN_LIMIT = f"beyond the newest {OWN_HISTORY_LIMIT}"
    BELOW_CANDIDATES = f"below the dense top-{DENSE_CANDIDATES}, not in the lexical top-{LEXICAL_CANDIDATES}"
    NOT_RETURNED = "passed the filters, not returned by the store's search"
    BELOW_RERANK_TOP = f"below the rerank top-{SIMILAR_TOP}"
    OVER_BUDGET = "over the token budget"


@dataclass(frozen=True)
class Entry:
    """One record as the explanation shows it: in its version current at T (the earliest, if none was)."""

    record: MemoryRecord
    outcome: Outcome
    # Named scores: "retrieval" (fused) and each channel's parts, "rerank" and its parts "rerank.*";
    # "vector" for a removed record (the dense score it would have had).
    scores: dict[str, float] = field(default_factory=dict)
    detail: str = ""
    version_from: datetime | None = None
    version_to: datetime | None = None
    # Tokens of the record's rendered entry (own and stage-1 candidates).
    tokens: int | None = None

    @property
    def key(self) -> Key:
        return (self.record.vin, self.record.session_id)


@dataclass
class RecallExplanation:
    vin: str
    series: str
    at: datetime
    symptom: str
    codes: list[str]
    query: str
    budget: int
    recall: Recall
    own: list[Entry]
    candidates: list[Entry]
    removed: dict[Outcome, list[Entry]]
    removed_counts: dict[Outcome, int]
    scanned: int
    other_series: int

    def to_dict(self) -> dict[str, Any]:
        """``recall_json`` (what ``vdoctor memory recall --json`` prints) plus ``explain``."""
        return {
            **recall_json(self.vin, self.at, self.recall),
            "explain": {
                "series": self.series,
                "symptom": self.symptom,
                "codes": self.codes,
                "query": self.query,
                "limits": {
                    "own_window_days": OWN_HISTORY_WINDOW.days,
                    "own_limit": OWN_HISTORY_LIMIT,
                    "dense_top": DENSE_CANDIDATES,
                    "lexical_top": LEXICAL_CANDIDATES,
                    "rerank_top": SIMILAR_TOP,
                    "budget_tokens": self.budget,
                },
                "own_history": [entry_dict(e) for e in self.own],
                "candidates": [entry_dict(e) for e in self.candidates],
                "removed": {
                    "counts": {o.value: n for o, n in self.removed_counts.items()},
                    "nearest": {o.value: [entry_dict(e) for e in es] for o, es in self.removed.items()},
                    "other_series": self.other_series,
                    "versions_scanned": self.scanned,
                    "scan_limit": SCAN_LIMIT,
                },
            },
        }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else f"{value:%Y-%m-%dT%H:%M:%SZ}"


def recall_json(vin: str, at: datetime, found: Recall) -> dict[str, Any]:
    """What ``vdoctor memory recall --json`` prints for a recall of ``vin`` as of ``at``."""
    return {
        "vin": vin,
        "as_of": _iso(at),
        "tokens": found.tokens,
        "own": [r.model_dump() for r in found.own_refs],
        "similar": [r.model_dump() for r in found.similar_refs],
        "text": found.text,
    }


def vehicle_series(store: MemoryStore, vin: str, given: str | None = None) -> str:
    """The series a recall of ``vin`` asks about: the one given, else the vehicle's newest record's."""
    if given:
        return given
    own = store.history(vin)
    return own[0].series if own else ""


def entry_dict(e: Entry) -> dict[str, Any]:
    r = e.record
    return {
        "vin": r.vin,
        "session_id": r.session_id,
        "kind": r.kind.value,
        "concluded_at": _iso(r.concluded_at),
        "priority": r.priority,
        "dtc_codes": r.dtc_codes,
        "recheck_ok": r.recheck_ok,
        "valid": r.valid,
        "root_cause": r.root_cause,
        "summary": r.summary,
        "outcome": e.outcome.value,
        "chosen": e.outcome is Outcome.CHOSEN,
        "detail": e.detail,
        "scores": {k: round(v, 6) for k, v in e.scores.items()},
        "version": {"from": _iso(e.version_from), "to": _iso(e.version_to)},
        "tokens": e.tokens,
    }


def _by_record(versions: Iterable[RecordVersion]) -> dict[Key, list[RecordVersion]]:
    out: dict[Key, list[RecordVersion]] = {}
    for v in versions:
        out.setdefault((v.record.vin, v.record.session_id), []).append(v)
    for vs in out.values():
        vs.sort(key=lambda v: v.version_from)
    return out


def _at(versions: list[RecordVersion], at: datetime) -> tuple[RecordVersion, MemoryRecord | None]:
    """The version current at ``at`` and the record as of ``at``; (the earliest version, None) if none was."""
    for v in versions:
        if v.holds_at(at):
            return v, v.record.as_of(at)
    return versions[0], None


def _entry(
    record: MemoryRecord,
    version: RecordVersion | None,
    outcome: Outcome,
    detail: str = "",
    scores: dict[str, float] | None = None,
    tokens: int | None = None,
) -> Entry:
    return Entry(
        record,
        outcome,
        scores or {},
        detail,
        version.version_from if version else None,
        version.version_to if version else None,
        tokens,
    )


def _when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M}"


def _unverified(version: RecordVersion, at: datetime) -> str:
    stored = version.record
    if stored.recheck_ok is None:
        return "recheck pending"
    if stored.verified_ts is not None and stored.verified_ts > at:
        verdict = "verified" if stored.recheck_ok else "recheck failed"
        return f"{verdict} {_when(stored.verified_ts)}, after T"
    return f"recheck failed {_when(stored.verified_ts)}"


def _own_entries(
    audit: StoreAudit, vin: str, at: datetime, trace: RecallTrace, found: Recall, tokens: Callable[[str], int]
) -> list[Entry]:
    """Every record of the vehicle, newest first, with what became of it in this recall."""
    opening = session_id_for(vin, at)
    fetched = {r.session_id for r in trace.own}
    chosen = {r.session_id for r in found.own}
    entries: list[Entry] = []
    admitted: list[tuple[MemoryRecord, RecordVersion]] = []
    for versions in _by_record(audit.versions(vin)).values():
        version, record = _at(versions, at)
        if record is not None and opening in record.merged_sessions:
            # The opening session merged into this case: recall takes it as it was before (``own_history``).
            version, record = _at(versions, at - EVENT_TIME_STEP)
        if record is None:
            detail = f"concluded {_when(version.record.concluded_at)}"
            entries.append(_entry(version.record, version, Outcome.NOT_CONCLUDED, detail))
        elif not record.valid:
            entries.append(_entry(record, version, Outcome.INVALIDATED, f"invalid from {_when(record.invalid_ts)}"))
        elif record.concluded_at < at - OWN_HISTORY_WINDOW:
            entries.append(_entry(record, version, Outcome.OUTSIDE_WINDOW))
        elif record.session_id == opening or record.session_id.startswith(opening + MILESTONE_SEPARATOR):
            entries.append(_entry(record, version, Outcome.OPENING_SESSION))
        else:
            admitted.append((record, version))
    admitted.sort(key=lambda a: (a[0].concluded_at, a[0].session_id), reverse=True)
    for rank, (record, version) in enumerate(admitted):
        if record.session_id in chosen:
            outcome = Outcome.CHOSEN
        elif record.session_id in fetched:
            outcome = Outcome.OVER_BUDGET
        else:
            outcome = Outcome.BEYOND_OWN_LIMIT if rank >= OWN_HISTORY_LIMIT else Outcome.NOT_RETURNED
        entries.append(_entry(record, version, outcome, tokens=tokens(render_record("own", record))))
    entries.sort(key=lambda e: (e.record.concluded_at, e.record.session_id), reverse=True)
    return entries


def _stage1(c: Scored) -> dict[str, float]:
    """A candidate's stage-1 scores: the vector score of the one channel there is, or, once several
    retrieval channels are fused, their fused score and each channel's named parts."""
    return {"vector": c.score} if not c.parts else {"retrieval": c.score, **c.parts}


def _vector_scores(records: list[MemoryRecord], trace: RecallTrace) -> list[float | None]:
    if trace.vector is None or not records:
        return [None] * len(records)
    dim = trace.vector.shape[0]
    rows = [r.summary_vec if len(r.summary_vec) == dim else [0.0] * dim for r in records]
    scores = np.asarray(rows, dtype=np.float32) @ trace.vector.astype(np.float32)
    return [float(s) if len(r.summary_vec) == dim else None for r, s in zip(records, scores, strict=True)]


def explain_recall(
    recall: SessionRecall,
    audit: StoreAudit,
    vin: str,
    series: str,
    symptom: str,
    codes: list[str],
    at: datetime,
) -> RecallExplanation:
    """Run the job's recall for a session of ``vin`` opening at ``at``, and explain each record's fate."""
    trace = RecallTrace()
    found = recall.for_alert(vin, series, symptom, codes, at, trace=trace)

    def tokens(text: str) -> int:
        return recall.counter.count(text)

    own = _own_entries(audit, vin, at, trace, found, tokens)
    scanned = audit.series_versions(series, SCAN_LIMIT)
    groups = _by_record(scanned)
    spans = {key: _at(vs, at)[0] for key, vs in groups.items()}

    # Stage 1 and 2: every candidate with its scores, ordered as the reranker ranks all of them.
    ranker = trace.reranker
    ranked = ranker.rerank(trace.query, trace.codes, trace.candidates, len(trace.candidates)) if ranker else []
    given = {r.ref() for r in found.similar}
    top = {s.record.ref() for s in trace.reranked}
    stage1 = {(c.record.vin, c.record.session_id): c for c in trace.candidates}
    candidates = []
    for r in ranked:
        c = stage1[(r.record.vin, r.record.session_id)]
        ref = r.record.ref()
        outcome = Outcome.CHOSEN if ref in given else Outcome.OVER_BUDGET if ref in top else Outcome.BELOW_RERANK_TOP
        candidates.append(
            _entry(
                r.record,
                spans.get((r.record.vin, r.record.session_id)),
                outcome,
                scores={**_stage1(c), "rerank": r.score, **r.parts},
                tokens=tokens(render_record("similar", r.record)),
            )
        )

    # The filters, over every record of the series the views returned. ``admits`` is the filter every
    # backend applies; what it refuses beyond the vehicle, the time and validity is the verdict.
    vector = trace.vector if trace.vector is not None else np.zeros(0, np.float32)
    query = SimilarQuery(exclude_vin=vin, series=series, vector=vector, k=DENSE_CANDIDATES, as_of=at)
    # A record that passed the filters and is no candidate ranked below the dense channel's top
    # (no better than its last, the DENSE_CANDIDATES-th best dense score among the candidates: a
    # candidate only the lexical channel found ranks no higher) and shared too little with the query
    # for the lexical channel's top.
    dense = sorted((c.parts.get(PART_DENSE, c.score) for c in trace.candidates), reverse=True)
    full = len(dense) >= DENSE_CANDIDATES
    floor = dense[DENSE_CANDIDATES - 1] if full else float("-inf")
    pool: list[Entry] = []
    for key, versions in groups.items():
        if key in stage1:
            continue
        version, record = _at(versions, at)
        if key[0] == vin:
            entry = _entry(record or version.record, version, Outcome.OWN_VEHICLE, "in its own history")
        elif record is None:
            entry = _entry(version.record, version, Outcome.NOT_CONCLUDED, _when(version.record.concluded_at))
        elif not record.valid:
            entry = _entry(record, version, Outcome.INVALIDATED, f"invalid from {_when(record.invalid_ts)}")
        elif not query.admits(record):
            entry = _entry(record, version, Outcome.NOT_VERIFIED, _unverified(version, at))
        else:
            entry = _entry(record, version, Outcome.NOT_RETURNED)
        pool.append(entry)
    removed: dict[Outcome, list[Entry]] = {}
    for entry, score in zip(pool, _vector_scores([e.record for e in pool], trace), strict=True):
        outcome = entry.outcome
        if outcome is Outcome.NOT_RETURNED and full and score is not None and score <= floor + _SCORE_EPS:
            outcome = Outcome.BELOW_CANDIDATES
        named = {"vector": score} if score is not None else {}
        removed.setdefault(outcome, []).append(
            Entry(entry.record, outcome, named, entry.detail, entry.version_from, entry.version_to)
        )
    counts = {o: len(removed[o]) for o in Outcome if o in removed}
    for entries in removed.values():
        entries.sort(key=lambda e: -e.scores.get("vector", float("-inf")))
        del entries[NEAREST_REMOVED:]
    by_series = audit.fleet_counts().by_series()
    return RecallExplanation(
        vin=vin,
        series=series,
        at=at,
        symptom=symptom,
        codes=list(codes),
        query=trace.query,
        budget=recall.budget,
        recall=found,
        own=own,
        candidates=candidates,
        removed={o: removed[o] for o in Outcome if o in removed},
        removed_counts=counts,
        scanned=len(scanned),
        other_series=sum(n for s, n in by_series.items() if s != series),
    )


__all__ = [
    "NEAREST_REMOVED",
    "SCAN_LIMIT",
    "Entry",
    "Outcome",
    "RecallExplanation",
    "explain_recall",
    "recall_json",
    "vehicle_series",
]

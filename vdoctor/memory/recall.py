"""L3 recall when a session opens: own history, then verified similar cases.

Own history: the vehicle's valid records of the last two years, newest first,
at most ten. Similar cases: same series, recheck_ok = true, valid, other
vehicles; top-20 by vector, reranked to top-5. Both are rendered into the
system context within the injection budget, own history first, whole records
only (a record that does not fit is left out, never cut).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from vdoctor.embed import Embedder
from vdoctor.records import MemoryRecord, MemoryRef
from vdoctor.stores.base import MemoryStore, Scored, SimilarQuery
from vdoctor.tokens import DEFAULT_COUNTER, TokenCounter

OWN_HISTORY_WINDOW = timedelta(days=730)  # two years (DESIGN.md §4)
OWN_HISTORY_LIMIT = 10
SIMILAR_CANDIDATES = 20  # stage 1: vector top-k
SIMILAR_TOP = 5  # stage 2: after reranking
INJECTION_BUDGET_TOKENS = 800  # memory may add at most this much to a prompt
# Reranker weights: the vector carries the gist, shared trouble codes are the
# strongest single signal of the same fault, word overlap breaks ties.
W_VECTOR, W_CODES, W_LEXICAL = 0.6, 0.3, 0.1
MEMORY_HEADER = "## Long-term memory (this vehicle's history first, then verified similar cases)"

_WORD_RE = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]")


class Reranker(Protocol):
    def rerank(self, text: str, codes: list[str], candidates: list[Scored], k: int) -> list[Scored]: ...


def _words(text: str) -> set[str]:
    return set(_WORD_RE.findall(text.lower()))


class OverlapReranker:
    """Offline default: vector score blended with trouble-code and word overlap."""

    def rerank(self, text: str, codes: list[str], candidates: list[Scored], k: int) -> list[Scored]:
        query_codes = set(codes)
        query_words = _words(text)
        rescored = []
        for cand in candidates:
            rec_codes = set(cand.record.dtc_codes)
            code_overlap = (
                len(query_codes & rec_codes) / len(query_codes | rec_codes) if query_codes | rec_codes else 0.0
            )
            rec_words = _words(cand.record.summary + " " + cand.record.root_cause)
            lexical = len(query_words & rec_words) / len(query_words) if query_words else 0.0
            score = W_VECTOR * cand.score + W_CODES * code_overlap + W_LEXICAL * lexical
            rescored.append(Scored(cand.record, score))
        rescored.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
        return rescored[:k]


@dataclass
class Recall:
    own: list[MemoryRecord] = field(default_factory=list)
    similar: list[MemoryRecord] = field(default_factory=list)
    text: str = ""
    tokens: int = 0

    @property
    def own_refs(self) -> list[MemoryRef]:
        return [r.ref() for r in self.own]

    @property
    def similar_refs(self) -> list[MemoryRef]:
        return [r.ref() for r in self.similar]


def render_record(kind: str, record: MemoryRecord) -> str:
    recheck = {True: "ok", False: "failed", None: "pending"}[record.recheck_ok]
    summary = " / ".join(record.summary.splitlines())
    return (
        f"- [{kind}] case://{record.vin}/{record.session_id} | concluded {record.concluded_at:%Y-%m-%d} | "
        f"codes {','.join(record.dtc_codes)} | {record.priority} | recheck {recheck}\n"
        f"  cause: {record.root_cause}\n  fix: {record.fix_action}\n  summary: {summary}"
    )


def render_within_budget(
    own: list[MemoryRecord],
    similar: list[MemoryRecord],
    budget: int = INJECTION_BUDGET_TOKENS,
    counter: TokenCounter = DEFAULT_COUNTER,
) -> Recall:
    """Render whole records, own first, while the total stays within ``budget`` tokens."""
    out = Recall()
    used = counter.count(MEMORY_HEADER) + 1
    blocks = [MEMORY_HEADER]
    for kind, records, kept in (("own", own, out.own), ("similar", similar, out.similar)):
        for record in records:
            block = render_record(kind, record)
            cost = counter.count(block) + 1
            if used + cost > budget:
                continue
            blocks.append(block)
            kept.append(record)
            used += cost
    if out.own or out.similar:
        out.text = "\n".join(blocks)
        out.tokens = counter.count(out.text)
    return out


def recall(
    store: MemoryStore,
    embedder: Embedder,
    vin: str,
    series: str,
    symptom: str,
    codes: list[str],
    now: datetime,
    reranker: Reranker | None = None,
    budget: int = INJECTION_BUDGET_TOKENS,
    counter: TokenCounter = DEFAULT_COUNTER,
) -> Recall:
    own = store.own_history(vin, now - OWN_HISTORY_WINDOW, OWN_HISTORY_LIMIT)
    query = " ".join([symptom, *codes])
    vector = embedder.embed([query])[0]
    candidates = store.similar(SimilarQuery(exclude_vin=vin, series=series, vector=vector, k=SIMILAR_CANDIDATES))
    # The store filters already; checking again here means a faulty backend
    # can never leak another vehicle's history into this context.
    candidates = [
        c
        for c in candidates
        if c.record.vin != vin and c.record.series == series and c.record.recheck_ok is True and c.record.valid
    ]
    own = [r for r in own if r.vin == vin and r.valid]
    similar = [s.record for s in (reranker or OverlapReranker()).rerank(query, codes, candidates, SIMILAR_TOP)]
    return render_within_budget(own, similar, budget, counter)

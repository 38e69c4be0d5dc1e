"""L3 recall when a session opens: own history, then verified similar cases.

Judged in event time: a session opening at T (its first alert's ``ts``) sees
each record in its version current at T, and only what was true at T
(``stores.base``). Own history: the vehicle's records concluded in the two
years up to T and not invalidated by T, newest first, at most ten. Similar
cases: same series, other vehicles, concluded and verified (recheck_ok =
true) by T, not invalidated by T; top-20 by vector, reranked to top-5. Both
are rendered into the system context within the injection budget, own
history first, whole records only (a record that does not fit is left out,
never cut).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from vdoctor.embedders import Embedder
from vdoctor.knowledge import KnowledgePack
from vdoctor.limits import INJECTION_BUDGET_TOKENS
from vdoctor.lines import MEMORY_HEADER, RecallEntry
from vdoctor.records import MemoryRecord, MemoryRef, RecordKind
from vdoctor.stores.base import MemoryStore, Scored, SimilarQuery
from vdoctor.tokens import DEFAULT_COUNTER, TokenCounter

OWN_HISTORY_WINDOW = timedelta(days=730)  # two years (DESIGN.md §4)
OWN_HISTORY_LIMIT = 10
SIMILAR_CANDIDATES = 20  # stage 1: vector top-k
SIMILAR_TOP = 5  # stage 2: after reranking
# Reranker weights. The vector carries the gist; shared trouble codes are the
# strongest single signal of the same fault; BM25 word overlap (scaled to
# [0, 1] by the best candidate) brings back the exact terms a hashed vector
# blurs. Tuned on LoCoMo (bench/locomo.py): lexical 1.0 with vector 0.5 beat
# either alone.
W_VECTOR, W_CODES, W_LEXICAL = 0.5, 0.5, 1.0
# Okapi BM25 constants (the usual defaults).
BM25_K1, BM25_B = 1.2, 0.75

_WORD_RE = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]")
# Function words carry no evidence; dropping them keeps BM25 on content words.
STOPWORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being am do does did "
    "have has had i me my we our you your he him his she her it its they them their this that these those "
    "what which who whom when where why how not no so too very can will just than then there here about into "
    "over after before up down out off again once all any both each few more most other some such own same only".split()
)


class Reranker(Protocol):
    def rerank(self, text: str, codes: list[str], candidates: list[Scored], k: int) -> list[Scored]: ...


def _words(text: str) -> list[str]:
    return [w for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS]


def bm25_scores(query: str, docs: list[str]) -> list[float]:
    """BM25 of each doc for the query, with document frequencies taken over ``docs`` themselves.

    The candidates of one search are the only corpus a reranker sees; words
    common to all of them (the vehicle series, the shared fault) weigh little,
    the words that tell candidates apart weigh most.
    """
    bags = [Counter(_words(d)) for d in docs]
    if not bags:
        return []
    df: Counter[str] = Counter()
    for bag in bags:
        df.update(bag.keys())
    n = len(bags)
    avg = sum(sum(b.values()) for b in bags) / n or 1.0
    terms = set(_words(query))
    out = []
    for bag in bags:
        length = sum(bag.values())
        score = 0.0
        for w in terms:
            f = bag.get(w)
            if f:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                score += idf * f * (BM25_K1 + 1) / (f + BM25_K1 * (1 - BM25_B + BM25_B * length / avg))
        out.append(score)
    return out


class OverlapReranker:
    """Offline default: vector score blended with trouble-code overlap and BM25 word overlap."""

    def rerank(self, text: str, codes: list[str], candidates: list[Scored], k: int) -> list[Scored]:
        query_codes = set(codes)
        lexical = bm25_scores(text, [c.record.summary + " " + c.record.root_cause for c in candidates])
        best = max(lexical, default=0.0) or 1.0
        rescored = []
        for cand, lex in zip(candidates, lexical, strict=True):
            rec_codes = set(cand.record.dtc_codes)
            union = query_codes | rec_codes
            code_overlap = len(query_codes & rec_codes) / len(union) if union else 0.0
            # The score's weighted terms, kept by name for explanations (memory.explain).
            parts = {
                "rerank.vector": W_VECTOR * cand.score,
                "rerank.codes": W_CODES * code_overlap,
                "rerank.lexical": W_LEXICAL * lex / best,
            }
            rescored.append(Scored(cand.record, sum(parts.values()), {**cand.parts, **parts}))
        rescored.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
        return rescored[:k]


@dataclass
class RecallTrace:
    """What one recall did at each stage; ``recall`` fills it only when given one (``memory.explain`` reads it)."""

    query: str = ""
    codes: list[str] = field(default_factory=list)
    vector: npt.NDArray[np.float32] | None = None
    # Own history as the store returned it, newest first (before the budget).
    own: list[MemoryRecord] = field(default_factory=list)
    # Stage 1: the candidates of every retrieval channel, checked; stage 2: the reranker's top-k.
    candidates: list[Scored] = field(default_factory=list)
    reranked: list[Scored] = field(default_factory=list)
    reranker: Reranker | None = None


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


def recall_entry(kind: Literal["own", "similar"], record: MemoryRecord) -> RecallEntry:
    return RecallEntry(
        kind=kind,
        vin=record.vin,
        session_id=record.session_id,
        concluded=f"{record.concluded_at:%Y-%m-%d}",
        codes=tuple(record.dtc_codes),
        priority=record.priority,
        recheck_ok=record.recheck_ok,
        cause=record.root_cause,
        fix=record.fix_action,
        summary=" / ".join(record.summary.splitlines()),
        milestone=record.kind is RecordKind.MILESTONE,
    )


def render_record(kind: Literal["own", "similar"], record: MemoryRecord) -> str:
    return recall_entry(kind, record).render()


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
    sections: tuple[tuple[Literal["own", "similar"], list[MemoryRecord], list[MemoryRecord]], ...] = (
        ("own", own, out.own),
        ("similar", similar, out.similar),
    )
    for kind, records, kept in sections:
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


def similar_candidates(store: MemoryStore, query: SimilarQuery) -> list[Scored]:
    """Stage 1 of similar-case recall: the candidates of every retrieval channel, checked.

    Today one channel (the store's vector search). A further channel (a
    lexical one, say) adds its hits to the list here, fused with these, before
    the check below, which every candidate passes whatever found it.
    """
    candidates = store.similar(query)
    # The store filters already; checking again here means a faulty backend
    # can never leak another vehicle's history, or a case from after the
    # session opened, into this context.
    return [c for c in candidates if query.admits(c.record)]


def own_history(store: MemoryStore, vin: str, at: datetime) -> list[MemoryRecord]:
    """The vehicle's own records as of ``at`` (its own only, checked again)."""
    own = store.own_history(vin, at - OWN_HISTORY_WINDOW, OWN_HISTORY_LIMIT, as_of=at)
    return [r for r in own if r.vin == vin and r.valid and r.concluded_at <= at]


def recall(
    store: MemoryStore,
    embedder: Embedder,
    vin: str,
    series: str,
    symptom: str,
    codes: list[str],
    at: datetime,
    reranker: Reranker | None = None,
    budget: int = INJECTION_BUDGET_TOKENS,
    counter: TokenCounter = DEFAULT_COUNTER,
    trace: RecallTrace | None = None,
) -> Recall:
    """What a session of ``vin`` opening at event time ``at`` is given from long-term memory.

    ``trace``: filled with what each stage found, for an explanation of this very recall.
    """
    own = own_history(store, vin, at)
    query = " ".join([symptom, *codes])
    vector = embedder.embed([query])[0]
    candidates = similar_candidates(
        store, SimilarQuery(exclude_vin=vin, series=series, vector=vector, k=SIMILAR_CANDIDATES, as_of=at)
    )
    ranker = reranker or OverlapReranker()
    reranked = ranker.rerank(query, codes, candidates, SIMILAR_TOP)
    if trace is not None:
        trace.query, trace.codes, trace.vector, trace.reranker = query, list(codes), vector, ranker
        trace.own, trace.candidates, trace.reranked = list(own), list(candidates), list(reranked)
    return render_within_budget(own, [s.record for s in reranked], budget, counter)


def session_query(alert_text: str, codes: list[str], pack: KnowledgePack) -> str:
    """What a session's opening alert asks long-term memory: its text and its codes' definitions."""
    definitions = [entry.definition_en if (entry := pack.get(c)) else "" for c in codes]
    return " ".join([alert_text, *definitions])


class SessionRecall:
    """What a session opening with an alert is given from long-term memory.

    The job's sessions and ``vdoctor memory recall`` both go through ``for_alert``,
    so "what a new session would recall" is what the job recalls.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        pack: KnowledgePack,
        budget: int = INJECTION_BUDGET_TOKENS,
        counter: TokenCounter = DEFAULT_COUNTER,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.pack = pack
        self.budget = budget
        self.counter = counter

    def for_alert(
        self, vin: str, series: str, alert_text: str, codes: list[str], at: datetime, trace: RecallTrace | None = None
    ) -> Recall:
        """Recall for a session opening with this alert at event time ``at`` (the alert's ``ts``).

        ``trace``: filled with each stage's findings (``memory.explain`` explains the recall from it).
        """
        return recall(
            self.store,
            self.embedder,
            vin,
            series,
            session_query(alert_text, codes, self.pack),
            codes,
            at,
            budget=self.budget,
            counter=self.counter,
            trace=trace,
        )

"""L3 recall when a session opens: own history, then verified similar cases.

Judged in event time: a session opening at T (its first alert's ``ts``) sees
each record in its version current at T, and only what was true at T
(``stores.base``). Own history: the vehicle's records concluded in the two
years up to T and not invalidated by T, newest first, at most ten, as the
session opening at T knew them: never its own case, even when the session's
opening alert runs again after it was written (``own_history``). Similar
cases: same series, other vehicles, concluded and verified (recheck_ok =
true) by T, not invalidated by T; found by two channels, BM25 over each
case's indexed text and the embedding of it, top-50 each, fused
(``retrieval``), then reranked to top-5 with the trouble codes. Both are
rendered into the system context within the injection budget, own history
first, whole records only (a record that does not fit is left out, never
cut).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from vdoctor.embedders import Embedder, embedder_id
from vdoctor.events import same_second_index, session_id_for
from vdoctor.identity import KeptByIdentity
from vdoctor.knowledge import KnowledgePack
from vdoctor.limits import INJECTION_BUDGET_TOKENS
from vdoctor.lines import MEMORY_HEADER, RecallEntry, day
from vdoctor.memory.write_policy import MILESTONE_SEPARATOR
from vdoctor.records import MemoryRecord, MemoryRef, RecordKind
from vdoctor.retrieval.cases import candidate_columns, case_candidates
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES
from vdoctor.stores.base import EmbedderMismatch, MemoryStore, Scored, SimilarQuery, newest_first
from vdoctor.tokens import DEFAULT_COUNTER, TokenCounter

OWN_HISTORY_WINDOW = timedelta(days=730)  # two years (DESIGN.md §4)
OWN_HISTORY_LIMIT = 10
# Event times are kept to the second (``records``): the latest time before an event time is one step earlier.
EVENT_TIME_STEP = timedelta(seconds=1)
SIMILAR_TOP = 5  # stage 2: after reranking
# The reranker adds trouble-code overlap (Jaccard of the alert's codes and the
# case's) to the fused retrieval score (in [0, 1]): a shared code is the
# strongest single sign of the same fault. Its weight is the one the reranker
# had before the hybrid pipeline; it could not be tuned (LoCoMo's questions and
# our vehicle set's symptom queries carry no codes), so it stays until a set
# with codes exists.
W_CODES = 0.5
# Names of the reranker's score parts (``Scored.parts``).
PART_CODES = "rerank.codes"


class Reranker(Protocol):
    def rerank(self, text: str, codes: list[str], candidates: list[Scored], k: int) -> list[Scored]: ...


class OverlapReranker:
    """The fused retrieval score plus trouble-code overlap."""

    def rerank(self, text: str, codes: list[str], candidates: list[Scored], k: int) -> list[Scored]:
        ranked = overlap_ranked(codes, [c.record for c in candidates], [c.score for c in candidates])
        # Only the top k leave with their score parts (a candidate's parts and this term).
        return [
            Scored(candidates[i].record, -neg, {**candidates[i].parts, PART_CODES: term})
            for neg, _, _, i, term in ranked[:k]
        ]


def overlap_ranked(
    codes: list[str], records: list[MemoryRecord], scores: list[float]
) -> list[tuple[float, str, str, int, float]]:
    """Candidates given by columns in ``OverlapReranker``'s order, best first.

    Each as (-(score + code term), vin, session_id, index, code term): sorted as (-score, vin,
    session_id), then arrival (a stable sort's order).
    """
    ranked = [
        (-(score + term), record.vin, record.session_id, i, term)
        for i, (record, score, term) in enumerate(zip(records, scores, code_terms(codes, records), strict=True))
    ]
    ranked.sort()
    return ranked


def code_terms(codes: list[str], records: list[MemoryRecord]) -> list[float]:
    """Each record's trouble-code term of ``OverlapReranker``: ``W_CODES`` times the Jaccard of its codes and the
    query's."""
    query_codes = set(codes)
    terms: list[float] = []
    for record in records:
        # Most candidates share no code with the query (or it has none): their term is
        # 0.0, as the Jaccard below gives it, without building the union.
        term = 0.0
        if query_codes and not query_codes.isdisjoint(record.dtc_codes):
            rec_codes = set(record.dtc_codes)
            term = W_CODES * (len(query_codes & rec_codes) / len(query_codes | rec_codes))
        terms.append(term)
    return terms


def top_admitted(
    codes: list[str], records: list[MemoryRecord], scores: list[float], admits: Callable[[MemoryRecord], bool], k: int
) -> list[MemoryRecord]:
    """The first ``k`` records in ``overlap_ranked``'s order that ``admits`` admits, sorting only the head of it.

    That order is by (-(score + code term), vin, session_id); every candidate whose first part is above
    the k-th smallest one's comes after all those at or below it, so the order's first candidates are
    these (at least k, more when tied), sorted. Only when fewer than k of them are admitted is the whole
    order needed. (A NaN score has no place in such an order: then too.) On a fleet replay ~45
    candidates a recall, and building and sorting a tuple for each was most of the rerank's cost.
    """
    if k <= 0:
        return []
    negated = [-(score + term) for score, term in zip(scores, code_terms(codes, records), strict=True)]
    head: Sequence[int] = range(len(records))
    total = sum(negated)
    if len(negated) > k and total == total:  # (a NaN anywhere makes the sum NaN, never equal to itself)
        cut = sorted(negated)[k - 1]
        head = [i for i, value in enumerate(negated) if value <= cut]
    ranked = sorted([(negated[i], records[i].vin, records[i].session_id, i) for i in head])
    top = [records[i] for _, _, _, i in ranked if admits(records[i])]
    if len(top) >= k or len(ranked) == len(records):
        return top[:k]
    return [records[i] for _, _, _, i, _ in overlap_ranked(codes, records, scores) if admits(records[i])][:k]


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
    # Why similar cases were left out (records embedded by another model: ``memory reembed``).
    similar_skipped: str = ""

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
        concluded=day(record.concluded_at),
        codes=tuple(record.dtc_codes),
        priority=record.priority,
        recheck_ok=record.recheck_ok,
        cause=record.root_cause,
        fix=record.fix_action,
        summary=" / ".join(record.summary.splitlines()),
        milestone=record.kind is RecordKind.MILESTONE,
    )


def render_record(kind: Literal["own", "similar"], record: MemoryRecord) -> str:
    # A similar case is the same decoded record at every session that finds it: rendered once per record
    # object. A vehicle's own history is read afresh at each of its sessions, so it is rendered each time.
    return _RENDERED_SIMILAR(record) if kind == "similar" else recall_entry(kind, record).render()


_RENDERED_SIMILAR: KeptByIdentity[MemoryRecord, str] = KeptByIdentity(
    lambda record: recall_entry("similar", record).render(), capacity=256
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
        # ``used`` budgeted one token more per block, for the newline after it; an additive
        # counter's count of the blocks joined by newlines is the sum of theirs, which is the rest.
        out.tokens = used - len(blocks) if getattr(counter, "additive", False) else counter.count(out.text)
    return out


def similar_candidates(store: MemoryStore, query: SimilarQuery) -> list[Scored]:
    """Stage 1 of similar-case recall: the candidates of both retrieval channels, fused, checked.

    The lexical and the dense channel's top candidates, fused
    (``retrieval.cases``); every candidate then passes the check below,
    whatever channel found it.
    """
    candidates = case_candidates(store, query)
    # The store filters already; checking again here means a faulty backend
    # can never leak another vehicle's history, or a case from after the
    # session opened, into this context.
    return [c for c in candidates if query.admits(c.record)]


def similar_top(store: MemoryStore, query: SimilarQuery, codes: list[str], k: int) -> list[MemoryRecord]:
    """``similar_candidates`` reranked by ``OverlapReranker`` to its top ``k``: the same records, in the same order.

    What a session's recall uses when nothing asks for the score parts: the candidates stay
    columns, never ranked by their fused score alone (the rerank's order decides), and only the
    records of the top ``k`` are taken (no ``Scored`` per candidate, ~45 a session).
    """
    found = candidate_columns(store, query)
    # A candidate's place in the rerank's order does not depend on which others pass the check (its
    # fused score is fused over all of them, as ``similar_candidates`` fuses it, and (vin, session_id)
    # is unique, so the index never decides): the top k of those that pass are the first k to pass,
    # in that order. Each is checked as ``similar_candidates`` checks every candidate.
    return top_admitted(codes, found.records, found.fused, query.admits, k)


def own_history(store: MemoryStore, vin: str, at: datetime, session_id: str | None = None) -> list[MemoryRecord]:
    """The vehicle's own records as of ``at`` (its own only, checked again), as the session opening at ``at`` knew them.

    That session is ``session_id`` (default ``session_id_for(vin, at)``). Its opening alert runs again
    after a restore from a checkpoint taken before that alert's run was stored, and the first run may have concluded and
    written its case by then (concluded at ``at``, so it exists as of ``at``): the run again must recall
    what the first run recalled, never the session's own case. So the session's own records are left
    out (its case; its milestones conclude later than ``at``), and an earlier case it was merged into
    (``write_policy``: the same cause within 30 days) is taken in its version from before the merge,
    which this session wrote. Done here, after every backend's read, so that no backend can give a
    session its own case; one record more is read, so the limit is still met with one left out.
    """
    second = session_id_for(vin, at)
    opening = second if session_id is None else session_id
    milestones = opening + MILESTONE_SEPARATOR
    # Sessions that opened in the same second after this one (``following_session_id``) may have concluded,
    # at ``at`` too, by the time a restore runs this alert again: they are no more this session's past than
    # its own case is.
    own_index = same_second_index(second, opening) or 1
    since = at - OWN_HISTORY_WINDOW
    own = store.own_history(vin, since, OWN_HISTORY_LIMIT + 1, as_of=at)
    merged = {r.session_id for r in own if opening in r.merged_sessions}
    if merged:
        # The version before the merge is the one current just before ``at`` (event times are whole seconds).
        before = store.own_history(vin, since, OWN_HISTORY_LIMIT + 1, as_of=at - EVENT_TIME_STEP)
        own = [r for r in own if r.session_id not in merged] + [r for r in before if r.session_id in merged]
        own = newest_first(own, OWN_HISTORY_LIMIT + 1)
    return [
        r
        for r in own
        if r.vin == vin
        and r.valid
        and r.concluded_at <= at
        and r.session_id != opening
        and not r.session_id.startswith(milestones)
        and (same_second_index(second, r.session_id) or 0) < own_index
    ][:OWN_HISTORY_LIMIT]


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
    session_id: str | None = None,
) -> Recall:
    """What a session of ``vin`` opening at event time ``at`` is given from long-term memory.

    ``trace``: filled with what each stage found, for an explanation of this very recall.
    ``session_id``: the opening session's id (``own_history``), by default the one an alert at ``at`` opens.
    """
    own = own_history(store, vin, at, session_id)
    query = " ".join([symptom, *codes])
    # One query embedding serves the dense channel and the fusion (the rerank adds no model).
    vector = embedder.embed_queries([query])[0]
    asked = SimilarQuery(vin, series, vector, DENSE_CANDIDATES, at, text=query, embedder=embedder_id(embedder))
    skipped = ""
    # The default ranking, with nothing asking for the stages' scores: only the top records are taken.
    plain = reranker is None and trace is None
    candidates: list[Scored] = []
    similar: list[MemoryRecord] = []
    try:
        if plain:
            similar = similar_top(store, asked, codes, SIMILAR_TOP)
        else:
            candidates = similar_candidates(store, asked)
    except EmbedderMismatch as e:
        # A store written with another embedder (until ``memory reembed`` has run):
        # the vehicle's own history needs no vectors and is still given.
        skipped = str(e)
    if not plain:
        ranker = reranker or OverlapReranker()
        reranked = ranker.rerank(query, codes, candidates, SIMILAR_TOP)
        similar = [s.record for s in reranked]
        if trace is not None:
            trace.query, trace.codes, trace.vector, trace.reranker = query, list(codes), vector, ranker
            trace.own, trace.candidates, trace.reranked = list(own), list(candidates), list(reranked)
    out = render_within_budget(own, similar, budget, counter)
    out.similar_skipped = skipped
    return out


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
        self,
        vin: str,
        series: str,
        alert_text: str,
        codes: list[str],
        at: datetime,
        trace: RecallTrace | None = None,
        session_id: str | None = None,
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
            session_id=session_id,
        )

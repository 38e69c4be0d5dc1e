"""The long-term memory (L3) store interface, shared by every backend.

Per-VIN isolation is enforced here, in the API, not left to callers: own
history takes a VIN and returns that VIN's records only; similar-case search
takes the asking VIN and never returns it, and only returns verified
(recheck_ok = true), valid records of the same series.

Recall is judged in event time (DESIGN.md §4). Every write carries the event
time of what it records (a conclusion, a recheck, a lifecycle event), and a
record keeps its earlier versions: a write that replaces what a record said
(a merge's new conclusion, a recheck that overturns an earlier verdict)
archives the version it replaces, closed at the new version's time. A change
with event time t holds for a session opening at T exactly when t <= T; the
recall reads (``own_history``, ``similar``) take that T (``as_of``) and return
each record in its version current at T, as of T (``MemoryRecord.as_of``),
without its summary source (that is for re-extraction, never for a prompt).

Event times of one record only move forward: a write whose time is older than
the record's current version takes effect at that version's time instead
(events of one vehicle are applied in arrival order). So a read as of T gives
the same answer whether or not writes with later event times have been
applied yet: what makes replays deterministic is then only that every write
with event time <= T is applied before a session opening at T reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord, RecordKind


@dataclass(frozen=True)
class Scored:
    record: MemoryRecord
    score: float
    # The named parts of ``score`` (each retrieval channel's score, a reranker's weighted terms),
    # for explaining a recall; backends leave it empty, their ``score`` is their channel's score.
    parts: Mapping[str, float] = field(default_factory=dict, compare=False)


_new_object = object.__new__


def scored(record: MemoryRecord, score: float) -> Scored:
    """``Scored(record, score)`` with its fields set at once: a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__`` (~0.5 us, this ~0.2 us; the embedded store makes one per hit
    of both of a recall's channels, ~70 a recall)."""
    made = _new_object(Scored)
    fields = made.__dict__
    fields["record"], fields["score"], fields["parts"] = record, score, {}
    return made


def ranked_hits(hits: list[tuple[int, float]], records: Mapping[int, MemoryRecord], k: int) -> list[Scored]:
    """A channel's hits (row id, score) whose rows passed (``records``), best first, at most ``k``; ties broken by
    the record, never by the order the hits came in (deterministic replays)."""
    found = [scored(records[rowid], score) for rowid, score in hits if rowid in records]
    found.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
    return found[:k]


@dataclass(frozen=True)
class ChannelHits:
    """Both channels of one query by columns, before their ranking (what a store that holds both indexes
    side by side found): each channel's hits as (row id, score) in the order its index gave them, and the
    record of every hit whose row passed every filter (a hit without one is not a candidate).

    ``ranked()`` is ``MemoryStore.channels``; a caller that needs no order (recall ranks by its own scores)
    can take the columns as they are (``retrieval.cases.candidate_columns``).
    """

    dense: list[tuple[int, float]]
    lexical: list[tuple[int, float]]
    records: Mapping[int, MemoryRecord]
    dense_k: int
    lexical_k: int

    def ranked(self) -> tuple[list[Scored], list[Scored]]:
        """``MemoryStore.channels`` of the same query."""
        return (
            ranked_hits(self.dense, self.records, self.dense_k),
            ranked_hits(self.lexical, self.records, self.lexical_k),
        )


def channel_hits(store: object, query: SimilarQuery, dense_k: int, lexical_k: int) -> ChannelHits | None:
    """``store.channel_hits`` when the backend offers it (the embedded store), else None (ask ``channels``).

    Optional, and so not part of ``MemoryStore``: a wrapper forwards it with this. Taken only from a class
    that defines it beside its ``channels`` (``_offers_hits``).
    """
    if not _offers_hits(type(store)):
        return None
    hits: ChannelHits | None = store.channel_hits(query, dense_k, lexical_k)  # type: ignore[attr-defined]
    return hits


def read_at_once(store: object, vin: str, session_id: str) -> MemoryRecord | None:
    """``store.get``, failing at once when the store is down: ``RetryingStore.get`` waits out an outage (a
    write's merge lookup depends on it), which a read that may go without, as recall's, must not."""
    at_once = getattr(store, "get_at_once", None) or store.get  # type: ignore[attr-defined]
    record: MemoryRecord | None = at_once(vin, session_id)
    return record


def _offers_hits(cls: type) -> bool:
    """Whether ``cls``'s ``channel_hits`` is the one its ``channels`` ranks: both defined by the same class.

    A subclass that changes ``channels`` alone, or a wrapper that forwards the names it does not define
    (``__getattr__``), goes through its own ``channels``, never past it to an inner store's hits.
    """
    offers = _OFFERS_HITS.get(cls)
    if offers is None:

        def owner(name: str) -> type | None:
            return next((c for c in cls.__mro__ if name in vars(c)), None)

        offers = _OFFERS_HITS[cls] = owner("channel_hits") is not None and owner("channel_hits") is owner("channels")
    return offers


_OFFERS_HITS: dict[type, bool] = {}


class EmbedderMismatch(StoreError):
    """The records searched were embedded by another model than the query.

    Vectors of two models cannot be compared (even at the same dimension), so
    the search is refused rather than ranked wrongly. Re-embed the records
    with the configured model: ``vdoctor memory reembed`` (README, *Changing
    the embedder*).
    """


@dataclass(frozen=True)
class SimilarQuery:
    """Similar verified cases of other vehicles of one series, as a session opening at ``as_of`` sees them.

    Both retrieval channels take the same query: ``similar`` ranks by
    ``vector``, ``lexical`` by BM25 of ``text``.
    """

    exclude_vin: str
    series: str
    vector: npt.NDArray[np.float32]
    k: int
    # The event time of the session that asks: only what was true then is returned.
    as_of: datetime
    # The query text of the lexical channel (the session's symptom and codes).
    text: str = ""
    # Which embedder made ``vector`` (``embedders.embedder_id``); "" leaves it unchecked.
    embedder: str = ""

    def admits(self, record: MemoryRecord) -> bool:
        """The filters every backend applies, on a record already taken as of ``as_of``.

        Recall checks every candidate again with this, whatever channel found
        it, so that a faulty backend can never leak another vehicle's
        unverified case or a case from the future into a context. Only a concluded case (kind final) is one:
        a milestone is what an open session guessed, whatever a verdict says of it.
        """
        return (
            record.kind is RecordKind.FINAL
            and record.vin != self.exclude_vin
            and record.series == self.series
            and record.recheck_ok is True
            and record.valid
            and record.concluded_at <= self.as_of
            and record.verified_ts is not None
            and record.verified_ts <= self.as_of
        )


class MemoryStore(Protocol):
    """Every backend implements this; one contract test suite runs over all of them."""

    def upsert(self, record: MemoryRecord) -> None:
        """Insert, or replace the current version of the row with the same (vin, session_id).

        When the record concludes later than the stored version began (a
        merge), the stored version is archived, closed at the new
        ``concluded_at``; otherwise (a re-run, a re-extraction, a superseded
        milestone) the current version is rewritten in place.
        """
        ...

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        """Upsert a batch (one round trip where the backend allows; Doris wants batches)."""
        ...

    def get(self, vin: str, session_id: str) -> MemoryRecord | None: ...

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        """This VIN's records as of ``as_of``, newest conclusion first, at most ``limit``.

        Each record in its version current at ``as_of`` (taken ``as_of`` it),
        concluded in [since, as_of], not invalidated at or before ``as_of``.
        """
        ...

    def similar(self, query: SimilarQuery) -> list[Scored]:
        """Top-k by inner product among other VINs' records of the series, as of ``query.as_of``.

        Each record in its version current at ``as_of``, taken as of it, and
        admitted by ``query.admits``: concluded and verified (recheck_ok =
        true) at or before ``as_of``, not invalidated at or before it.
        Raises ``EmbedderMismatch`` when ``query.embedder`` is set and the
        records searched were embedded by another model.
        """
        ...

    def lexical(self, query: SimilarQuery) -> list[Scored]:
        """Top-k by BM25 of ``query.text`` among the same records as ``similar``, best first.

        A record's indexed text is ``retrieval.text.record_text`` in the tokens
        of ``retrieval.tokens``; only records sharing a token with the query
        are returned, with their BM25 score (over the backend's corpus: the
        series' records in the embedded store, the filtered set in MySQL,
        the table in Doris).
        """
        ...

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        """Both retrieval channels for one query: exactly what ``similar`` with ``k = dense_k`` and
        ``lexical`` with ``k = lexical_k`` return (no lexical hits for a query without text).

        A backend holding both indexes side by side reads the union of their
        winners once; the others call the two in turn (``separate_channels``).
        The embedded store also gives them unranked, by columns (``channel_hits``).
        """
        ...

    def count_stale(self, embedder: str) -> int:
        """How many record versions (current and archived) were embedded by another embedder than ``embedder``."""
        ...

    def stale_versions(self, embedder: str, limit: int) -> list[StaleVersion]:
        """At most ``limit`` of those versions, in the backend's order (versions set since leave the list)."""
        ...

    def set_vectors(self, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        """Replace each version's vector in place, marked as ``embedder``'s; returns how many were replaced.

        No new version, no event time and no other field changes (a re-embed
        changes how a case is found, never what it says). A version that was
        re-written or replaced since it was listed (its embedder or start is
        no longer the listed one) is left alone; the next listing has it
        again if it still needs it.
        """
        ...

    def set_recheck(self, vin: str, session_id: str, ok: bool, at: datetime) -> bool:
        """Store a recheck result with its event time; False when no such record exists, or when the
        verdict is from before the fault came back (``stale_recheck``): not applied.

        A first verdict sets recheck_ok and verified_ts; the same verdict again
        changes nothing; an overturned verdict archives the version it replaces.
        """
        ...

    def soft_delete(self, vin: str, at: datetime) -> int:
        """Mark every valid record of the VIN invalid from event time ``at`` (kept for audit), and move one
        already invalid from a later time to ``at`` where its version had begun by then
        (``invalidated_earlier``). Returns rows changed."""
        ...

    def history(self, vin: str) -> list[MemoryRecord]:
        """Every record of the VIN, valid or not, newest first (for audit and the CLI)."""
        ...

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        """Valid records written by this summary-prompt version, by (vin, session_id); for re-extraction."""
        ...

    def prompt_versions(self) -> list[str]:
        """Every summary-prompt version that valid records were written with, sorted."""
        ...

    def find_duplicate(
        self, vin: str, root_cause: str, since: datetime, until: datetime | None = None
    ) -> MemoryRecord | None:
        """The newest valid record of this VIN with this root cause concluded at or after ``since`` (and at or
        before ``until``, if given).

        The write policy uses it to update an existing case instead of adding a
        near-identical one (same vin and root_cause within 30 days); ``until``
        for a case that concluded before the newest of its cause (``write_final``).
        """
        ...

    def count(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StaleVersion:
    """A record version (current or archived) whose vector another embedder made: ``memory reembed`` rewrites it."""

    vin: str
    session_id: str
    # Where the version starts; ``archived``: a replaced version (the archive), else the current one.
    version_from: datetime
    archived: bool
    # What its vector embeds (``retrieval.text.record_dense_text``), and who embedded it ("" unknown).
    text: str
    embedder: str


@dataclass(frozen=True)
class RecheckWrite:
    """What a recheck does to a record's current version (the rule every backend follows)."""

    verified_ts: datetime | None
    version_from: datetime
    # The current version is archived, closed at ``version_from`` (an overturned verdict).
    archive: bool
    # The same verdict again: nothing changes.
    noop: bool


def effective_at(at: datetime, version_from: datetime) -> datetime:
    """A change takes effect at its event time, but never before the version it changes."""
    return max(at, version_from)


def invalidated_earlier(invalid_ts: datetime | None, version_from: datetime, at: datetime) -> bool:
    """Whether a record already invalid from ``invalid_ts`` is invalid from ``at`` instead (``soft_delete``): a
    lifecycle event earlier than the one that set it invalid, at a time its version had begun. A record is
    invalid from the earliest such event: a fleet system that sent one misdated years ahead corrects it by
    sending it again, dated right, and the vehicle's cases stayed valid until the misdated time, recalled by
    the next owner's sessions (found by an audit). A version begun after ``at`` is of the care after it, and
    stays as it is; a record invalid without a time (written before event times were kept) as well."""
    return invalid_ts is not None and invalid_ts > at and version_from <= at


def upsert_version_from(current_from: datetime | None, concluded_at: datetime) -> datetime:
    """Where the current version starts after an upsert; later than ``current_from`` means archive it."""
    return concluded_at if current_from is None else max(current_from, concluded_at)


def stale_recheck(merged: bool, concluded_at: datetime, at: datetime) -> bool:
    """Whether a recheck at ``at`` is from before the fault came back: the record holds sessions merged into
    it (the same fault again within the dedup window), and the newest of them concluded after the verdict.
    Such a verdict is about a repair that did not hold; it must not verify the record's current version,
    whose own recheck is still to come (``write_policy.set_recheck`` turns it into a dead letter)."""
    return merged and at < concluded_at


def recheck_write(
    current_ok: bool | None, current_verified: datetime | None, current_from: datetime, ok: bool, at: datetime
) -> RecheckWrite:
    at = effective_at(at, current_from)
    if current_ok is None:
        return RecheckWrite(at, current_from, archive=False, noop=False)
    if current_ok == ok:
        return RecheckWrite(current_verified, current_from, archive=False, noop=True)
    return RecheckWrite(at, at, archive=at > current_from, noop=False)


def separate_channels(
    store: MemoryStore, query: SimilarQuery, dense_k: int, lexical_k: int
) -> tuple[list[Scored], list[Scored]]:
    """``MemoryStore.channels`` by its definition: ``similar``, then ``lexical`` when the query has text."""
    dense = store.similar(dataclasses.replace(query, k=dense_k))
    lexical = store.lexical(dataclasses.replace(query, k=lexical_k)) if query.text.strip() else []
    return dense, lexical


def check_dimensions(query: SimilarQuery, found: set[int]) -> None:
    """Refuse a search over vectors of another dimension than the query's (a model change not re-embedded)."""
    other = sorted(found - {int(query.vector.shape[0])})
    if other:
        raise EmbedderMismatch(
            f"similar cases of series {query.series!r} hold vectors of dimension {', '.join(map(str, other))}, "
            f"the query one of {query.vector.shape[0]}: they were embedded by another model; re-embed them with "
            "the configured embedder: vdoctor memory reembed"
        )


def check_embedders(query: SimilarQuery, found: set[str]) -> None:
    """Refuse a search whose records were embedded by another model than the query (when it names one)."""
    if not query.embedder:
        return
    other = sorted(found - {query.embedder})
    if other:
        models = ", ".join(m or "an unrecorded model" for m in other)
        raise EmbedderMismatch(
            f"similar cases of series {query.series!r} were embedded by {models}, the query by {query.embedder}; "
            "re-embed them with the configured embedder: vdoctor memory reembed"
        )


def newest_duplicate(
    records: Iterable[MemoryRecord], root_cause: str, since: datetime, until: datetime | None
) -> MemoryRecord | None:
    """``MemoryStore.find_duplicate`` over a vehicle's current records, for the stores that hold them as objects."""
    found = [
        r
        for r in records
        if r.valid
        and r.root_cause == root_cause
        and since <= r.concluded_at
        and (until is None or r.concluded_at <= until)
    ]
    return max(found, key=lambda r: (r.concluded_at, r.session_id)) if found else None


def newest_first(records: list[MemoryRecord], limit: int) -> list[MemoryRecord]:
    """Own-history order: newest conclusion first, ties by session id descending."""
    records.sort(key=lambda r: (r.concluded_at, r.session_id), reverse=True)
    return records[:limit]


def top_k(
    records: list[MemoryRecord], matrix: npt.NDArray[np.float32], vector: npt.NDArray[np.float32], k: int
) -> list[Scored]:
    """Rank candidate records by inner product with the (normalised) query vector."""
    if not records or k <= 0:
        return []
    scores = matrix @ vector.astype(np.float32)
    if len(records) > k:
        idx = np.argpartition(-scores, k - 1)[:k]
    else:
        idx = np.arange(len(records))
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return [Scored(records[i], float(scores[i])) for i in idx]

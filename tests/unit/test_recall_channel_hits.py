"""Recall's candidates from a store's unranked channel hits against the ranked channels they replace."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import cast

import numpy as np
import pytest

from vdoctor.memory.recall import similar_top
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.cases import CandidateColumns, candidate_columns, case_candidates
from vdoctor.stores.base import ChannelHits, MemoryStore, Scored, SimilarQuery, channel_hits
from vdoctor.stores.retry import RetryingStore

pytestmark = pytest.mark.unit

AT = datetime(2026, 11, 5, tzinfo=UTC)


class Ranked:
    """A store with the plain ``channels`` only: the ranking of the hits it was given."""

    def __init__(self, hits: ChannelHits) -> None:
        self.hits = hits

    @classmethod
    def of(cls, hits: ChannelHits) -> MemoryStore:
        return cast(MemoryStore, cls(hits))

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        return self.hits.ranked()  # cut at the hits' own k (recall asks for the default ones)


class Unranked(Ranked):
    """A store offering its hits unranked as well (as the embedded one does: its ``channels`` beside them)."""

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        return self.channel_hits(query, dense_k, lexical_k).ranked()

    def channel_hits(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> ChannelHits:
        return self.hits


class Narrowed(Unranked):
    """A subclass that changes ``channels`` alone (here: keeps only each channel's best hit)."""

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        dense, lexical = super().channels(query, dense_k, lexical_k)
        return dense[:1], lexical[:1]


class Forwarding:
    """A wrapper that changes ``channels`` and forwards every other name to the store inside."""

    def __init__(self, inner: Unranked) -> None:
        self.inner = inner

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        dense, lexical = self.inner.channels(query, dense_k, lexical_k)
        return dense[:1], lexical[:1]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def by_key(found: CandidateColumns) -> dict[tuple[str, str], tuple[int, float | None, float, float]]:
    """Each candidate's record (by identity) and scores, whatever the candidates' order."""
    assert len(set(found.keys)) == len(found.keys)
    return {
        key: (id(found.records[i]), found.lexical[i], found.dense[i], found.fused[i])
        for i, key in enumerate(found.keys)
    }


def random_hits(rng: random.Random) -> ChannelHits:
    # Few vins, sessions and scores: ties (at the k-th too), rows found by both channels, rows that did
    # not pass (no record), and two rows (versions) of one record now and then.
    records: dict[int, MemoryRecord] = {}
    for rowid in range(-6, 24):
        if rowid == 0 or rng.random() < 0.1:
            continue
        vin = rng.choice("ABCDEFGH")
        session = f"{vin}-{rowid if rng.random() < 0.9 else 'x'}"  # "x": another version of one record
        records[rowid] = MemoryRecord.model_construct(
            vin=vin, session_id=session, series="EV-A", summary="s", root_cause="c", fix_action="f", priority="P2",
            prompt_version="v1", concluded_at=AT - timedelta(days=1), valid=True,
            recheck_ok=True, verified_ts=AT - timedelta(days=1), embedder="",
            summary_vec=[rng.choice([0.0, 0.5, 1.0]) for _ in range(3)], dtc_codes=rng.sample(["P0A7F", "U0100"], 1),
        )  # fmt: skip
    rowids = list(range(-7, 25))
    dense_k, lexical_k = rng.randint(0, 12), rng.randint(0, 12)
    dense = [(r, rng.choice([0.2, 0.5, 0.9, rng.random()])) for r in rng.sample(rowids, rng.randint(0, dense_k + 3))]
    lexical = [
        (r, rng.choice([1.0, 2.0, 4.0, rng.random()])) for r in rng.sample(rowids, rng.randint(0, lexical_k + 3))
    ]
    if rng.random() < 0.1 and lexical:
        lexical.append((lexical[0][0], rng.random()))  # one row twice
    # As the indexes give them: best first (the order among ties is theirs).
    dense.sort(key=lambda h: -h[1])
    lexical.sort(key=lambda h: -h[1])
    return ChannelHits(dense, lexical, records, dense_k, lexical_k)


def test_unranked_hits_give_the_candidates_the_ranked_channels_give() -> None:
    rng = random.Random(5)
    fast = 0
    for _ in range(600):
        hits = random_hits(rng)
        query = SimilarQuery("Q", "EV-A", np.asarray([1.0, 0.5, 0.0], dtype=np.float32), 5, AT, text="t")
        plain = candidate_columns(Ranked.of(hits), query, hits.lexical_k, hits.dense_k)
        found = candidate_columns(Unranked.of(hits), query, hits.lexical_k, hits.dense_k)
        assert by_key(found) == by_key(plain)
        fast += [id(r) for r in found.records] != [id(r) for r in plain.records]  # taken unranked (order differs)
        # What recall reads from them: the same ranking, the same top records.
        for k in (1, 5):
            codes = rng.sample(["P0A7F", "U0100"], rng.randint(0, 2))
            assert similar_top(Unranked.of(hits), query, codes, k) == similar_top(Ranked.of(hits), query, codes, k)
    assert fast > 50  # the fast path ran, not only the ranked one


def test_case_candidates_are_the_same_through_either_path() -> None:
    rng = random.Random(8)
    for _ in range(200):
        hits = random_hits(rng)
        query = SimilarQuery("Q", "EV-A", np.asarray([0.5, 0.5, 1.0], dtype=np.float32), 5, AT, text="t")
        got = case_candidates(Unranked.of(hits), query, hits.lexical_k, hits.dense_k)
        want = case_candidates(Ranked.of(hits), query, hits.lexical_k, hits.dense_k)
        assert [(id(s.record), s.score, dict(s.parts)) for s in got] == [
            (id(s.record), s.score, dict(s.parts)) for s in want
        ]


def test_the_retrying_wrapper_forwards_the_hits_only_when_its_store_has_them() -> None:
    hits = ChannelHits([], [], {}, 5, 5)
    query = SimilarQuery("Q", "EV-A", np.asarray([1.0], dtype=np.float32), 5, AT)
    assert channel_hits(RetryingStore(Unranked.of(hits)), query, 5, 5) is hits
    assert channel_hits(RetryingStore(Ranked.of(hits)), query, 5, 5) is None
    assert channel_hits(Ranked.of(hits), query, 5, 5) is None


def test_a_store_that_changes_channels_alone_is_asked_its_channels() -> None:
    """Recall never takes an inner store's hits past a ``channels`` that gives something else."""
    rng = random.Random(11)
    query = SimilarQuery("Q", "EV-A", np.asarray([1.0, 0.5, 0.0], dtype=np.float32), 5, AT, text="t")
    for _ in range(50):
        hits = random_hits(rng)
        for store in (Narrowed(hits), Forwarding(Unranked(hits))):
            assert channel_hits(store, query, 5, 5) is None
            found = candidate_columns(cast(MemoryStore, store), query, hits.lexical_k, hits.dense_k)
            dense, lexical = store.channels(query, hits.dense_k, hits.lexical_k)
            assert set(found.keys) == {(s.record.vin, s.record.session_id) for s in dense + lexical}

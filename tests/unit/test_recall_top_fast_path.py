"""Recall's top-k that sorts only the head of the rerank's order, against the whole order it restates."""

from __future__ import annotations

import math
import random

import pytest

from vdoctor.memory.recall import overlap_ranked, top_admitted
from vdoctor.records import MemoryRecord

pytestmark = pytest.mark.unit


def plain_top(codes: list[str], records: list[MemoryRecord], scores: list[float], admitted: set[int], k: int) -> list:
    """The rule as written first: the whole order, then the first k admitted."""
    ranked = [records[i] for _, _, _, i, _ in overlap_ranked(codes, records, scores) if id(records[i]) in admitted]
    return ranked[: max(k, 0)]


def test_top_admitted_takes_the_records_of_the_whole_order_over_random_candidates() -> None:
    rng = random.Random(16)
    pool = ["P0A7F", "U0100", "P0171", "B1318"]
    taken_from_head = 0
    for case in range(2_000):
        n = rng.randrange(0, 30)
        # Few vins, sessions and scores: ties on the score, and on the score and vin (then the session decides).
        records = [
            MemoryRecord.model_construct(
                vin=rng.choice("ABC"), session_id=f"s{i:02d}", dtc_codes=rng.sample(pool, rng.randrange(0, 3))
            )
            for i in range(n)
        ]
        rng.shuffle(records)
        scores = [rng.choice([0.0, 0.1, 0.5, 0.5, 1.0, rng.random()]) for _ in range(n)]
        if case % 50 == 0 and n:
            scores[rng.randrange(n)] = rng.choice([math.nan, math.inf, -math.inf, -0.0])
        codes = rng.sample(pool, rng.randrange(0, 3))
        # Most candidates admitted (as on a replay), or few (the whole order is needed then).
        share = rng.choice([1.0, 0.9, 0.5, 0.1])
        admitted = {id(r) for r in records if rng.random() < share}
        k = rng.randrange(-1, n + 3)
        asked: list[MemoryRecord] = []

        def admits(record: MemoryRecord, asked: list[MemoryRecord] = asked, admitted: set[int] = admitted) -> bool:
            asked.append(record)
            return id(record) in admitted

        got = top_admitted(codes, records, scores, admits, k)
        assert [id(r) for r in got] == [id(r) for r in plain_top(codes, records, scores, admitted, k)]
        taken_from_head += 0 < k < n and len(asked) < n
    # The head alone decided most of them (the point of it).
    assert taken_from_head > 500


def test_top_admitted_of_tied_scores_orders_by_vin_then_session() -> None:
    records = [
        MemoryRecord.model_construct(vin=vin, session_id=sid, dtc_codes=[])
        for vin, sid in [("B", "b1"), ("A", "a2"), ("A", "a1"), ("C", "c1")]
    ]
    scores = [0.5, 0.5, 0.5, 0.9]
    # C's score is best; then the tie at 0.5 goes by vin, then session: A/a1, A/a2, B/b1.
    got = top_admitted([], records, scores, lambda r: True, 3)
    assert [(r.vin, r.session_id) for r in got] == [("C", "c1"), ("A", "a1"), ("A", "a2")]
    # A shared code adds W_CODES * Jaccard (here 0.5 * 1/1) to B's 0.5: it goes first.
    records[0] = MemoryRecord.model_construct(vin="B", session_id="b1", dtc_codes=["P0A7F"])
    got = top_admitted(["P0A7F"], records, scores, lambda r: r.vin != "C", 2)
    assert [(r.vin, r.session_id) for r in got] == [("B", "b1"), ("A", "a1")]

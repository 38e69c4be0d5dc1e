"""Rendering recalled long-term memory into the prompt within the injection budget."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from vdoctor.embedders import embedder_id
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.memory.recall import (
    INJECTION_BUDGET_TOKENS,
    MEMORY_HEADER,
    recall,
    render_record,
    render_within_budget,
)
from vdoctor.records import MemoryRecord
from vdoctor.stores.memory import InMemoryStore
from vdoctor.tokens import EstimatingCounter

pytestmark = pytest.mark.unit

COUNTER = EstimatingCounter()
VIN_A = "LSVAU2180N2183294"
VIN_B = "LSVAU2180N2100001"
VIN_C = "LSVAU2180N2100002"
BASE = datetime(2026, 11, 1, 8, 0, 0, tzinfo=UTC)
EMB = HashingEmbedder()


def record(
    vin: str, n: int, summary: str = "", *, recheck_ok: bool | None = True, series: str = "EV-A"
) -> MemoryRecord:
    at = BASE + timedelta(days=n)
    text = summary or f"{at:%Y-%m-%d %H:%M} | concluded P0A7F | P2 conf 0.80; confirmed cell_voltage_diff_mv=187>=100"
    return MemoryRecord(
        vin=vin,
        series=series,
        session_id=f"{vin}-{at:%Y%m%dT%H%M%S}",
        concluded_at=at,
        summary=text,
        summary_vec=[float(x) for x in EMB.embed([text])[0]],
        root_cause="weak cell group self-discharges",
        fix_action="balance the pack; replace the module",
        priority="P2",
        dtc_codes=["P0A7F"],
        recheck_ok=recheck_ok,
        prompt_version="case-summary-v1",
        embedder=embedder_id(EMB),
    )


def cost(kind: str, rec: MemoryRecord) -> int:
    """What a block costs in the budget: its tokens plus its line break."""
    return COUNTER.count(render_record(kind, rec)) + 1


HEADER_COST = COUNTER.count(MEMORY_HEADER) + 1


def test_nothing_to_recall_renders_nothing() -> None:
    out = render_within_budget([], [])
    assert out.text == ""
    assert out.tokens == 0
    assert out.own == [] and out.similar == []


def test_own_records_come_before_similar_ones() -> None:
    own = [record(VIN_A, 2), record(VIN_A, 1)]
    similar = [record(VIN_B, 3), record(VIN_C, 4)]
    out = render_within_budget(own, similar, budget=INJECTION_BUDGET_TOKENS, counter=COUNTER)
    assert out.own == own and out.similar == similar
    assert out.text.startswith(MEMORY_HEADER)
    positions = [out.text.index(f"case://{r.vin}/{r.session_id}") for r in [*own, *similar]]
    assert positions == sorted(positions)
    assert out.text.count("- [own] ") == 2
    assert out.text.count("- [similar] ") == 2
    assert out.text.index("- [similar] ") > out.text.rindex("- [own] ")
    assert out.tokens == COUNTER.count(out.text)


def test_own_history_fills_the_budget_before_similar_cases() -> None:
    own = [record(VIN_A, 2), record(VIN_A, 1)]
    similar = [record(VIN_B, 3)]
    # Room for the header and both own records, one token short of the similar one.
    budget = HEADER_COST + cost("own", own[0]) + cost("own", own[1]) + cost("similar", similar[0]) - 1
    out = render_within_budget(own, similar, budget=budget, counter=COUNTER)
    assert out.own == own
    assert out.similar == []
    assert "[similar]" not in out.text


def test_an_exact_fit_is_kept_and_one_token_less_is_not() -> None:
    own = [record(VIN_A, 2), record(VIN_A, 1)]
    exact = HEADER_COST + cost("own", own[0]) + cost("own", own[1])
    assert render_within_budget(own, [], budget=exact, counter=COUNTER).own == own
    assert render_within_budget(own, [], budget=exact - 1, counter=COUNTER).own == own[:1]


@pytest.mark.parametrize("budget", [0, 10, 50, 120, 200, 333, 500, 800])
def test_rendered_memory_never_exceeds_the_budget_and_blocks_are_whole(budget: int) -> None:
    own = [record(VIN_A, n) for n in range(5, 0, -1)]
    similar = [record(VIN_B, 10), record(VIN_C, 11, summary="左前轮速传感器信号丢失" * 20)]
    out = render_within_budget(own, similar, budget=budget, counter=COUNTER)
    assert COUNTER.count(out.text) <= budget
    assert out.tokens <= budget
    # Every kept record is rendered whole; nothing else is rendered.
    expected = "\n".join(
        [
            MEMORY_HEADER,
            *(render_record("own", r) for r in out.own),
            *(render_record("similar", r) for r in out.similar),
        ]
    )
    assert out.text == (expected if out.own or out.similar else "")
    for rec in [*own, *similar]:
        kept = rec in out.own or rec in out.similar
        assert (f"case://{rec.vin}/{rec.session_id}" in out.text) == kept


def test_a_record_too_large_is_skipped_but_later_smaller_ones_are_kept() -> None:
    small_1 = record(VIN_A, 3)
    big = record(VIN_A, 2, summary="电池包单体压差过大" * 33)  # 297 CJK characters
    small_2 = record(VIN_A, 1)
    small_similar = record(VIN_B, 4)
    budget = HEADER_COST + cost("own", small_1) + cost("own", small_2) + cost("similar", small_similar)
    # Once small_1 is in, the big one does not fit in what is left.
    assert cost("own", big) > budget - HEADER_COST - cost("own", small_1)
    out = render_within_budget([small_1, big, small_2], [small_similar], budget=budget, counter=COUNTER)
    assert out.own == [small_1, small_2]
    assert out.similar == [small_similar]
    assert big.session_id not in out.text
    assert COUNTER.count(out.text) <= budget


def test_multiline_summary_is_rendered_on_one_line() -> None:
    rec = record(VIN_A, 1, summary="2026-11-01 08:15 | alert P0A7F | investigating | dtc://P0A7F\nsecond line")
    block = render_record("own", rec)
    assert "summary: 2026-11-01 08:15 | alert P0A7F | investigating | dtc://P0A7F / second line" in block
    assert block.count("\n") == 3  # head, cause, fix, summary


# -- recall over a store --------------------------------------------------------------


def test_recall_keeps_other_vehicles_out_of_own_history_and_unverified_cases_out() -> None:
    store = InMemoryStore()
    mine = record(VIN_A, 1, recheck_ok=None)
    verified = record(VIN_B, 2, recheck_ok=True)
    unverified = record(VIN_C, 3, recheck_ok=None)
    failed = record(VIN_C, 4, recheck_ok=False)
    other_series = record("LSVAU2180N2100003", 5, recheck_ok=True, series="ICE-B")
    for r in (mine, verified, unverified, failed, other_series):
        store.upsert(r)
    found = recall(store, EMB, VIN_A, "EV-A", "电池包单体压差过大", ["P0A7F"], at=BASE + timedelta(days=10))
    assert found.own_refs == [mine.ref()]
    assert found.similar_refs == [verified.ref()]
    assert found.tokens <= INJECTION_BUDGET_TOKENS


def test_a_store_embedded_by_another_model_still_gives_own_history_and_says_why_similar_cases_are_left_out() -> None:
    store = InMemoryStore()
    mine, verified = record(VIN_A, 1), record(VIN_B, 2, recheck_ok=True)
    for r in (mine, verified):
        store.upsert(r)
    other_model = HashingEmbedder(dim=128)  # the store's records were embedded at 256 dimensions
    found = recall(store, other_model, VIN_A, "EV-A", "电池包单体压差过大", ["P0A7F"], at=BASE + timedelta(days=10))
    assert found.own_refs == [mine.ref()]
    assert found.similar_refs == []
    assert "memory reembed" in found.similar_skipped
    same_model = recall(store, EMB, VIN_A, "EV-A", "电池包单体压差过大", ["P0A7F"], at=BASE + timedelta(days=10))
    assert same_model.similar_refs == [verified.ref()] and same_model.similar_skipped == ""


def test_recall_own_history_is_limited_to_two_years_and_ten_records() -> None:
    store = InMemoryStore()
    for n in range(12):
        store.upsert(record(VIN_A, n))
    old = record(VIN_A, -800)  # more than 730 days before "now"
    store.upsert(old)
    now = BASE + timedelta(days=20)
    found = recall(store, EMB, VIN_A, "EV-A", "压差", ["P0A7F"], at=now, budget=100_000)
    # Newest first: days 11 down to 2.
    assert [r.concluded_at for r in found.own] == [BASE + timedelta(days=n) for n in range(11, 1, -1)]
    assert old.ref() not in found.own_refs


# -- the offline reranker (issue 5) --------------------------------------------------------------


def _cand(vin: str, score: float, summary: str, codes: list[str]) -> Any:
    from vdoctor.stores.base import Scored

    record = MemoryRecord(
        vin=vin,
        session_id=f"{vin}-s",
        series="EV-A",
        concluded_at=datetime(2026, 11, 1, tzinfo=UTC),
        summary=summary,
        summary_vec=[1.0],
        root_cause="",
        fix_action="fix",
        priority="P2",
        dtc_codes=codes,
        recheck_ok=True,
        prompt_version="v1",
    )
    return Scored(record, score)


def test_reranker_adds_code_overlap_to_the_fused_score() -> None:
    from vdoctor.memory.recall import PART_CODES, W_CODES, OverlapReranker

    a = _cand("A", 0.9, "coolant pump stalled", ["P0A7F"])
    b = _cand("B", 0.5, "relay fuse blown", ["U0100"])
    c = _cand("C", 0.4, "relay fuse blown again", ["U0100", "P0A7F"])
    out = OverlapReranker().rerank("fuse", ["U0100"], [a, b, c], 2)
    # code overlap (Jaccard with the alert's codes): A 0, B 1, C 1/2.
    # B: 0.5 + 0.5 * 1 = 1.0; A: 0.9 + 0 = 0.9; C: 0.4 + 0.5 * 0.5 = 0.65.
    assert [s.record.vin for s in out] == ["B", "A"]
    assert out[0].score == pytest.approx(0.5 + W_CODES * 1.0) and out[0].parts[PART_CODES] == pytest.approx(W_CODES)
    # With no codes in common, the fused order stands.
    plain = OverlapReranker().rerank("zzz", [], [b, a, c], 3)
    assert [s.record.vin for s in plain] == ["A", "B", "C"]


def test_reranker_equals_the_plain_jaccard_and_sort_over_random_candidates() -> None:
    """The reranker skips the Jaccard where no code is shared; its ranking, scores and parts are the plain one's."""
    from vdoctor.memory.recall import PART_CODES, W_CODES, OverlapReranker
    from vdoctor.stores.base import Scored

    def plain(codes: list[str], candidates: list[Scored], k: int) -> list[Scored]:
        query = set(codes)
        out = []
        for cand in candidates:
            rec = set(cand.record.dtc_codes)
            union = query | rec
            term = W_CODES * (len(query & rec) / len(union) if union else 0.0)
            out.append(Scored(cand.record, cand.score + term, {**cand.parts, PART_CODES: term}))
        out.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
        return out[:k]

    rng = random.Random(5)
    pool = ["P0A7F", "U0100", "P0171", "B1000"]
    for _ in range(300):
        n = rng.randrange(0, 12)
        # Few distinct vins and scores: ties on the score and on the vin are common.
        cands = [
            Scored(
                _cand(rng.choice("ABC"), 0.0, "s", rng.sample(pool, rng.randrange(0, 3))).record,
                rng.choice([0.0, 0.25, 0.5]),
                {"fused": 0.1},
            )
            for _ in range(n)
        ]
        codes = rng.sample(pool, rng.randrange(0, 3)) * rng.choice([1, 2])  # a code may repeat
        k = rng.randrange(0, n + 2)
        got, want = OverlapReranker().rerank("q", codes, cands, k), plain(codes, cands, k)
        assert [(s.record, s.score, dict(s.parts)) for s in got] == [(s.record, s.score, dict(s.parts)) for s in want]
        assert [id(s.record) for s in got] == [id(s.record) for s in want]


def test_the_plain_recall_path_takes_the_records_the_scored_candidates_and_the_reranker_take() -> None:
    """``similar_top`` (columns, one sort) takes the records ``similar_candidates`` + ``OverlapReranker`` take."""
    from vdoctor.memory.recall import OverlapReranker, similar_candidates, similar_top
    from vdoctor.stores.base import Scored, SimilarQuery

    class Channels:
        def __init__(self, dense: list[Scored], lexical: list[Scored]) -> None:
            self.answer = dense, lexical

        def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
            return self.answer

    rng = random.Random(17)
    codes_pool = ["P0A7F", "U0100", "P0171"]
    at = datetime(2026, 11, 5, tzinfo=UTC)
    for _ in range(400):
        # Few vins, sessions, scores and vectors: ties, records in both channels, and records the
        # query does not admit (its own vin, another series, not verified, later than the query).
        pool = []
        for vin in "QAB":
            for s in "xyz":
                pool.append(
                    MemoryRecord.model_construct(
                        vin=vin, session_id=f"{vin}-{s}", series=rng.choice(["EV-A", "EV-A", "EV-B"]),
                        concluded_at=at - timedelta(days=rng.choice([-1, 1, 2])), valid=True,
                        recheck_ok=rng.choice([True, True, None]), verified_ts=at - timedelta(days=rng.choice([0, 1])),
                        summary_vec=[rng.choice([0.0, 0.5, 1.0]) for _ in range(3)], embedder="",
                        dtc_codes=rng.sample(codes_pool, rng.randrange(0, 3)),
                    )
                )  # fmt: skip
        records = rng.sample(pool, rng.randrange(0, len(pool) + 1))
        dense = [Scored(r, rng.choice([0.1, 0.5, 0.9])) for r in records[: rng.randrange(0, len(records) + 1)]]
        lexical = [Scored(r, rng.choice([0.0, 2.0, 4.0])) for r in rng.sample(records, rng.randrange(len(records) + 1))]
        vector = np.asarray([rng.choice([0.5, 1.0]) for _ in range(3)], dtype=np.float32)
        query = SimilarQuery("Q", "EV-A", vector, 5, at)
        store: Any = Channels(dense, lexical)
        codes = rng.sample(codes_pool, rng.randrange(0, 3))
        k = rng.randrange(0, 8)
        want = OverlapReranker().rerank("q", codes, similar_candidates(store, query), k)
        assert [id(r) for r in similar_top(store, query, codes, k)] == [id(s.record) for s in want]


def test_a_milestone_is_rendered_as_not_concluded_and_the_offline_model_never_takes_it_for_a_fault() -> None:
    from vdoctor.lines import RecallEntry
    from vdoctor.memory.recall import recall_entry
    from vdoctor.models.offline import _parse_memory
    from vdoctor.records import RecordKind

    vin = "LSVAU2180N2183294"
    at = datetime(2026, 11, 2, 8, tzinfo=UTC)
    summary = "2026-11-02 08:00 | milestone 1 | not concluded; no priority yet; no hypothesis yet | -"
    milestone = MemoryRecord(
        vin=vin, session_id=f"{vin}-20261101T080000-m1", series="EV-A", concluded_at=at, summary=summary,
        summary_vec=[1.0], root_cause="", fix_action="", priority=None, dtc_codes=["P0A7F"], recheck_ok=True,
        prompt_version="v", kind=RecordKind.MILESTONE,
    )  # fmt: skip
    text = recall_entry("own", milestone).render()
    assert text == (
        f"- [own] case://{vin}/{vin}-20261101T080000-m1 | milestone (not concluded) 2026-11-02 | codes P0A7F | "
        f"no priority yet | recheck ok\n  summary: {summary}"
    )
    [entry] = RecallEntry.parse_block(text)
    assert entry.milestone and entry.priority is None and entry.cause == "" and entry.summary == summary
    # Even marked verified (a milestone never is), it names no fault the offline model could reuse.
    assert _parse_memory(text) == {}
    final = recall_entry("own", milestone.model_copy(update={"kind": RecordKind.FINAL, "priority": "P2"}))
    assert RecallEntry.parse_block(final.render())[0].priority == "P2"


class WholeTextCounter:
    """The offline estimate without its additivity: the rendered memory is counted as one text."""

    name = "estimate-whole-text"

    def count(self, text: str) -> int:
        return COUNTER.count(text)


@pytest.mark.parametrize("seed", range(3))
def test_the_rendered_memorys_tokens_are_its_count_whatever_is_kept(seed: int) -> None:
    # The estimate's total comes from the blocks' own counts (it is additive); it must be
    # the count of the rendered text, as a counter that counts the whole text finds it.
    rng = random.Random(seed)
    words = ["电池包单体压差过大", "weak cell group", "P0A7F", "187mV", "，", "balance the pack"]
    for _ in range(40):
        records = [
            record(rng.choice([VIN_A, VIN_B]), n, " ".join(rng.choices(words, k=rng.randint(1, 40)))[:300])
            for n in range(rng.randint(0, 8))
        ]
        own, similar = records[: len(records) // 2], records[len(records) // 2 :]
        budget = rng.randint(0, 900)
        out = render_within_budget(own, similar, budget=budget, counter=COUNTER)
        whole = render_within_budget(own, similar, budget=budget, counter=WholeTextCounter())
        assert (out.text, out.own, out.similar) == (whole.text, whole.own, whole.similar)
        assert out.tokens == whole.tokens == COUNTER.count(out.text) <= budget

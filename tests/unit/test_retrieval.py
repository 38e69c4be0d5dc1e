"""The retrieval pipeline's parts: tokens for Chinese and English, BM25, fusion; values worked out by hand."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import numpy as np
import pytest
import snowballstemmer  # type: ignore[import-untyped]

from vdoctor.retrieval import tokens as tokens_mod
from vdoctor.retrieval.bm25 import Bm25Corpus, top_scored
from vdoctor.retrieval.hybrid import W_DENSE, W_LEXICAL, ChannelScores, fuse, fuse_columns, minmax
from vdoctor.retrieval.text import case_text, dense_text, summary_words
from vdoctor.retrieval.tokens import query_terms, stem, token_text, tokens

pytestmark = pytest.mark.unit


def test_chinese_text_gives_every_character_and_every_pair() -> None:
    assert tokens("电池压差") == ["电", "池", "压", "差", "电池", "池压", "压差"]
    # Runs are split at anything that is not a CJK character; a lone character is one token.
    assert tokens("电池，压") == ["电", "池", "电池", "压"]


def test_english_text_is_lower_cased_without_function_words_and_stemmed() -> None:
    assert tokens("The Cells were charging, and the pumps stalled") == ["cell", "charg", "pump", "stall"]
    # Porter2: a word and its inflections meet, whichever way the "e" or "y" ends them.
    assert {stem(w) for w in ("charge", "charging", "charged", "charges")} == {"charg"}
    assert stem("hike") == stem("hiking") and stem("battery") == stem("batteries")
    assert stem("bus") == "bus" and stem("12345") == "12345" and stem("p0a7f") == "p0a7f"
    # Codes and numbers are tokens too; mixed text keeps its order.
    assert tokens("P0A7F 压差187mV") == ["p0a7f", "压", "差", "压差", "187mv"]


def test_words_kept_off_the_stemmer_are_the_stemmers_own_stems() -> None:
    # Words ending in a digit or without a vowel skip Porter2 (readings, odometers, VINs): it must agree.
    rnd = random.Random(7)
    letters, alnum = "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz0123456789"
    words = ["30220km", "223mv", "299rpm", "03t01", "lsvau2a45n3245692", "12v", "3s", "2xy", "ies1", "sses9"]
    words += ["".join(rnd.choice(alnum) for _ in range(rnd.randint(1, 12))) for _ in range(20_000)]
    words += ["".join(rnd.choice(letters) for _ in range(rnd.randint(1, 8))) + "9" for _ in range(5_000)]
    stemmer = snowballstemmer.stemmer("english")
    skipped = [w for w in words if tokens_mod._own_stem(w)]
    assert len(skipped) > 10_000
    assert [stem(w) for w in skipped] == [stemmer.stemWord(w) for w in skipped] == skipped
    assert tokens("odometer 30220km at 2026-03-04T01") == ["odomet", "30220km", "2026", "03", "04t01"]


def test_query_terms_are_distinct_and_token_text_is_space_joined() -> None:
    assert query_terms("压 压 cell cells") == ["压", "cell"]
    assert token_text("电池 pack") == "电 池 电池 pack"
    assert tokens("") == [] and tokens("the, of; and!") == []


def test_query_terms_kept_by_text_are_the_plain_terms_and_each_caller_gets_its_own_list() -> None:
    for text in ["Battery pack temp high P0A7F, pack_temp_c=58°C", "电池温度过高 电池温度", "the the a", ""]:
        first = query_terms(text)
        assert first == list(dict.fromkeys(tokens(text)))
        first.append("changed by a caller")
        assert query_terms(text) == list(dict.fromkeys(tokens(text)))


def test_case_text_is_the_parts_one_per_line_without_empty_ones() -> None:
    assert case_text("电池压差过大", ["P0A7F", "P0A80"], "weak cell", "", "line 1\nline 2") == (
        "电池压差过大\nP0A7F P0A80\nweak cell\nline 1\nline 2"
    )


def test_the_vector_embeds_the_summary_words_without_readings_times_or_addresses() -> None:
    summary = (
        "readings: soc_pct=36% pack_temp_c=32.5°C cell_voltage_diff_mv=178→201mV\n"
        "2026-09-02 07:00 | concluded P0A7F | P1 conf 0.80; confirmed cell_voltage_diff_mv=178>=100 | "
        "signal://LGXE1A7C2PB227149/cell_voltage_diff_mv@2026-09-02T07:00:00Z\n"
        "2026-09-02 09:13 | 电芯压差 -3.5 持续 | dtc://P0A7F"
    )
    assert summary_words(summary) == (
        "readings soc_pct pack_temp_c °C cell_voltage_diff_mv mV\n"
        "concluded P0A7F P1 conf confirmed cell_voltage_diff_mv\n"
        "电芯压差 持续"
    )
    # Codes and names keep their digits; a line of values alone leaves nothing.
    assert summary_words("pm2_5 U0140 v2 12V\n2026-09-02 | 0.80 >= 100") == "pm2_5 U0140 v2 V"
    # The other parts are embedded as reported (a symptom's own numbers included).
    embedded = dense_text("压差 200mV", ["P0A7F"], "weak cell", "", "confirmed x=1")
    assert embedded == "压差 200mV\nP0A7F\nweak cell\nconfirmed x"


def test_bm25_weighs_rare_terms_over_terms_every_document_has() -> None:
    docs = [["pump", "coolant"], ["pump", "relay"], ["pump", "fuse"]]
    # "pump" in all 3: idf = ln(1 + 0.5/3.5); "relay" in 1: idf = ln(1 + 2.5/1.5). Every document has
    # 2 tokens (= the average), so a matching term scores idf * 1 * 2.2 / (1 + 1.2) = idf.
    low, high = math.log(1 + 0.5 / 3.5), math.log(1 + 2.5 / 1.5)
    got = Bm25Corpus(docs).scores(["pump", "relay", "relay"])  # a repeated query term counts once
    assert got == pytest.approx([low, low + high, low])
    assert Bm25Corpus(docs).scores(["nothing"]).tolist() == [0.0, 0.0, 0.0]
    assert Bm25Corpus([]).scores(["pump"]).shape == (0,)


def test_bm25_length_normalisation_and_term_frequency() -> None:
    # d0 = [a, a], d1 = [a, b, c, d]; avgdl 3; "a" in both: idf = ln(1 + 0.5/2.5).
    idf = math.log(1 + 0.5 / 2.5)
    d0 = idf * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 2 / 3))
    d1 = idf * 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 4 / 3))
    assert Bm25Corpus([["a", "a"], ["a", "b", "c", "d"]]).scores(["a"]) == pytest.approx([d0, d1])


def test_top_scored_keeps_positive_scores_best_first_ties_by_index() -> None:
    scores = np.array([0.0, 2.0, 1.0, 2.0, 0.5])
    assert top_scored(scores, 3) == [(1, 2.0), (3, 2.0), (2, 1.0)]
    assert top_scored(scores, 10) == [(1, 2.0), (3, 2.0), (2, 1.0), (4, 0.5)]
    assert top_scored(scores, 0) == []
    # Many rows tied at the cut: the lowest indexes make it, wherever a partition would leave them.
    tied = np.array([0.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 0.5] + [2.0] * 50)
    assert top_scored(tied, 3) == [(6, 3.0), (2, 2.0), (3, 2.0)]


def test_fusion_scales_each_channel_over_the_union_and_weighs_them() -> None:
    scores = {
        "both": ChannelScores(lexical=8.0, dense=0.9),
        "lexical only": ChannelScores(lexical=4.0, dense=0.5),
        "dense only": ChannelScores(lexical=None, dense=0.7),  # BM25 not computed: 0
    }
    # lexical over the union: 8 -> 1, 4 -> 0.5, 0 -> 0; dense: 0.9 -> 1, 0.5 -> 0, 0.7 -> 0.5.
    fused = fuse(scores)
    assert fused["both"] == pytest.approx(W_LEXICAL + W_DENSE)
    assert fused["lexical only"] == pytest.approx(W_LEXICAL * 0.5)
    assert fused["dense only"] == pytest.approx(W_DENSE * 0.5)
    assert minmax({"a": 3.0, "b": 3.0}) == {"a": 1.0, "b": 1.0} and minmax({}) == {}
    assert fuse({}) == {}


def test_fusion_by_columns_equals_fusion_by_mapping_over_random_scores() -> None:
    """``fuse_columns`` gives every candidate exactly ``fuse``'s score, ties and missing BM25 included."""
    rng = random.Random(11)
    for _ in range(500):
        n = rng.randrange(0, 8)
        # Few distinct values: ties, a channel all equal, and BM25 of 0 beside a missing one are common.
        lexical = [rng.choice([None, 0.0, 1.5, 3.0, rng.uniform(0, 9)]) for _ in range(n)]
        dense = [rng.choice([0.25, 0.5, rng.uniform(-1, 1)]) for _ in range(n)]
        weights = rng.choice([(W_LEXICAL, W_DENSE), (0.3, 0.7)])
        channels = {i: ChannelScores(lex, den) for i, (lex, den) in enumerate(zip(lexical, dense, strict=True))}
        want = fuse(channels, *weights)
        assert fuse_columns(lexical, dense, *weights) == [want[i] for i in range(n)]


def test_case_candidates_equal_the_plain_union_fusion_and_sort_over_random_channels() -> None:
    """``case_candidates`` keeps its candidates by columns; its ranking, scores and parts are the plain mapping's."""
    from vdoctor.records import MemoryRecord
    from vdoctor.retrieval.cases import PART_DENSE, PART_FUSED, PART_LEXICAL, case_candidates
    from vdoctor.stores.base import Scored, SimilarQuery

    def plain(query: SimilarQuery, dense: list[Scored], lexical: list[Scored]) -> list[Scored]:
        found = {(s.record.vin, s.record.session_id): s for s in dense}
        scores = {key: ChannelScores(None, s.score) for key, s in found.items()}
        vector = np.asarray(query.vector, dtype=np.float32)
        for s in lexical:
            key = (s.record.vin, s.record.session_id)
            if key in scores:
                scores[key] = ChannelScores(s.score, scores[key].dense)
            else:
                found[key] = s
                dense_score = float(np.asarray(s.record.summary_vec, dtype=np.float32) @ vector)
                scores[key] = ChannelScores(s.score, dense_score)
        fused = fuse(scores)
        out = []
        for key, s in found.items():
            parts = {PART_DENSE: scores[key].dense, PART_FUSED: fused[key]}
            if scores[key].lexical is not None:
                parts[PART_LEXICAL] = float(scores[key].lexical or 0.0)
            out.append(Scored(s.record, fused[key], parts))
        out.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
        return out

    class Channels:
        def __init__(self, dense: list[Scored], lexical: list[Scored]) -> None:
            self.answer = dense, lexical

        def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
            return self.answer

    def rec(vin: str, session: str, vec: list[float]) -> MemoryRecord:
        return MemoryRecord.model_construct(vin=vin, session_id=session, summary_vec=vec, embedder="")

    rng = random.Random(13)
    for _ in range(300):
        # Few vins, sessions and scores: ties on the score, on the vin, and records in both channels are common.
        pool = [rec(v, s, [rng.choice([0.0, 0.5, 1.0]) for _ in range(3)]) for v in "AB" for s in "xyz"]
        records = rng.sample(pool, rng.randrange(0, len(pool) + 1))
        dense = [Scored(r, rng.choice([0.1, 0.5, 0.9])) for r in records[: rng.randrange(0, len(records) + 1)]]
        in_lexical = rng.sample(records, rng.randrange(0, len(records) + 1))
        lexical = [Scored(r, rng.choice([0.0, 2.0, 4.0])) for r in in_lexical]
        vector = np.asarray([rng.choice([0.5, 1.0]) for _ in range(3)], dtype=np.float32)
        query = SimilarQuery("Q", "EV-A", vector, 5, datetime(2026, 11, 1, tzinfo=UTC))
        got = case_candidates(Channels(dense, lexical), query)  # type: ignore[arg-type]
        want = plain(query, dense, lexical)
        assert [(id(s.record), s.score, list(s.parts.items())) for s in got] == [
            (id(s.record), s.score, list(s.parts.items())) for s in want
        ]

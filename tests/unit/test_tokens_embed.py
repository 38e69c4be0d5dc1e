"""The offline token counter (budgets depend on it) and the hashing embedder."""

from __future__ import annotations

import random

import numpy as np
import pytest

from vdoctor.embedders import DEFAULT_DIM
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.tokens import EstimatingCounter, count_tokens

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("   \n\t ", 0),
        # 压 + 差 (two per CJK char) + "187" (3 digits -> 1) + "mV" (2 letters -> 1)
        ("压差187mV", 6),
        # "Hello" (5 letters -> 2) + "," + "world" (5 -> 2) + "!"
        ("Hello, world!", 6),
        # 7 digits -> ceil(7/3) = 3
        ("1234567", 3),
        # "46" + "." + "5" + "℃" (a symbol outside the CJK ranges: one mark)
        ("46.5℃", 4),
        # cell(1) _ voltage(2) _ diff(1) _ mv(1): letters split by underscores
        ("cell_voltage_diff_mv", 8),
        # 电 池 包 (6) + full-width comma (2: a full-width form, from U+F000) + 正 常 (4)
        ("电池包，正常", 12),
        # P(1) 0(1) A(1) 7(1) F(1): a code alternates letters and digits
        ("P0A7F", 5),
        # "signal" (6 -> 2) ":" "/" "/" = 5
        ("signal://", 5),
    ],
)
def test_estimating_counter_on_hand_counted_text(text: str, expected: int) -> None:
    assert EstimatingCounter().count(text) == expected


def test_count_tokens_uses_the_default_counter_and_is_additive_over_whitespace() -> None:
    assert count_tokens("压差187mV") == 6
    assert count_tokens("压差187mV Hello, world!") == 6 + 6


# Every kind of character the estimate tells apart: letters, digits, CJK, full-width
# marks, the ideographic space (a token, though whitespace), other marks, letters
# outside ASCII, emoji, whitespace.
ALPHABET = "aZqQ09电池，（\u3000.:_-/é😀 \n\t"


@pytest.mark.parametrize("seed", range(5))
def test_the_estimate_keeps_the_two_properties_budgets_rely_on(seed: int) -> None:
    # Budgets skip counting a text of fewer than half their characters (``most_tokens_per_char``) and add up
    # the counts of parts joined by newlines (``additive``): both must hold for any text.
    rng = random.Random(seed)
    counter = EstimatingCounter()
    assert counter.most_tokens_per_char == 2 and counter.additive
    for _ in range(300):
        texts = ["".join(rng.choices(ALPHABET, k=rng.randint(0, 40))) for _ in range(rng.randint(1, 4))]
        for text in texts:
            assert counter.count(text) <= 2 * len(text)
        assert all(
            counter.count(sep.join(texts)) == sum(counter.count(t) for t in texts) for sep in ("\n", "\n\n", " ")
        )
    # CJK characters and full-width forms reach the bound; other marks are one token each.
    assert counter.count("电池") == 4 and counter.count("，（.") == 5


# -- embedder -------------------------------------------------------------------


def test_embed_shape_dtype_and_unit_norm() -> None:
    texts = ["电池包单体压差过大", "left front wheel speed sensor signal lost", "P0A7F 压差187mV"]
    vecs = HashingEmbedder().embed(texts)
    assert vecs.shape == (3, DEFAULT_DIM) == (3, 256)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), np.ones(3), rtol=1e-5)


def test_embed_is_deterministic_across_instances_and_batches() -> None:
    text = "电池包单体压差过大 P0A7F"
    one = HashingEmbedder().embed([text])[0]
    batch = HashingEmbedder().embed(["other text", text, "更多文本"])[1]
    np.testing.assert_array_equal(one, batch)


def test_embed_custom_dimension() -> None:
    vecs = HashingEmbedder(dim=64).embed(["压差187mV"])
    assert vecs.shape == (1, 64)


def test_similar_chinese_texts_score_higher_than_unrelated_ones() -> None:
    emb = HashingEmbedder()
    anchor, similar, unrelated = emb.embed(
        [
            "电池包单体压差过大，疑似电芯自放电",
            "电池包单体压差偏大，电芯自放电",
            "左前轮速传感器信号丢失，制动灯常亮",
        ]
    )
    assert float(anchor @ similar) > float(anchor @ unrelated)
    # Cosine of a text with itself is 1 (vectors are normalised).
    assert float(anchor @ anchor) == pytest.approx(1.0, abs=1e-5)


def test_case_and_whitespace_do_not_change_the_vector() -> None:
    emb = HashingEmbedder()
    a, b = emb.embed(["Cell  Imbalance\n P0A7F", "cell imbalance p0a7f"])
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_gives_a_zero_vector(text: str) -> None:
    vecs = HashingEmbedder().embed([text, "压差"])
    assert vecs.shape == (2, DEFAULT_DIM)
    assert not np.any(vecs[0])
    assert np.all(np.isfinite(vecs))
    assert np.linalg.norm(vecs[1]) == pytest.approx(1.0, abs=1e-5)


def test_embed_of_no_texts_is_an_empty_matrix() -> None:
    assert HashingEmbedder().embed([]).shape == (0, DEFAULT_DIM)

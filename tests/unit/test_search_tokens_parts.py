"""A case's search tokens from its parts' kept tokens: the tokens of its whole indexed text."""

from __future__ import annotations

import random

import pytest

from vdoctor.retrieval import text as text_module
from vdoctor.retrieval.text import case_text, search_tokens
from vdoctor.retrieval.tokens import token_text

pytestmark = pytest.mark.unit

PIECES = [
    "", " ", "\n", "\t", "Cell", "cells", "charging", "the", "P0A7F", "U0111", "soc_pct=36%", "12.45V", "→", "|",
    "单体压差过大", "电芯", "，", "ΣΑΣ", "İstanbul", "KELVIN", "ǅ", "signal://LSVAU2180N2000001/bms",
    "2026-09-01 08:18", "lsvau2a45n3245692", "30220km", "ﬁx", "Ⅻ", "ß", "É",
]  # fmt: skip


def random_part(rng: random.Random) -> str:
    return "".join(rng.choice([*PIECES, " ", " "]) for _ in range(rng.randint(0, 8)))


def test_search_tokens_are_the_tokens_of_the_whole_case_text() -> None:
    rng = random.Random(17)
    for i in range(3000):
        alert, cause, fix, summary = (random_part(rng) for _ in range(4))
        codes = [random_part(rng) for _ in range(rng.randint(0, 3))]
        if i % 3 == 0:
            text_module._part_tokens.cache_clear()
        expected = token_text(case_text(alert, codes, cause, fix, summary))
        assert search_tokens(alert, codes, cause, fix, summary) == expected
        assert search_tokens(alert, codes, cause, fix, summary) == expected  # from the kept parts

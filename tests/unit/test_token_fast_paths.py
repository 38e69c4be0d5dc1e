"""The lexical tokeniser's fast paths against the plain rule they restate, over many awkward texts."""

from __future__ import annotations

import random
import re

import pytest

from vdoctor.retrieval import tokens as tokens_mod
from vdoctor.retrieval.tokens import STOPWORDS, stem, tokens

pytestmark = pytest.mark.unit

_PLAIN_RUN_RE = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]+")


def plain_tokens(text: str) -> list[str]:
    """The rule as first written: the regex's runs of the lower-cased text, one test after the other per run."""
    out: list[str] = []
    for run in _PLAIN_RUN_RE.findall(text.lower()):
        if run[0] >= "\u3400":
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif run in STOPWORDS:
            continue
        elif run[-1].isdigit() or not re.search(r"[aeiouy]", run):
            out.append(run)
        else:
            out.append(stem(run))
    return out


# Characters a text may hold: ASCII of every kind, separators a split() would not cut at by itself, characters
# whose lower case is ASCII (Kelvin sign, dotted capital I), the CJK range's edges, full-width forms, a lone
# surrogate and characters outside the BMP.
_AWKWARD = (
    "\x00\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x7f\x85\xa0"
    "°→≥≤（），。、％µÄÖÜßéİıſﬁK\u212a\u2028\u3000\u33ff\u3400\u4e00\u7535\u6c60\u9fff\ua000\uff10\uff21"
    "\ud800\U0001f600\U00020000"
)
_WORDS = [
    "the", "and", "of", "cells", "charging", "Battery", "PACK", "P0A7F", "u0121", "30220km", "lsvau2a45n3245692",
    "2026-09-01T12:13:41Z", "o2_switch_ratio_pct=81.3%", "signal://LSVAU2A42RE294679/soc_pct@", "电池压差过大",
    "冷车启动后", "readings:", "conf", "0.80;", "s", "t", "y", "sky", "ies", "I",
]  # fmt: skip


def _texts(count: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    ascii_chars = "".join(map(chr, range(128)))
    texts = ["", " ", "a", "The", "°C", "电", "K", "\u212a", "İ", "abc°def", "ab\x1cc", "电池abc电"]
    for _ in range(count):
        parts = []
        for _ in range(rnd.randint(0, 12)):
            pick = rnd.random()
            if pick < 0.4:
                parts.append(rnd.choice(_WORDS))
            elif pick < 0.7:
                parts.append("".join(rnd.choice(ascii_chars) for _ in range(rnd.randint(1, 6))))
            else:
                parts.append("".join(rnd.choice(_AWKWARD) for _ in range(rnd.randint(1, 3))))
        texts.append(rnd.choice(["", " ", "-", "°"]).join(parts))
    return texts


def test_tokens_are_the_plain_rules_over_random_texts() -> None:
    texts = _texts(6_000, seed=16)
    # Both paths are taken many times: texts without a CJK character, and with one.
    assert sum(not tokens_mod.CJK_RUN_RE.search(t.lower()) for t in texts) > 2_000
    assert sum(bool(tokens_mod.CJK_RUN_RE.search(t.lower())) for t in texts) > 2_000
    for text in texts:
        assert tokens(text) == plain_tokens(text), text


def test_tokens_of_real_case_texts_are_the_plain_ones() -> None:
    texts = [
        "readings: o2_switch_ratio_pct=81.3% coolant_temp_c=95.8°C\n2026-09-01 12:13 | concluded P0420 (also B1318)"
        " | P3 conf 0.80; confirmed o2_switch_ratio_pct=81.3>=75 | signal://LSVAU2A42RE294679/o2_switch_ratio_pct",
        "Inverter overheating, pump fault",
        "偶发异响，仪表无故障码（冷车启动后） P0A94",
        "cell_voltage_diff_mv=178→201mV 电芯压差 -3.5 持续 | dtc://P0A7F",
    ]
    for text in texts:
        assert tokens(text) == plain_tokens(text)


def test_ascii_runs_are_the_regexs_runs_of_a_text_without_cjk() -> None:
    for text in _texts(3_000, seed=17):
        low = text.lower()
        if not tokens_mod.CJK_RUN_RE.search(low):
            assert tokens_mod._ascii_runs(low) == _PLAIN_RUN_RE.findall(low), text


def test_a_run_kept_with_its_token_is_given_the_same_token_again() -> None:
    # The second time round every run comes from the cache of runs.
    texts = _texts(500, seed=18)
    first = [tokens(t) for t in texts]
    assert [tokens(t) for t in texts] == first == [plain_tokens(t) for t in texts]

"""The offline estimate against a real BPE tokenizer (cl100k_base, vocabulary shipped offline).

Budgets are enforced with the estimate; what they rely on is that it does not
under-count real tokens. The figures themselves are in bench/token_error.py.
"""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT
from vdoctor.errors import ConfigError
from vdoctor.tokens import EstimatingCounter
from vdoctor.tokens.bpe import BpeCounter

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bpe() -> BpeCounter:
    return BpeCounter()


def test_bpe_counter_counts_hand_checked_text(bpe: BpeCounter) -> None:
    # cl100k_base: "Hello" "," " world" "!" -> 4 tokens; "" -> 0.
    assert bpe.count("Hello, world!") == 4
    assert bpe.count("") == 0


def test_unknown_encoding_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="unknown tiktoken encoding 'no_such_encoding'"):
        BpeCounter("no_such_encoding")


def test_estimate_never_undercounts_a_demo_alert(bpe: BpeCounter) -> None:
    est = EstimatingCounter()
    lines = [ln for ln in (REPO_ROOT / "data" / "demo" / "alerts.jsonl").read_text("utf-8").splitlines() if ln]
    assert len(lines) > 800
    under = [ln for ln in lines if est.count(ln) < bpe.count(ln)]
    assert under == []

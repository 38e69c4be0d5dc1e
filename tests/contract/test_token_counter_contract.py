"""One contract over every token counter in the registry: what the budgets rely on."""

from __future__ import annotations

import pytest

from vdoctor.errors import ConfigError
from vdoctor.tokens import COUNTERS, TokenCounter, open_counter

pytestmark = pytest.mark.contract

TEXTS = [
    "电池包单体压差过大",
    "cell_voltage_diff_mv=187 @2026-11-01T08:15:30Z",
    "Hello, world! The quick brown fox.",
    "2026-11-01 10:15 | concluded P0A7F | P1 conf 0.80 | signal://LSVAU2180N2183294/cell_voltage_diff_mv@...",
]


@pytest.fixture(params=COUNTERS)
def counter(request: pytest.FixtureRequest) -> TokenCounter:
    return open_counter(request.param)


def test_an_unknown_counter_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="valid: " + ", ".join(COUNTERS)):
        open_counter("words")


def test_empty_text_costs_nothing_and_any_text_costs_something(counter: TokenCounter) -> None:
    assert counter.count("") == 0
    for text in TEXTS:
        n = counter.count(text)
        assert isinstance(n, int) and 0 < n <= len(text.encode("utf-8"))
    assert isinstance(counter.name, str) and counter.name


def test_counts_are_deterministic(counter: TokenCounter) -> None:
    assert [counter.count(t) for t in TEXTS] == [counter.count(t) for t in TEXTS]


def test_joining_texts_costs_at_most_their_sum_plus_the_separator(counter: TokenCounter) -> None:
    # Budgets add up the blocks they render: a joined prompt never costs more than its parts.
    for a in TEXTS:
        for b in TEXTS:
            assert counter.count(a + "\n" + b) <= counter.count(a) + counter.count(b) + 1


def test_more_text_never_costs_less(counter: TokenCounter) -> None:
    for text in TEXTS:
        assert counter.count(text + " " + text) >= counter.count(text)

"""The token-counter role: budgets (the working window, the memory injection) are counted with one.

A deployment can plug in its model's own tokenizer (``tokens/bpe.py``); the
default is a deterministic offline estimate (``tokens/estimate.py``). Every
counter is held to the same contract (``tests/contract/test_token_counter_contract.py``).
"""

from __future__ import annotations

from typing import Protocol


class TokenCounter(Protocol):
    """Counts the tokens a text costs in a model's context."""

    name: str

    def count(self, text: str) -> int:
        """Tokens of ``text``: 0 for the empty string, never negative, the same for the same text."""
        ...

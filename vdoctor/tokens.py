"""Token counting that works offline.

Budgets (the 4000-token window, the 800-token memory injection) are enforced
with a counter behind a small interface, so a deployment can plug in its
model's own tokenizer. The default is a deterministic estimate shaped like a
BPE vocabulary: one token per CJK character, about four letters per token for
words, three digits per token for numbers, one per punctuation mark.
"""

from __future__ import annotations

import math
import re
from typing import Protocol

_PIECE_RE = re.compile(
    r"[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]"  # CJK and full-width
    r"|[A-Za-z]+"
    r"|[0-9]+"
    r"|\S",
)
# Average characters per token of English words and of digit runs in common
# BPE vocabularies (cl100k-like).
_CHARS_PER_WORD_TOKEN = 4
_DIGITS_PER_TOKEN = 3


class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...


class EstimatingCounter:
    """The offline default: a close, deterministic estimate of BPE token counts."""

    def count(self, text: str) -> int:
        total = 0
        for piece in _PIECE_RE.findall(text):
            if piece.isascii() and piece.isalpha():
                total += math.ceil(len(piece) / _CHARS_PER_WORD_TOKEN)
            elif piece.isdigit():
                total += math.ceil(len(piece) / _DIGITS_PER_TOKEN)
            else:
                total += 1
        return total


DEFAULT_COUNTER: TokenCounter = EstimatingCounter()


def count_tokens(text: str, counter: TokenCounter = DEFAULT_COUNTER) -> int:
    return counter.count(text)

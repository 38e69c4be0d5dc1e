"""Chat models, chosen by name in one closed registry (``VDOCTOR_MODEL``, ``VDOCTOR_SUMMARIZER``).

- ``offline`` (default): a deterministic rule-following diagnostician, no network;
- ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint through the
  ``openai`` package (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, model names from settings).

Add one: a module with a class that meets ``ChatModel`` (``base.py``), one entry
below; the contract suite picks it up from ``CHAT_MODELS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import SecretStr

from vdoctor.models.base import ChatModel, ChatResponse, Message, ToolCall, ToolSpec
from vdoctor.registry import Registry
from vdoctor.tokens import DEFAULT_COUNTER, TokenCounter
from vdoctor.url_credentials import shown_url

ChatModelName = Literal["offline", "openai"]
# A hosted model answers in 0.3-5 s; 60 s means the call is stuck, not slow.
DEFAULT_TIMEOUT_S = 60.0
# One try plus three retries (backoff 0.5, 1, 2 s plus jitter) rides out a
# rate-limit burst or a restarting endpoint without holding a run for long.
DEFAULT_MAX_ATTEMPTS = 4


@dataclass(frozen=True)
class ChatModelConfig:
    """What a chat model may need: the endpoint's model name, the endpoint, and its call limits."""

    model: str = ""
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    def __repr__(self) -> str:  # the key never shows
        return f"ChatModelConfig(model={self.model!r}, base_url={shown_url(self.base_url)!r})"  # nor a URL's password


def _open_offline(config: ChatModelConfig, counter: TokenCounter) -> ChatModel:
    from vdoctor.models.offline import OfflineModel

    return OfflineModel(counter)


def _open_openai(config: ChatModelConfig, counter: TokenCounter) -> ChatModel:
    from vdoctor.models.openai import OpenAIChatModel

    return OpenAIChatModel(
        model=config.model,
        api_key=config.api_key,
        base_url=config.base_url,
        timeout_s=config.timeout_s,
        max_attempts=config.max_attempts,
    )


_REGISTRY: Registry[Callable[[ChatModelConfig, TokenCounter], ChatModel]] = Registry(
    "chat model", {"offline": _open_offline, "openai": _open_openai}
)
# The closed set of names (ChatModelName, which settings validate against, must match it: the contract suite checks).
CHAT_MODELS = _REGISTRY.names


def open_chat_model(
    name: str, config: ChatModelConfig | None = None, counter: TokenCounter = DEFAULT_COUNTER
) -> ChatModel:
    """The chat model ``name`` names; an unknown name lists the valid ones."""
    return _REGISTRY[name](config or ChatModelConfig(), counter)


__all__ = [
    "CHAT_MODELS",
    "ChatModel",
    "ChatModelConfig",
    "ChatModelName",
    "ChatResponse",
    "Message",
    "ToolCall",
    "ToolSpec",
    "open_chat_model",
]

"""The chat-model interface the agent talks to, in OpenAI's message shape."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# A tool call's id longer than this is taken as none: a hosted model's call gets one of ours
# (``openai.unique_call_ids``), and a call not run for its size is renamed (``react._not_run``).
MAX_CALL_ID_CHARS = 64

# ``json.dumps(arguments, ensure_ascii=False)`` without building an encoder per call.
_ARGUMENTS_JSON = json.JSONEncoder(ensure_ascii=False).encode


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        """The arguments as the model wrote them: a JSON object, non-ASCII kept as it is."""
        return _ARGUMENTS_JSON(self.arguments)


@dataclass(frozen=True)
class Message:
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ChatResponse:
    """One model turn: either tool calls, or final content."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class ChatModel(Protocol):
    """Anything that answers a conversation, with native tool calling."""

    name: str

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        """One turn: tool calls or final content. Failures are ``ModelError`` (after the model's own retries)."""
        ...

    def close(self) -> None:
        """Release connections; the model is not used afterwards."""
        ...

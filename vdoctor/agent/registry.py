"""One closed registry for chat models, selected by ``Settings.model``."""

from __future__ import annotations

from typing import Literal

from vdoctor.agent.model import ChatModel
from vdoctor.agent.offline import OfflineModel
from vdoctor.errors import ConfigError
from vdoctor.settings import Settings

MODELS = ("offline", "openai")


def open_chat_model(settings: Settings, purpose: Literal["chat", "summary"] = "chat") -> ChatModel:
    """The chat model for ReAct runs, or the (cheaper) one for summaries."""
    if settings.model == "offline":
        return OfflineModel()
    if settings.model == "openai":
        from vdoctor.agent.openai_model import OpenAIChatModel

        return OpenAIChatModel(
            model=settings.chat_model if purpose == "chat" else settings.summary_model,
            api_key=settings.openai_api_key,
            base_url=settings.openai_base_url,
            timeout_s=settings.model_timeout_s,
            max_attempts=settings.model_max_attempts,
        )
    raise ConfigError(f"unknown model {settings.model!r}; valid: {', '.join(MODELS)}")

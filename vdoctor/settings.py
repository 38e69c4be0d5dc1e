"""Settings of the diagnosis job: one frozen model, built at the edge (``jobs/``).

Precedence: command-line flags, then ``VDOCTOR_*`` environment variables, then
defaults. Every environment variable name lives in this module, and nothing
reads the environment at import time. Secrets are ``SecretStr``: they never
print, log or serialise in clear.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from vdoctor.embed import Embedder, open_embedder
from vdoctor.errors import ConfigError
from vdoctor.events import describe_validation_error

DEFAULT_MEMORY_URL = "sqlite:///.vdoctor/memory.db"
DEFAULT_KNOWLEDGE_URL = "sqlite:///.vdoctor/knowledge.db"

ENV_VARS: dict[str, str] = {
    "memory_url": "VDOCTOR_MEMORY_URL",
    "knowledge_url": "VDOCTOR_KNOWLEDGE_URL",
    "memory_enabled": "VDOCTOR_MEMORY_ENABLED",
    "store_retry_s": "VDOCTOR_STORE_RETRY_S",
    "model": "VDOCTOR_MODEL",
    "summarizer": "VDOCTOR_SUMMARIZER",
    "openai_base_url": "OPENAI_BASE_URL",
    "openai_api_key": "OPENAI_API_KEY",
    "chat_model": "VDOCTOR_CHAT_MODEL",
    "summary_model": "VDOCTOR_SUMMARY_MODEL",
    "embed_model": "VDOCTOR_EMBED_MODEL",
    "embedder": "VDOCTOR_EMBEDDER",
    "extra_dtc_csv": "VDOCTOR_EXTRA_DTC_CSV",
    "working_budget_tokens": "VDOCTOR_WORKING_BUDGET_TOKENS",
    "injection_budget_tokens": "VDOCTOR_INJECTION_BUDGET_TOKENS",
    "model_timeout_s": "VDOCTOR_MODEL_TIMEOUT_S",
    "model_max_attempts": "VDOCTOR_MODEL_MAX_ATTEMPTS",
    "concurrency": "VDOCTOR_CONCURRENCY",
    "log_level": "VDOCTOR_LOG_LEVEL",
}

# A hosted model answers in 0.3-5 s; 60 s means the call is stuck, not slow.
DEFAULT_MODEL_TIMEOUT_S = 60.0
# One try plus three retries (backoff 0.5, 1, 2 s plus jitter) rides out a
# rate-limit burst or a restarting endpoint without holding a run for long.
DEFAULT_MODEL_MAX_ATTEMPTS = 4
# Vehicles diagnosed at once per subtask: at 2 model calls of ~0.4 s per run
# that is ~80 runs/s per subtask, far beyond one at a time (~1.2 runs/s).
DEFAULT_CONCURRENCY = 64


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_url: str = DEFAULT_MEMORY_URL
    knowledge_url: str = DEFAULT_KNOWLEDGE_URL
    # False runs the agent without long-term recall: the "memory off" arm of the A/B experiment.
    memory_enabled: bool = True
    # How long a long-term-memory write is retried through an outage before the case is flagged.
    store_retry_s: float = Field(default=300.0, ge=0)
    model: Literal["offline", "openai"] = "offline"
    # Who writes summaries: the offline summarizer (default), or the hosted
    # summary model (VDOCTOR_SUMMARY_MODEL, usually cheaper than the chat model).
    summarizer: Literal["offline", "openai"] = "offline"
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    chat_model: str = "gpt-4o-mini"
    summary_model: str = "gpt-4o-mini"
    embed_model: str = "text-embedding-3-small"
    # offline: hashed n-grams, no network; openai: an OpenAI-compatible endpoint.
    embedder: Literal["offline", "openai"] = "offline"
    extra_dtc_csv: str | None = None
    working_budget_tokens: int = Field(default=4000, ge=500)
    injection_budget_tokens: int = Field(default=800, ge=0)
    model_timeout_s: float = Field(default=DEFAULT_MODEL_TIMEOUT_S, gt=0)
    model_max_attempts: int = Field(default=DEFAULT_MODEL_MAX_ATTEMPTS, ge=1, le=10)
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=4096)
    # Python log level inside the Flink operators (DEBUG also lets the HTTP
    # client libraries' per-request records through).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    def for_workers(self) -> dict[str, Any]:
        """A plain dict to ship to Flink workers (secrets in clear: never log it)."""
        data = self.model_dump()
        if self.openai_api_key is not None:
            data["openai_api_key"] = self.openai_api_key.get_secret_value()
        return data


def load_settings(env: Mapping[str, str], **flags: Any) -> Settings:
    """Build settings from flags (``None`` means unset), then the environment."""
    values: dict[str, Any] = {}
    for field_name, var in ENV_VARS.items():
        if var in env and env[var] != "":
            values[field_name] = env[var]
    values.update({k: v for k, v in flags.items() if v is not None})
    try:
        return Settings.model_validate(values)
    except ValidationError as e:
        raise ConfigError(f"invalid settings: {describe_validation_error(e)}") from e


def embedder_from(settings: Settings) -> Embedder:
    """The embedder the settings name (the OpenAI one reads base URL, model and key from them)."""
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    return open_embedder(settings.embedder, settings.openai_base_url, settings.embed_model, key)

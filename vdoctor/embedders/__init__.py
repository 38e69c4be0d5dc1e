"""Embedders, chosen by name in one closed registry (``VDOCTOR_EMBEDDER``).

- ``offline`` (default): hashed character n-grams, no network, no model files;
- ``openai``: any OpenAI-compatible ``/embeddings`` endpoint (``OPENAI_BASE_URL``,
  ``VDOCTOR_EMBED_MODEL``, ``OPENAI_API_KEY``).

Add one: a module with a class that meets ``Embedder`` (``base.py``), one entry
below; the contract suite picks it up from ``EMBEDDERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import SecretStr

from vdoctor.embedders.base import DEFAULT_DIM, Embedder, Vectors
from vdoctor.registry import Registry

EmbedderName = Literal["offline", "openai"]


@dataclass(frozen=True)
class EmbedderConfig:
    """What an embedder may need: a model name, a dimension, and an endpoint for remote ones."""

    model: str = ""
    dim: int = DEFAULT_DIM
    base_url: str | None = None
    api_key: SecretStr | None = None


def _open_hashing(config: EmbedderConfig) -> Embedder:
    from vdoctor.embedders.hashing import HashingEmbedder

    return HashingEmbedder(config.dim)


def _open_openai(config: EmbedderConfig) -> Embedder:
    from vdoctor.embedders.openai import OpenAIEmbedder

    key = config.api_key.get_secret_value() if config.api_key is not None else ""
    return OpenAIEmbedder(config.base_url or "", config.model, key, config.dim)


_REGISTRY: Registry[Callable[[EmbedderConfig], Embedder]] = Registry(
    "embedder", {"offline": _open_hashing, "openai": _open_openai}
)
# The closed set of names (EmbedderName, which settings validate against, must match it: the contract suite checks).
EMBEDDERS = _REGISTRY.names


def open_embedder(name: str, config: EmbedderConfig | None = None) -> Embedder:
    """The embedder ``name`` names; an unknown name lists the valid ones."""
    return _REGISTRY[name](config or EmbedderConfig())


__all__ = ["DEFAULT_DIM", "EMBEDDERS", "Embedder", "EmbedderConfig", "EmbedderName", "Vectors", "open_embedder"]

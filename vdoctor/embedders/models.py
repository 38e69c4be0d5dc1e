"""The embedding models with weights, by name: loaded in the job's process or in the embedding child."""

from __future__ import annotations

from vdoctor.embedders.base import Embedder
from vdoctor.errors import ConfigError


def load_model(name: str) -> Embedder:
    """A new instance of the model ``name`` names, in this process (the embedding child calls it too)."""
    if name == "use-m3":
        from vdoctor.embedders.use import UseEmbedder

        return UseEmbedder()
    if name == "e5-small":
        from vdoctor.embedders.e5 import E5Embedder

        return E5Embedder()
    raise ConfigError(f"no embedding child for {name!r}: use-m3 or e5-small")

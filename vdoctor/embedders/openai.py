"""An OpenAI-compatible embeddings endpoint as an Embedder (``POST {base_url}/embeddings``).

Any server that speaks the OpenAI embeddings API works (OpenAI, vLLM, Ollama,
LiteLLM, ...). The base URL and model come from settings; the API key is a
secret and never appears in errors or logs. Vectors are requested at the
store's dimension (``dimensions``, honoured by text-embedding-3 models and
most servers), checked (count, dimension, finite) and L2-normalised here,
because every store ranks by inner product.
"""

from __future__ import annotations

import math

import numpy as np

from vdoctor.embedders.base import DEFAULT_DIM, Vectors
from vdoctor.errors import ConfigError, ModelError
from vdoctor.openai_clients import ThreadClients, http_client

try:
    import openai
except ImportError as e:  # pragma: no cover - openai is a declared dependency
    raise ConfigError("the openai embedder needs the openai package: pip install 'openai>=1.40'") from e

# Texts per request: providers cap batch sizes (OpenAI at 2048 inputs).
BATCH_TEXTS = 256
REQUEST_TIMEOUT_S = 30.0
# The most of an unreadable reply's error an error message quotes.
_MAX_DETAIL = 400


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible HTTP endpoint through the ``openai`` client."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str,
        dim: int = DEFAULT_DIM,
        max_retries: int = 2,
        send_dimensions: bool = True,
    ) -> None:
        if not base_url:
            raise ConfigError("the openai embedder needs a base URL (OPENAI_BASE_URL)")
        if not model:
            raise ConfigError("the openai embedder needs a model name (VDOCTOR_EMBED_MODEL)")
        self.dim = dim
        self.name = f"openai:{model}"
        self._model = model
        self._send_dimensions = send_dimensions
        # Local servers accept any key; the client refuses an empty one.
        shared = http_client(REQUEST_TIMEOUT_S)
        self._clients = ThreadClients(
            lambda: openai.OpenAI(
                base_url=base_url,
                api_key=api_key or "unused",
                timeout=REQUEST_TIMEOUT_S,
                max_retries=max_retries,
                http_client=shared,
            )
        )
        self._secret = api_key

    def _safe(self, e: BaseException) -> str:
        text = f"{type(e).__name__}: {e}"
        return text.replace(self._secret, "***") if self._secret else text

    def embed(self, texts: list[str]) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), BATCH_TEXTS):
            batch = texts[start : start + BATCH_TEXTS]
            try:
                if self._send_dimensions:
                    resp = self._clients.get().embeddings.create(model=self._model, input=batch, dimensions=self.dim)
                else:
                    resp = self._clients.get().embeddings.create(model=self._model, input=batch)
            except openai.OpenAIError as e:
                raise ModelError(f"embedding endpoint failed for model {self._model}: {self._safe(e)}") from None
            except (ValueError, TypeError, AttributeError) as e:
                # What the client raises on a reply it cannot read ("No embedding data received" for a 200
                # with an error object or no data): a ModelError, as any failure of the endpoint. Before, it
                # left the engine's handlers and made the alert a dead letter (found by an audit).
                raise ModelError(f"embedding endpoint gave an unreadable reply for model {self._model}: "
                                 f"{self._safe(e)}"[:_MAX_DETAIL]) from None  # fmt: skip
            data = resp.data if isinstance(getattr(resp, "data", None), list) else []
            if len(data) != len(batch):
                raise ModelError(f"embedding endpoint returned {len(data)} vectors for {len(batch)} texts")
            seen: set[int] = set()
            for item in data:
                vec, index = getattr(item, "embedding", None), getattr(item, "index", None)
                if not isinstance(vec, list) or len(vec) != self.dim:
                    got = len(vec) if isinstance(vec, list) else type(vec).__name__
                    raise ModelError(f"embedding of dimension {got} from model {self._model}; expected {self.dim}")
                if not all(isinstance(x, int | float) and math.isfinite(x) for x in vec):
                    raise ModelError(f"embedding from model {self._model} holds non-finite values")
                # Each text's vector once: an index given twice left another text's row all zeros.
                if not isinstance(index, int) or not 0 <= index < len(batch) or index in seen:
                    raise ModelError(f"embedding endpoint returned index {index!r} for {len(batch)} texts, "
                                     f"or twice")  # fmt: skip
                seen.add(index)
                row = np.asarray(vec, dtype=np.float32)
                norm = float(np.linalg.norm(row))
                if norm == 0.0:  # no direction: it cannot be normalised, and ranks nothing
                    raise ModelError(f"embedding from model {self._model} is all zeros")
                out[start + index] = row / norm
        return out

    def embed_queries(self, texts: list[str]) -> Vectors:
        # One model for both sides: OpenAI-style endpoints take no query/passage distinction.
        return self.embed(texts)

"""One contract over every embedder in the registry: what recall and knowledge search rely on.

A registry entry without a factory here fails ``test_every_registered_embedder_is_covered``,
so a new embedder cannot skip the suite. The ``openai`` embedder runs with the
real ``openai`` client against a local embeddings server over HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import get_args

import numpy as np
import pytest
from pydantic import SecretStr

from tests.services.embeddings import embeddings_server, text_vector
from vdoctor.embedders import EMBEDDERS, Embedder, EmbedderConfig, EmbedderName, open_embedder
from vdoctor.errors import ConfigError

pytestmark = pytest.mark.contract

API_KEY = "sk-contract-embedder-0123"
TEXTS = [
    "电池包单体压差过大 P0A7F",
    "cell voltage difference 187 mV, pack 41.5 °C",
    "concluded P0A7F | P1 conf 0.80; confirmed cell_voltage_diff_mv=187>=100",
    "冷却液温度传感器电路高输入",
]


def _offline() -> Iterator[Embedder]:
    yield open_embedder("offline")


def _openai() -> Iterator[Embedder]:
    with embeddings_server(API_KEY, text_vector) as srv:
        config = EmbedderConfig(model="contract-embedder", dim=64, base_url=srv.base_url, api_key=SecretStr(API_KEY))
        embedder = open_embedder("openai", config)
        yield embedder


FACTORIES: dict[str, Callable[[], Iterator[Embedder]]] = {"offline": _offline, "openai": _openai}


@pytest.fixture(params=sorted(FACTORIES))
def embedder(request: pytest.FixtureRequest) -> Iterator[Embedder]:
    yield from FACTORIES[request.param]()


def test_every_registered_embedder_is_covered() -> None:
    assert set(FACTORIES) == set(EMBEDDERS)
    assert set(get_args(EmbedderName)) == set(EMBEDDERS)  # the names settings accept are the registry's


def test_an_unknown_embedder_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="valid: " + ", ".join(EMBEDDERS)):
        open_embedder("word2vec")


def test_vectors_have_the_declared_dimension_and_dtype(embedder: Embedder) -> None:
    out = embedder.embed(TEXTS)
    assert out.shape == (len(TEXTS), embedder.dim) and out.dtype == np.float32
    assert embedder.embed([]).shape == (0, embedder.dim)
    assert isinstance(embedder.name, str) and embedder.name


def test_vectors_are_unit_length(embedder: Embedder) -> None:
    norms = np.linalg.norm(embedder.embed(TEXTS), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


def test_the_same_text_gives_the_same_vector(embedder: Embedder) -> None:
    first, second = embedder.embed(TEXTS), embedder.embed(TEXTS)
    assert np.array_equal(first, second)


def test_a_batch_gives_the_vectors_of_its_texts_one_by_one(embedder: Embedder) -> None:
    batch = embedder.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        assert np.allclose(batch[i], embedder.embed([text])[0], atol=1e-6)


def test_different_texts_give_different_vectors(embedder: Embedder) -> None:
    out = embedder.embed(TEXTS)
    sims = out @ out.T
    assert all(sims[i, j] < 0.999 for i in range(len(TEXTS)) for j in range(len(TEXTS)) if i != j)

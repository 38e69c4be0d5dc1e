"""The OpenAI-compatible embedder, with the real ``openai`` client over HTTP.

A small local server speaks ``POST /v1/embeddings`` as OpenAI does; its
vectors are a fixed function of the text, so the expected results are known.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pytest
from pydantic import SecretStr

from tests.services.embeddings import Server, embeddings_server
from vdoctor.assembly import embedder as embedder_from
from vdoctor.embedders import EmbedderConfig, open_embedder
from vdoctor.embedders.batching import CoalescingEmbedder
from vdoctor.embedders.cache import QueryCache
from vdoctor.embedders.child import ChildProcessEmbedder
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.embedders.openai import OpenAIEmbedder
from vdoctor.embedders.use import UseEmbedder
from vdoctor.errors import ConfigError, ModelError
from vdoctor.settings import load_settings

pytestmark = pytest.mark.integration

API_KEY = "sk-test-very-secret-0123456789"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with embeddings_server(API_KEY) as srv:
        yield srv


@pytest.fixture
def base_url(server: Server) -> Iterator[str]:
    server.requests.clear()
    server.headers_seen.clear()
    server.mode = "ok"
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"


def test_embeds_through_the_endpoint_normalised_and_in_input_order(server: Server, base_url: str) -> None:
    emb = OpenAIEmbedder(base_url, "text-embedding-3-small", API_KEY, dim=4)
    out = emb.embed(["ab", "abcd"])
    # [2, 1, 2, 3] / sqrt(18) and [4, 1, 2, 3] / sqrt(30); the server answered in reverse order.
    assert out.shape == (2, 4) and out.dtype == np.float32
    assert out[0] == pytest.approx(np.array([2, 1, 2, 3]) / np.sqrt(18), rel=1e-6)
    assert out[1] == pytest.approx(np.array([4, 1, 2, 3]) / np.sqrt(30), rel=1e-6)
    assert len(server.requests) == 1
    sent = server.requests[0]
    assert (sent["path"], sent["model"], sent["input"], sent["dimensions"]) == (
        "/v1/embeddings",
        "text-embedding-3-small",
        ["ab", "abcd"],
        4,
    )
    assert server.headers_seen[0]["authorization"] == f"Bearer {API_KEY}"


def test_settings_select_the_openai_embedder(server: Server, base_url: str) -> None:
    env = {
        "VDOCTOR_EMBEDDER": "openai",
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": API_KEY,
        "VDOCTOR_EMBED_MODEL": "my-embedder",
    }
    settings = load_settings(env)
    assert API_KEY not in repr(settings) and API_KEY not in str(settings.model_dump())
    emb = embedder_from(settings)
    assert emb.name == "openai:my-embedder" and emb.dim == 256
    vec = emb.embed(["电池包单体压差过大"])[0]
    assert float(np.linalg.norm(vec)) == pytest.approx(1.0, abs=1e-6)
    assert server.requests[-1]["model"] == "my-embedder" and server.requests[-1]["dimensions"] == 256
    # Without settings: the default embedder, USE-multilingual v3 shipped in its package (no endpoint),
    # in a child process of its own; or in this one when the settings say so.
    default = embedder_from(load_settings({}))
    assert isinstance(default, QueryCache) and isinstance(default.model, CoalescingEmbedder)
    assert isinstance(default.model.model, ChildProcessEmbedder) and default.model.model.model == "use-m3"
    assert default.model.model.name == UseEmbedder.name
    here = embedder_from(load_settings({"VDOCTOR_EMBED_CHILD_PROCESS": "false"}))
    assert isinstance(here, QueryCache) and isinstance(here.model, CoalescingEmbedder)
    assert isinstance(here.model.model, UseEmbedder)
    assert isinstance(embedder_from(load_settings({"VDOCTOR_EMBEDDER": "hashing"})), HashingEmbedder)


def test_server_errors_become_model_errors_without_the_key(
    server: Server, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.mode = "error"
    emb = OpenAIEmbedder(base_url, "m", API_KEY, dim=4, max_retries=0)
    with pytest.raises(ModelError, match="backend exploded") as err:
        emb.embed(["x"])
    assert API_KEY not in str(err.value) and err.value.__cause__ is None
    assert API_KEY not in caplog.text


def test_a_wrong_dimension_is_refused(server: Server, base_url: str) -> None:
    server.mode = "short"
    with pytest.raises(ModelError, match="dimension 3 .* expected 4"):
        OpenAIEmbedder(base_url, "m", API_KEY, dim=4).embed(["x"])


def test_a_wrong_key_is_refused_without_echoing_it(base_url: str) -> None:
    with pytest.raises(ModelError) as err:
        OpenAIEmbedder(base_url, "m", "sk-wrong-key-abcdef", dim=4, max_retries=0).embed(["x"])
    assert "sk-wrong-key-abcdef" not in str(err.value)


def test_bad_configuration_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        open_embedder("openai", EmbedderConfig(model="m", api_key=SecretStr(API_KEY)))
    with pytest.raises(ConfigError, match="valid: use-m3, e5-small, hashing, openai"):
        open_embedder("word2vec")
    with pytest.raises(ConfigError):
        load_settings({"VDOCTOR_EMBEDDER": "word2vec"})


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("error-in-200", "unreadable reply .* No embedding data received"),
        ("same-index", "returned index 0 for 2 texts, or twice"),
        ("no-index", "returned index None for 2 texts"),
        ("zeros", "is all zeros"),
    ],
)
def test_a_reply_the_embedder_cannot_use_is_a_model_error(server: Server, base_url: str, mode: str, said: str) -> None:
    """A 200 with an error object, or items without an index, raised the client's ValueError or a TypeError,
    which the engine's handlers (made for ModelError) let through: a concluded alert became a dead letter. An
    index given twice left a text's row all zeros, and a zero vector was stored as it came (an audit)."""
    server.mode = mode
    with pytest.raises(ModelError, match=said):
        OpenAIEmbedder(base_url, "m", API_KEY, dim=4, max_retries=0).embed(["ab", "abcd"])

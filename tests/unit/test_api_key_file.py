"""The API key file (VDOCTOR_OPENAI_API_KEY_FILE) is a key source for every command that calls the endpoint.

Only the job's workers read it (``with_secrets`` in their ``open()``): a command that built a model or
an embedder itself (``memory recall``, ``reextract``, ``reembed``, ``knowledge load`` and ``search``)
said "set OPENAI_API_KEY", or called the endpoint with the placeholder key "unused".
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import openai
import pytest

from vdoctor import assembly
from vdoctor.embedders import openai as openai_embedder
from vdoctor.errors import ConfigError
from vdoctor.models import openai as openai_model
from vdoctor.models.base import Message
from vdoctor.scrub import settings_secrets
from vdoctor.settings import load_settings

pytestmark = pytest.mark.unit

KEY = "sk-key-file-test-7e8f9a0b"


def endpoint(presented: list[str]) -> httpx2.MockTransport:
    """An OpenAI-compatible endpoint that notes the Authorization header of every call."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        presented.append(request.headers.get("Authorization", ""))
        if request.url.path.endswith("/embeddings"):
            asked = json.loads(request.content)
            dim = asked["dimensions"]
            data = [{"object": "embedding", "index": i, "embedding": [1.0] * dim} for i in range(len(asked["input"]))]
            body = {"object": "list", "data": data, "model": "e", "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        else:
            body = {
                "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }  # fmt: skip
        return httpx2.Response(200, content=json.dumps(body).encode(), headers={"content-type": "application/json"})

    return httpx2.MockTransport(handle)


@pytest.fixture
def presented(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Authorization headers the endpoint was sent; the models' and embedder's HTTP clients reach it."""
    seen: list[str] = []
    transport = endpoint(seen)
    for module in (openai_model, openai_embedder):
        monkeypatch.setattr(
            module, "http_client", lambda timeout_s: openai.DefaultHttpxClient(timeout=timeout_s, transport=transport)
        )
    return seen


def key_file_env(tmp_path: Path, **more: str) -> dict[str, str]:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n", encoding="utf-8")  # a mounted secret ends in a newline
    return {
        "VDOCTOR_OPENAI_API_KEY_FILE": str(key_file),
        "OPENAI_BASE_URL": "http://model.invalid/v1",
        "VDOCTOR_QUERY_VECTOR_FILE": "off",
        **more,
    }


def test_a_model_built_by_a_command_calls_with_the_key_from_the_file(tmp_path: Path, presented: list[str]) -> None:
    settings = load_settings(key_file_env(tmp_path, VDOCTOR_MODEL="openai", VDOCTOR_SUMMARIZER="openai"))
    model = assembly.chat_model(settings)  # memory reextract's summary model is built the same way
    model.chat([Message(role="user", content="diagnose")], [])
    assert presented == [f"Bearer {KEY}"]


def test_an_embedder_built_by_a_command_calls_with_the_key_from_the_file(tmp_path: Path, presented: list[str]) -> None:
    settings = load_settings(key_file_env(tmp_path, VDOCTOR_EMBEDDER="openai"))
    assembly.embedder(settings).embed(["电池包单体压差过大"])
    assert presented == [f"Bearer {KEY}"]
    # The inspector's scrubber masks the key it reads.
    assert KEY in settings_secrets(settings)


def test_the_variable_is_read_before_the_file_and_the_key_is_never_in_the_settings_text(tmp_path: Path) -> None:
    settings = load_settings(key_file_env(tmp_path, VDOCTOR_EMBEDDER="openai"))
    assert KEY not in repr(settings) and KEY not in settings.model_dump_json()
    given = load_settings(key_file_env(tmp_path, VDOCTOR_EMBEDDER="openai", OPENAI_API_KEY="sk-from-variable"))
    key = given.api_key()
    assert key is not None and key.get_secret_value() == "sk-from-variable"


def test_an_unreadable_key_file_is_an_error_only_where_a_part_calls_the_endpoint(tmp_path: Path) -> None:
    env = {"VDOCTOR_OPENAI_API_KEY_FILE": str(tmp_path / "missing")}
    assert load_settings(env).api_key() is None  # offline: no key wanted, the file is not read
    with pytest.raises(ConfigError, match="cannot read the API key file .*missing"):
        load_settings({**env, "VDOCTOR_SUMMARIZER": "openai"}).api_key()

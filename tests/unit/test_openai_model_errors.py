"""The hosted chat model's errors never carry the API key, in their message or in their traceback.

Some servers echo the key they were given in an error (``devtools/model_server.py`` does so on purpose:
its injected 400 and its 401, exercised over HTTP in tests/integration/test_openai_model.py). Here the
same replies come from an in-process ``httpx2.MockTransport`` in place of the socket, and the whole
formatted traceback is checked: the ``openai`` exception, were it chained as the cause, holds the
reply unscrubbed (and the request with its Authorization header).
"""

from __future__ import annotations

import json
import traceback
from typing import Any

import httpx2
import openai
import pytest
from pydantic import SecretStr

from vdoctor.errors import ModelError
from vdoctor.models import openai as openai_model
from vdoctor.models.base import Message
from vdoctor.models.openai import OpenAIChatModel

pytestmark = pytest.mark.unit

KEY = "sk-unit-echo-3c4d5e6f7a8b"
MESSAGES = [Message(role="user", content="diagnose")]


def echoing(status: int, message: str) -> httpx2.MockTransport:
    """A server that answers every call ``status`` with ``message`` ({key}: the key it was sent)."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        presented = request.headers.get("Authorization", "").removeprefix("Bearer ")
        body = {"error": {"message": message.format(key=presented), "type": "invalid_request_error"}}
        return httpx2.Response(status, content=json.dumps(body).encode(), headers={"content-type": "application/json"})

    return httpx2.MockTransport(handle)


def model(monkeypatch: pytest.MonkeyPatch, transport: httpx2.MockTransport, **kwargs: Any) -> OpenAIChatModel:
    # The HTTP client the model's openai clients share, on the mock transport instead of a socket.
    monkeypatch.setattr(
        openai_model, "http_client", lambda timeout_s: openai.DefaultHttpxClient(timeout=timeout_s, transport=transport)
    )
    return OpenAIChatModel("chat-test", SecretStr(KEY), "http://model.invalid/v1", sleep=lambda s: None, **kwargs)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Bad request (injected); authorization was {key}"),  # the model server's injected 400
        (401, "Incorrect API key provided: {key}"),  # its 401 for a wrong key
    ],
)
def test_a_rejected_call_shows_the_key_in_neither_the_error_nor_its_traceback(
    monkeypatch: pytest.MonkeyPatch, status: int, message: str
) -> None:
    chat = model(monkeypatch, echoing(status, message))
    with pytest.raises(ModelError, match=f"HTTP {status}, not retried") as err:
        chat.chat(MESSAGES, [])
    assert KEY not in str(err.value) and "[redacted]" in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert KEY not in "".join(traceback.format_exception(err.value))


def test_a_call_given_up_on_shows_the_key_in_neither_the_error_nor_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chat = model(monkeypatch, echoing(500, "server error; authorization was {key}"), max_attempts=2)
    with pytest.raises(ModelError, match="gave up after 2 attempts") as err:
        chat.chat(MESSAGES, [])
    assert KEY not in "".join(traceback.format_exception(err.value))


def test_tool_arguments_that_are_not_json_are_shown_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    def handle(request: httpx2.Request) -> httpx2.Response:
        presented = request.headers.get("Authorization", "").removeprefix("Bearer ")
        call = {"id": "c1", "type": "function", "function": {"name": "lookup_dtc", "arguments": f"{{{presented}"}}
        body = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
        return httpx2.Response(200, content=json.dumps(body).encode(), headers={"content-type": "application/json"})

    chat = model(monkeypatch, httpx2.MockTransport(handle))
    with pytest.raises(ModelError, match="not JSON") as err:
        chat.chat(MESSAGES, [])
    assert KEY not in "".join(traceback.format_exception(err.value))


def test_the_reprs_of_a_model_and_its_config_mask_credentials_in_the_base_url() -> None:
    from vdoctor.models import ChatModelConfig

    url = "https://team:Pw0rdSECRET@llm.example/v1"
    model = OpenAIChatModel("m", api_key=SecretStr("sk-key"), base_url=url)
    config = ChatModelConfig(model="m", base_url=url, api_key=SecretStr("sk-key"))
    for shown in (repr(model), repr(config)):
        assert "Pw0rdSECRET" not in shown and "sk-key" not in shown
        assert "llm.example/v1" in shown

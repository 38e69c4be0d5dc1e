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


def replying(*replies: httpx2.Response) -> tuple[httpx2.MockTransport, list[float]]:
    """A server that gives ``replies`` in turn (the last one from then on); the times it was called at."""
    import time

    times: list[float] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        times.append(time.monotonic())
        return replies[min(len(times), len(replies)) - 1]

    return httpx2.MockTransport(handle), times


def chat_reply(message: dict[str, Any]) -> httpx2.Response:
    body = {"choices": [{"message": message, "finish_reason": "stop"}], "model": "chat-test"}
    return httpx2.Response(200, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def test_a_tool_calls_arguments_sent_as_an_object_are_read_as_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway that sends ``arguments`` as the object itself: a TypeError left the model, and the alert was a
    dead letter (found by an audit). A number is a ModelError, as arguments that are no JSON object."""
    call = {"id": "c1", "type": "function", "function": {"name": "signal_history", "arguments": {"signal": "x"}}}
    transport, _ = replying(chat_reply({"role": "assistant", "content": None, "tool_calls": [call]}))
    [got] = model(monkeypatch, transport).chat(MESSAGES, []).tool_calls
    assert (got.name, got.arguments) == ("signal_history", {"signal": "x"})
    call["function"]["arguments"] = 7  # type: ignore[index]
    transport, _ = replying(chat_reply({"role": "assistant", "content": None, "tool_calls": [call]}))
    with pytest.raises(ModelError, match="arguments that are not a JSON object"):
        model(monkeypatch, transport).chat(MESSAGES, [])


def test_an_unreadable_reply_is_scrubbed_before_it_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page echoing the request, the key across the 300-character cut: its head was left unmasked."""
    page = "x" * 290 + KEY + " (the request's Authorization header, echoed)"
    transport, _ = replying(httpx2.Response(200, content=page.encode(), headers={"content-type": "text/html"}))
    with pytest.raises(ModelError) as raised:
        model(monkeypatch, transport, max_attempts=1).chat(MESSAGES, [])
    assert KEY[:8] not in str(raised.value) and "x" * 200 in str(raised.value)


@pytest.mark.parametrize("form", ["seconds", "date"])
def test_a_rate_limit_waits_what_the_server_asks(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """A 429's Retry-After was ignored: the backoff's waits (~0.5 s, 1 s, 2 s) all came before a window of
    a few seconds ended, and the alert was model_failed (found by an audit). Waited, up to 30 s."""
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    value = "12" if form == "seconds" else format_datetime(datetime.now(UTC) + timedelta(seconds=12), usegmt=True)
    limited = httpx2.Response(429, content=b'{"error": {"message": "slow down"}}', headers={"retry-after": value})
    transport, _ = replying(limited, chat_reply({"role": "assistant", "content": "done"}))
    slept: list[float] = []
    chat = model(monkeypatch, transport)
    chat._sleep = slept.append  # type: ignore[method-assign]
    assert chat.chat(MESSAGES, []).content == "done"
    assert len(slept) == 1 and 10.5 <= slept[0] <= 13.0  # the server's wait, a second of jitter at most on top
    assert openai_model.retry_after_s(httpx2.Response(429, headers={"retry-after": "3600"})) == 3600.0
    assert openai_model.RETRY_AFTER_CAP_S == 30.0
    for nothing in ("", "soon", "-5", "nan"):
        assert openai_model.retry_after_s(httpx2.Response(429, headers={"retry-after": nothing})) == 0.0


def test_retry_after_is_read_on_a_429_or_503_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any 5xx's Retry-After was waited (30 s a wait, 90 s a call in a storm: a diff review); it is a rate
    limit's or a planned outage's."""
    waits = {}
    for status in (429, 503, 500, 502):
        failing = httpx2.Response(status, content=b'{"error": {"message": "x"}}', headers={"retry-after": "20"})
        transport, _ = replying(failing, chat_reply({"role": "assistant", "content": "done"}))
        slept: list[float] = []
        chat = model(monkeypatch, transport)
        chat._sleep = slept.append  # type: ignore[method-assign]
        chat.chat(MESSAGES, [])
        waits[status] = slept[0]
    assert waits[429] >= 20 and waits[503] >= 20 and waits[500] < 2 and waits[502] < 2

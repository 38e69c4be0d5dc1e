"""A chat model behind any OpenAI-compatible endpoint, with native tool calling.

Calls go through the ``openai`` package over HTTP. Each call has its own
timeout; 408, 429, 5xx, timeouts, dropped connections and unreadable replies
are retried with exponential backoff and full jitter up to a bounded number of
attempts; any other 4xx is a ``ModelError`` at once (retrying a bad request
or a wrong key only spends quota). Token usage and latency of every call are
returned in ``ChatResponse``.

Replies are read as OpenAI-compatible servers send them, not only as OpenAI
does: a message's content given as a list of parts is its text parts joined,
and a tool call with no id, or with an id used before in the conversation, is
given one of ours, so that the results sent back next answer exactly one call.

The API key is a ``SecretStr`` until the moment the client is built, and it is
scrubbed from every error message this module raises.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import openai
from pydantic import SecretStr

from vdoctor.errors import ConfigError, ModelError
from vdoctor.events import loads_whole, whole_escapes
from vdoctor.models.base import MAX_CALL_ID_CHARS, ChatResponse, Message, ToolCall, ToolSpec
from vdoctor.openai_clients import ThreadClients, http_client
from vdoctor.url_credentials import shown_url

log = logging.getLogger(__name__)

# Backoff before retry n (1-based) is uniform in [0, min(CAP, BASE * 2**(n-1))]:
# "full jitter" spreads the retries of many vehicles hitting one rate limit.
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
# The longest wait a server's Retry-After is given before an attempt (a longer one is waited this long).
RETRY_AFTER_CAP_S = 30.0
RETRY_AFTER_JITTER_S = 1.0
# The 4xx statuses retried as a 5xx is: a gateway's request timeout (408) and a rate limit (429), as the
# ``openai`` client's own retries have them. Any other 4xx is the request's fault, and fails at once.
RETRIED_4XX = frozenset({408, 429})
# Error text from the server is cut to this length in our messages.
MAX_ERROR_DETAIL = 300
_REDACTED = "[redacted]"


def backoff_s(retry: int, rng: random.Random, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S) -> float:
    """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
    return rng.uniform(0.0, min(cap, base * 2 ** (retry - 1)))


def to_wire(messages: list[Message]) -> list[dict[str, Any]]:
    """Our messages in the OpenAI chat-completions shape."""
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json},
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out


def tools_to_wire(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def _parse_arguments(raw: object, name: str, scrub: Callable[[str], str]) -> dict[str, Any]:
    """A tool call's arguments; an error shows them scrubbed and cut, and chains no cause (which holds them whole).

    The API sends them as a JSON text; a gateway that sends the object itself is read as it (a number or a
    list, as any other arguments that are no JSON object, is a ``ModelError``: it was a ``TypeError``, and
    the alert a dead letter, found by an audit)."""
    if isinstance(raw, dict):
        return raw
    if raw is not None and not isinstance(raw, str):
        raise ModelError(f"tool call {name!r} has arguments that are not a JSON object")
    try:
        value = loads_whole(raw or "{}")
    except ValueError:
        detail = scrub(str(raw))[:MAX_ERROR_DETAIL]
        raise ModelError(f"tool call {name!r} has arguments that are not JSON: {detail}") from None
    if not isinstance(value, dict):
        raise ModelError(f"tool call {name!r} has arguments that are not a JSON object")
    return value


def _content_text(content: object) -> str | None:
    """A reply message's content as text: a string as it is; a list of parts, as some OpenAI-compatible
    servers send it (``[{"type": "text", "text": "..."}]``), as its text parts joined, any other part left
    out; None when there is no text. A list was read as no content, and the answer in it was lost.

    Escapes of half a character in it (JSON in the prose: the answer) are written as U+FFFD's here, where the
    model's text enters the job, so that no later reading of that JSON (the answer, its prose's key facts)
    makes a lone surrogate."""
    if isinstance(content, str):
        return whole_escapes(content)
    if not isinstance(content, list):
        return None
    texts = [
        part["text"]
        for part in content
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    ]
    return whole_escapes("".join(texts)) if texts else None


# Our tool-call ids number a turn's calls from the turn times this: room for any reply's calls (react.py runs
# 16 of a step), in the five digits of a nine-character id up to the 99th turn (a run has 6).
_CALLS_PER_TURN = 1000


def unique_call_ids(given: list[object], messages: list[Message]) -> list[str]:
    """The ids of a reply's tool calls (``given``, in order), each unique within the conversation
    (``messages``, the reply's request). An id that is missing, not a string, or taken by an earlier call
    of the reply or of the conversation is replaced by ``call`` and five digits: the reply's turn times
    1000 plus the call's index, or the next free number. Deterministic, and nine letters and digits, the
    one form Mistral's servers take.

    A missing id went back as an empty ``tool_call_id`` and a repeated one answered two calls: a server
    rejected the next request, and the run was ``model_failed``. A repeat from an earlier turn is replaced
    too: some servers number each reply's calls from 0, and some models behind a gateway want every id of
    a conversation unique."""
    taken = {call.id for m in messages for call in m.tool_calls}
    taken.update(m.tool_call_id for m in messages if m.tool_call_id)
    turn = 1 + sum(1 for m in messages if m.role == "assistant")
    ids: list[str] = []
    for index, call_id in enumerate(given):
        if isinstance(call_id, str) and 0 < len(call_id) <= MAX_CALL_ID_CHARS and call_id not in taken:
            own = call_id
        else:
            number = turn * _CALLS_PER_TURN + index
            while (own := f"call{number:05d}") in taken:
                number += 1
        taken.add(own)
        ids.append(own)
    return ids


def _count(value: Any) -> int:
    """A token count from the reply's usage; 0 when the endpoint reports none or nonsense."""
    return value if isinstance(value, int) and value >= 0 else 0


class _Retryable(Exception):
    """An attempt failed in a way that another attempt may fix; ``retry_after``: the seconds the server asked
    to be given before it (a 429's or 503's ``Retry-After``), 0 when it asked none."""

    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def retry_after_s(response: object) -> float:
    """A reply's ``Retry-After`` in seconds, as a number of seconds or an HTTP date (RFC 9110); 0 when it
    has none or one that is neither. The backoff alone gave a rate limit of over ~3.5 s no chance: every
    attempt came too early, and the alert was ``model_failed`` (found by an audit)."""
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds()
        except (TypeError, ValueError, IndexError, OverflowError):
            return 0.0
    return seconds if math.isfinite(seconds) and seconds > 0 else 0.0


class OpenAIChatModel:
    """ChatModel over an OpenAI-compatible ``/v1/chat/completions`` endpoint."""

    def __init__(
        self,
        model: str,
        api_key: SecretStr | None,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        max_attempts: int = 4,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {max_attempts}")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}")
        if api_key is None or not api_key.get_secret_value():
            raise ConfigError("the openai model needs an API key: set OPENAI_API_KEY or VDOCTOR_OPENAI_API_KEY_FILE")
        self.name = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self._secret = api_key.get_secret_value()
        self._sleep = sleep
        self._rng = rng or random.Random()
        # Retries are ours (counted, logged, jittered); the client must not add its own.
        shared = http_client(timeout_s)
        self._clients = ThreadClients(
            lambda: openai.OpenAI(
                api_key=self._secret, base_url=base_url, timeout=timeout_s, max_retries=0, http_client=shared
            )
        )
        self._client()  # a bad base URL fails here, not in the first run

    def _client(self) -> openai.OpenAI:
        return self._clients.get()

    def __repr__(self) -> str:  # the key must never show, not even in a debugger's repr
        return f"OpenAIChatModel(model={self.name!r}, base_url={shown_url(self.base_url)!r})"  # nor a URL's password

    def close(self) -> None:
        self._clients.close()

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, _REDACTED) if self._secret else text

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        started = time.perf_counter()
        last = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = self._attempt(messages, tools)
            except _Retryable as e:
                last = str(e)
                if attempt == self.max_attempts:
                    break
                wait = backoff_s(attempt, self._rng)
                if e.retry_after > wait:  # the server's, bounded, with jitter: runs do not all come back at once
                    wait = min(e.retry_after, RETRY_AFTER_CAP_S) + self._rng.uniform(0.0, RETRY_AFTER_JITTER_S)
                log.warning(
                    "chat model %s: attempt %d/%d failed (%s); retrying in %.2f s",
                    self.name,
                    attempt,
                    self.max_attempts,
                    last,
                    wait,
                )
                self._sleep(wait)
                continue
            latency_ms = (time.perf_counter() - started) * 1000.0
            return self._to_response(response, latency_ms, attempt, messages)
        raise ModelError(f"chat model {self.name}: gave up after {self.max_attempts} attempts; last error: {last}")

    def _attempt(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.name, "messages": to_wire(messages)}
        if tools:
            kwargs["tools"] = tools_to_wire(tools)
        # Every error here is raised ``from None``: the openai exception holds the request (its
        # Authorization header) and the server's reply, which may echo the key, and a chained cause
        # would print them, unscrubbed, in any traceback. Our message carries the scrubbed detail.
        try:
            # The client's generic POST (its documented way to send a request as
            # built), with the reply as text: ``chat.completions.create``
            # re-walks our plain-dict messages through its TypedDict
            # transformer and builds a pydantic model of the reply, ~0.6 ms of
            # CPU per call that 64 vehicles' runs sharing one interpreter
            # cannot afford. Errors, retries-off and timeouts are the same.
            text = self._client().post("/chat/completions", cast_to=str, body=kwargs)
        except openai.APITimeoutError:
            raise _Retryable(f"timed out after {self.timeout_s:g} s") from None
        except openai.APIConnectionError as e:
            raise _Retryable(self._scrub(f"connection failed: {e}")) from None
        except openai.APIStatusError as e:
            detail = self._scrub(str(e))[:MAX_ERROR_DETAIL]
            if e.status_code in RETRIED_4XX or e.status_code >= 500:
                # Retry-After is the server's for a rate limit (429) or a planned outage (503), not any 5xx.
                asked = retry_after_s(e.response) if e.status_code in (429, 503) else 0.0
                raise _Retryable(f"HTTP {e.status_code}: {detail}", asked) from None
            raise ModelError(f"chat model {self.name}: HTTP {e.status_code}, not retried: {detail}") from None
        try:
            # Half an emoji (a lone surrogate escape, as a gateway that cuts text by UTF-16 units writes it) is
            # U+FFFD, as in an event: kept as it came, it failed the session's JSON in the operator, which
            # failed the job at every restart (found by an audit).
            reply = loads_whole(text)
        except ValueError as e:
            # Scrubbed whole, then cut: cut first, a key across the cut left its head unmasked (an audit).
            raise _Retryable(f"unreadable reply: {e}: {self._scrub(text)[:MAX_ERROR_DETAIL]}") from None
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise _Retryable("reply has no choices")
        if not isinstance(choices[0].get("message"), dict):
            raise _Retryable("reply's first choice has no message")
        checked: dict[str, Any] = reply
        return checked

    def _to_response(
        self, reply: dict[str, Any], latency_ms: float, attempts: int, messages: list[Message]
    ) -> ChatResponse:
        message = reply["choices"][0]["message"]
        given: list[object] = []
        named: list[tuple[str, dict[str, Any]]] = []
        for c in message.get("tool_calls") or []:
            function = c.get("function") if isinstance(c, dict) else None
            if not isinstance(function, dict) or not function.get("name"):
                continue
            name = str(function["name"])
            named.append((name, _parse_arguments(function.get("arguments"), name, self._scrub)))
            given.append(c.get("id"))
        ids = unique_call_ids(given, messages) if given else []
        if ids != given:  # counted, not shown: the ids are the server's text
            renamed = sum(1 for a, b in zip(given, ids, strict=True) if a != b)
            log.debug("chat model %s: %d tool call(s) without an id of their own given one of ours", self.name, renamed)
        calls = tuple(ToolCall(id=i, name=n, arguments=a) for i, (n, a) in zip(ids, named, strict=True))
        usage: dict[str, Any] = reply["usage"] if isinstance(reply.get("usage"), dict) else {}
        return ChatResponse(
            content=_content_text(message.get("content")),
            tool_calls=calls,
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            latency_ms=latency_ms,
            extra={"attempts": attempts, "model": reply.get("model", self.name)},
        )

"""The hosted chat model reads replies as OpenAI-compatible servers send them, and retries a gateway's 408.

The server is an in-process ``httpx2.MockTransport`` in place of the socket (as in
``test_openai_model_errors.py``): what is checked is what the model makes of a reply and what it sends
next, not the wire.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from pydantic import SecretStr

from vdoctor.agent.react import MODEL_FAILED, run_react
from vdoctor.agent.tools import Toolbox
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import SessionState
from vdoctor.models import openai as openai_model
from vdoctor.models.base import Message, ToolCall
from vdoctor.models.openai import BACKOFF_BASE_S, OpenAIChatModel, unique_call_ids

pytestmark = pytest.mark.unit

KEY = "sk-unit-replies-5a6b7c8d"
MESSAGES = [Message(role="system", content="diagnose"), Message(role="user", content="P0A7F on EV-A")]
ANSWER = '{"phase": "INVESTIGATING", "codes": ["P0A7F"]}'


def model(monkeypatch: pytest.MonkeyPatch, handle: Any, slept: list[float] | None = None) -> OpenAIChatModel:
    """The model on ``handle`` (a MockTransport's handler) in place of a socket; its waits kept in ``slept``."""
    transport = httpx2.MockTransport(handle)
    monkeypatch.setattr(
        openai_model, "http_client", lambda timeout_s: openai.DefaultHttpxClient(timeout=timeout_s, transport=transport)
    )
    sleep = slept.append if slept is not None else (lambda s: None)
    return OpenAIChatModel("chat-test", SecretStr(KEY), "http://model.invalid/v1", sleep=sleep)


def reply(message: dict[str, Any]) -> httpx2.Response:
    body = {"choices": [{"message": {"role": "assistant", **message}, "finish_reason": "stop"}], "model": "chat-test"}
    return httpx2.Response(200, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def call(call_id: str | None, code: str) -> dict[str, Any]:
    """A ``lookup_dtc`` call as a server writes it; ``call_id`` None: a server that gives none."""
    written: dict[str, Any] = {
        "type": "function",
        "function": {"name": "lookup_dtc", "arguments": f'{{"codes": ["{code}"]}}'},
    }
    if call_id is not None:
        written["id"] = call_id
    return written


def test_a_408_is_retried_as_a_429_or_5xx_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway's 408 (Request Timeout) failed the call at once as a bad request; the ``openai`` client's own
    retries take it as transient, as a 429 or a 5xx. Its Retry-After is not waited: that is a 429's or a 503's."""
    replies = [
        httpx2.Response(408, content=b'{"error": {"message": "request timeout"}}', headers={"retry-after": "20"}),
        reply({"content": "done"}),
    ]
    slept: list[float] = []
    chat = model(monkeypatch, lambda request: replies.pop(0), slept)
    response = chat.chat(MESSAGES, [])
    assert (response.content, response.extra["attempts"]) == ("done", 2)
    assert len(slept) == 1 and 0.0 <= slept[0] <= BACKOFF_BASE_S  # the first retry's backoff, not the 20 s


def test_content_given_as_parts_is_their_text_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    """Content as a list of parts was read as no content: the answer in it was lost (``unparseable_answer``)."""
    parts = [
        {"type": "text", "text": '{"phase": "INVESTIGATING", '},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/chart.png"}},
        "a stray string",
        {"type": "text", "text": None},
        {"type": "text", "text": '"codes": ["P0A7F"]}'},
    ]
    chat = model(monkeypatch, lambda request: reply({"content": parts}))
    assert chat.chat(MESSAGES, []).content == ANSWER
    chat = model(monkeypatch, lambda request: reply({"content": [{"type": "refusal", "refusal": "no"}]}))
    assert chat.chat(MESSAGES, []).content is None  # no text part: no text, as a null content


def tool_call_problem(messages: list[dict[str, Any]]) -> str | None:
    """What a strict server rejects in a conversation's tool calls: a call without an id, an id used twice in
    the conversation, a tool result that answers no call of the assistant message before it, or a call left
    unanswered. None when there is nothing."""
    seen: set[str] = set()
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            if message.get("tool_call_id") not in open_calls:
                return f"tool_call_id {message.get('tool_call_id')!r} answers no call"
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            return f"calls {sorted(open_calls)} have no result"
        for c in message.get("tool_calls") or []:
            if not c.get("id"):
                return "a tool call has no id"
            if c["id"] in seen:
                return f"tool call id {c['id']!r} used twice"
            seen.add(c["id"])
            open_calls.add(c["id"])
    return None


def test_tool_calls_without_an_id_or_with_a_repeated_one_get_ids_the_next_request_can_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call with no id went back as ``tool_call_id: ""`` and two calls sharing an id were answered by two
    results with it: a server rejected the next request, and the run was ``model_failed``. Here the first reply
    has a call without an id and two sharing one, the second repeats the first's id (a server numbering each
    reply's calls from 0); the server checks every request as a strict one does."""
    replies = [
        reply({"content": None, "tool_calls": [call(None, "P0A7F"), call("dup", "U0140"), call("dup", "P0AA6")]}),
        reply({"content": None, "tool_calls": [call("dup", "B1000")]}),
        reply({"content": ANSWER}),
    ]
    requests: list[list[dict[str, Any]]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        messages = json.loads(request.content)["messages"]
        requests.append(messages)
        problem = tool_call_problem(messages)
        if problem is not None:
            error = {"error": {"message": f"Invalid 'messages': {problem}", "type": "invalid_request_error"}}
            return httpx2.Response(
                400, content=json.dumps(error).encode(), headers={"content-type": "application/json"}
            )
        return replies.pop(0)

    session = SessionState(
        vin="LSVAU2180N2183294", series="EV-A", session_id="s", opened_at="2026-11-01T00:00:00Z",
        last_event_at="2026-11-01T00:00:00Z",
    )  # fmt: skip
    run = run_react(model(monkeypatch, handle), Toolbox(load_pack(), session), list(MESSAGES))
    assert MODEL_FAILED not in run.flags and run.error is None
    assert (run.flags, run.tool_calls, run.answer.codes) == ([], 4, ["P0A7F"])
    last = requests[-1]
    sent = [[c["id"] for c in m["tool_calls"]] for m in last if m.get("tool_calls")]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    # The first reply's turn is 1 (no assistant message before it), its calls 0, 1 and 2: the first has no id
    # (call01000), the second keeps "dup", the third repeats it (call01002). The second reply's turn is 2.
    assert sent == [["call01000", "dup", "call01002"], ["call02000"]]
    assert answered == ["call01000", "dup", "call01002", "call02000"]


@pytest.mark.parametrize(
    ("given", "earlier", "expected"),
    [
        (["a", "b"], [], ["a", "b"]),  # the server's own ids, unique: kept
        ([None, "", 7], [], ["call01000", "call01001", "call01002"]),  # none, empty, not a string
        (["x", "x", "x"], [], ["x", "call01001", "call01002"]),
        # An id a server gave that is one of ours: the next free number.
        ([None, "call01000"], [], ["call01000", "call01001"]),
        (["call01000", None], [], ["call01000", "call01001"]),
        # Two assistant messages before the reply (turn 3); "c1" was an earlier call's, "r1" a result's.
        (["c1", "r1", "new"], [("c1", None), (None, "r1")], ["call03000", "call03001", "new"]),
        # An id over 64 characters is taken as none: the transcript would cut it to another (a review).
        (["call01001", None, "x" * 65], [], ["call01001", "call01002", "call01003"]),
    ],
)
def test_our_ids_are_the_turn_and_index_and_unique_in_the_conversation(
    given: list[object], earlier: list[tuple[str | None, str | None]], expected: list[str]
) -> None:
    messages = list(MESSAGES)
    for call_id, result_id in earlier:
        calls = (ToolCall(call_id, "lookup_dtc", {}),) if call_id else ()
        messages.append(Message(role="assistant", tool_calls=calls))
        if result_id:
            messages.append(Message(role="tool", content="{}", tool_call_id=result_id))
    assert unique_call_ids(given, messages) == expected


def test_half_an_emoji_in_a_reply_is_a_broken_character_and_the_session_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lone surrogate escape (half an emoji, as a gateway that cuts text by UTF-16 units writes it) in the
    reply's prose, its answer or a tool call's arguments reached the session as it came, and the session's
    JSON failed in the operator: the job failed on the same alert at every restart (found by an audit). It is
    U+FFFD now, as in an event."""
    from datetime import UTC, datetime

    from tests.unit.test_engine import Harness, alert
    from vdoctor.diagnosis import DiagnosisEngine
    from vdoctor.embedders.hashing import HashingEmbedder
    from vdoctor.stores.memory import InMemoryStore

    half = "\ud83d"
    # (A cause that rules one out makes a key fact of it: read from the answer's prose, a review found.)
    answer = {"phase": "CONCLUDED", "root_cause": f"weak cell group {half}; ruled out: pump {half}",
              "fix_action": "balance the pack",
              "priority": "P2", "confidence": 0.8, "codes": ["P0A7F"], "evidence": ["dtc://P0A7F"]}  # fmt: skip
    arguments = json.dumps({"codes": ["P0A7F"], "why": half})
    looked_up = {"type": "function", "id": "c1", "function": {"name": "lookup_dtc", "arguments": arguments}}
    replies = [reply({"content": f"checking {half}", "tool_calls": [looked_up]}),
               reply({"content": f"done {half}\n" + json.dumps(answer)})]  # fmt: skip
    assert b"\\ud83d" in replies[0].content  # the escape as the server sends it
    chat = model(monkeypatch, lambda request: replies.pop(0))
    engine = DiagnosisEngine(store=InMemoryStore(), model=chat, embedder=HashingEmbedder(), pack=load_pack())
    h = Harness(engine)  # (it stores each session as its JSON, as the operator does)
    diagnosis = h.diagnose(alert("e-1", datetime(2026, 11, 1, 8, tzinfo=UTC), signals={"cell_voltage_diff_mv": 187}))
    assert diagnosis.root_cause == "weak cell group \ufffd; ruled out: pump \ufffd"
    assert "\ufffd" in h.state[diagnosis.vin][0]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "whole"),
    [
        (r"a \ud83d b", r"a \ufffd b"),  # half an emoji
        (r"\ud83d\ude00 ok", r"\ud83d\ude00 ok"),  # a whole one: kept
        (r"\ude00 x", r"\ufffd x"),  # a low half alone
        (r"\ud83d\ud83d\ude00", r"\ufffd\ud83d\ude00"),
        (r"\\ud83d", r"\\ud83d"),  # a backslash, then letters: kept (a review)
        (r"\\ud83d\ude00", r"\\ud83d\ufffd"),  # ... and the low half after them is alone
        (r"\u7535 plain", r"\u7535 plain"),
    ],
)
def test_escapes_of_half_a_character_are_written_as_u_fffd(text: str, whole: str) -> None:
    from vdoctor.events import whole_escapes

    assert whole_escapes(text) == whole
    json.loads(f'"{whole}"').encode()  # (decoded, it is text any writer takes)

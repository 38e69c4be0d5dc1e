"""The chat model's requests sent from a child process (``vdoctor.models.calls``), over real HTTP.

Errors, retries, timeouts and key scrubbing through the child are covered by
test_openai_model.py, which runs every test both ways. Here: what only the
child has (many calls on one pipe, a child that dies, the key kept off its
command line and environment, one child per endpoint).
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import SecretStr

from devtools.model_server import ModelServer, ServerConfig
from vdoctor.agent.tools import SPECS
from vdoctor.models.base import Message
from vdoctor.models.calls import SHARED, ChildPoster
from vdoctor.models.openai import OpenAIChatModel

pytestmark = pytest.mark.integration

KEY = "sk-test-child-5a4b3c2d1e"
ALERT = 'alert\n```json alert\n{"dtc_codes": ["U0140"]}\n```'
MESSAGES = [Message(role="system", content="diagnose"), Message(role="user", content=ALERT)]
REPLY = (
    b'{"model": "m", "choices": [{"message": {"content": "ok"}}], '
    b'"usage": {"prompt_tokens": 3, "completion_tokens": 1}}'
)


def child_model(url: str, sleeps: list[float] | None = None, timeout_s: float = 10.0) -> OpenAIChatModel:
    return OpenAIChatModel(
        "chat-test", SecretStr(KEY), url, timeout_s=timeout_s, max_attempts=3,
        sleep=(sleeps if sleeps is not None else []).append, rng=random.Random(3), child_process=True,
    )  # fmt: skip


class _Gate:
    """An endpoint that answers no request until ``n`` are waiting at once (or ``timeout_s`` passes: then 503)."""

    def __init__(self, n: int, timeout_s: float = 20.0) -> None:
        barrier = threading.Barrier(n, timeout=timeout_s)
        self.arrived = threading.Semaphore(0)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                gate.arrived.release()
                try:
                    barrier.wait()
                    status, body = 200, REPLY
                except threading.BrokenBarrierError:
                    status, body = 503, b'{"error": "the calls did not arrive together"}'
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except BrokenPipeError:
                    pass  # the caller's child was killed while the request waited

        gate = self
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(ServerConfig()) as srv:
        yield srv


def test_many_calls_are_in_flight_on_one_child_at_once() -> None:
    # The endpoint answers only once 16 requests wait together: calls taking turns on the pipe would never get there.
    gate = _Gate(16)
    model = child_model(gate.url)
    replies: list[str | None] = []
    try:
        threads = [threading.Thread(target=lambda: replies.append(model.chat(MESSAGES, []).content)) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert replies == ["ok"] * 16
        assert isinstance(model._poster, ChildPoster) and model._poster.starts == 1
    finally:
        model.close()
        gate.close()


def test_a_child_that_dies_fails_its_calls_in_flight_and_the_retry_runs_on_a_new_one() -> None:
    gate = _Gate(2, timeout_s=30.0)  # the first request waits at the endpoint until a second arrives
    sleeps: list[float] = []
    model = child_model(gate.url, sleeps)
    poster = model._poster
    assert isinstance(poster, ChildPoster)
    first_child = poster._proc
    assert first_child is not None
    result: list[str | None] = []
    try:
        caller = threading.Thread(target=lambda: result.append(model.chat(MESSAGES, []).content))
        caller.start()
        assert gate.arrived.acquire(timeout=30)  # the call is in flight, in the child
        os.kill(first_child.pid, signal.SIGKILL)
        # The call fails as a lost connection and is retried after its backoff, on a new child: the retry is
        # the second request the endpoint waits for, and it answers both (the first to no one).
        caller.join(timeout=30)
        assert result == ["ok"]
        assert len(sleeps) == 1 and poster.starts == 2 and first_child.poll() == -signal.SIGKILL
    finally:
        model.close()
        gate.close()


def test_the_key_is_neither_on_the_childs_command_line_nor_in_its_environment(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # as a deployment sets it
    model = child_model(server.base_url)
    try:
        assert model.chat(MESSAGES, SPECS).tool_calls  # the key reached the endpoint (it checks the header)
        proc = model._poster._proc  # type: ignore[union-attr]
        assert proc is not None
        for part in ("cmdline", "environ"):
            assert KEY.encode() not in Path(f"/proc/{proc.pid}/{part}").read_bytes()
    finally:
        model.close()


def test_models_of_one_endpoint_share_a_child_that_stops_with_the_last(server: ModelServer) -> None:
    chat, summary = child_model(server.base_url), child_model(server.base_url)
    other = child_model(server.base_url, timeout_s=3.0)  # another timeout: another client, another child
    assert chat._poster is summary._poster and other._poster is not chat._poster
    proc = chat._poster._proc  # type: ignore[union-attr]
    assert proc is not None
    chat.close()
    assert proc.poll() is None and summary.chat(MESSAGES, SPECS).tool_calls
    summary.close()
    assert proc.wait(timeout=10) == 0 and not [p for p, _ in SHARED._children.values() if p is chat._poster]
    other.close()


def test_a_wrong_endpoint_is_a_connection_failure_reported_without_the_key() -> None:
    model = child_model("http://127.0.0.1:9/v1")  # nothing listens on the discard port
    try:
        with pytest.raises(Exception, match="gave up after 3 attempts.*connection failed") as info:
            model.chat(MESSAGES, [])
        assert KEY not in str(info.value)
    finally:
        model.close()

"""A local OpenAI-compatible chat server for tests and benchmarks.

``POST /v1/chat/completions`` answers in OpenAI's wire format, tool calls
included. By default the decision is the offline model's (vdoctor.models.offline)
over the received messages, so a run through the real ``openai`` client reaches
the same diagnosis as the offline model, and a summary request (the summary
prompt, no tools) is answered by a deterministic summary writer of its own
(``summary_writer``); tests may pass any other responder.

Knobs: a fixed latency (plus jitter) per call; error injection by schedule
(the first requests fail in the given order) or by rate (seeded), with kinds
``429``, ``500``, ``timeout`` (the reply hangs past the client's timeout),
``malformed`` (HTTP 200 with a body that is not JSON) and ``400``; an optional
required API key (401 otherwise, echoing the presented key the way some
servers do, so tests can check that the client never repeats it).
``GET /stats`` returns request counts by outcome and the most chat calls that
were in flight at once (``peak_in_flight``).

Run it standalone::

    python -m devtools.model_server --port 0 --latency-ms 200
    # prints: model server listening on http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devtools.summary_writer import is_summary_request, summary_reply
from vdoctor.models.base import ChatResponse, Message, ToolCall, ToolSpec
from vdoctor.models.offline import OfflineModel

ERROR_KINDS = ("429", "500", "timeout", "malformed", "400")
# Enough queued connections for hundreds of runs in flight against one server.
LISTEN_BACKLOG = 512

Responder = Callable[[list[Message], list[ToolSpec]], ChatResponse]


@dataclass
class ServerConfig:
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    error_schedule: list[str] = field(default_factory=list)
    error_rates: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    timeout_hang_s: float = 30.0
    api_key: str | None = None

    def __post_init__(self) -> None:
        bad = [k for k in [*self.error_schedule, *self.error_rates] if k not in (*ERROR_KINDS, "ok")]
        if bad:
            raise ValueError(f"unknown error kinds {bad}; valid: {', '.join(ERROR_KINDS)}, ok")
        if sum(self.error_rates.values()) > 1.0 or any(r < 0 for r in self.error_rates.values()):
            raise ValueError("error rates must be >= 0 and sum to at most 1")


def offline_responder() -> Responder:
    """The offline model's decisions; a summary request gets the summary writer's answer instead."""
    model = OfflineModel()

    def respond(messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        if not tools and is_summary_request(messages):
            return summary_reply(messages)
        return model.chat(messages, tools)

    return respond


def from_wire(messages: list[dict[str, Any]]) -> list[Message]:
    out = []
    for m in messages:
        calls = tuple(
            ToolCall(id=c["id"], name=c["function"]["name"], arguments=json.loads(c["function"]["arguments"] or "{}"))
            for c in m.get("tool_calls") or []
        )
        content = m.get("content") or ""
        out.append(Message(role=m["role"], content=content, tool_calls=calls, tool_call_id=m.get("tool_call_id")))
    return out


def tools_from_wire(tools: list[dict[str, Any]]) -> list[ToolSpec]:
    return [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description", ""),
            parameters=t["function"].get("parameters", {}),
        )
        for t in tools
    ]


def completion_body(reply: ChatResponse, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:16]}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for c in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:20]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


class ModelServer:
    """The server, run on a background thread: ``start()`` returns its base URL."""

    def __init__(self, config: ServerConfig | None = None, responder: Responder | None = None) -> None:
        self.config = config or ServerConfig()
        self.responder = responder or offline_responder()
        self.stats: Counter[str] = Counter()
        # Chat calls being answered now, and the most at once so far (what a client's concurrency limit bounds).
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        self._rng = random.Random(self.config.seed)
        self._schedule = list(self.config.error_schedule)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the model server is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        handler = type("Handler", (_Handler,), {"server_ref": self})
        httpd = _HTTPServer((host, port), handler)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="model-server", daemon=True)
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_outcome(self) -> str:
        """What the next request gets: "ok" or an error kind."""
        with self._lock:
            self.stats["requests"] += 1
            if self._schedule:
                return self._schedule.pop(0)
            draw = self._rng.random()
            for kind, rate in self.config.error_rates.items():
                if draw < rate:
                    return kind
                draw -= rate
            return "ok"

    def count(self, outcome: str) -> None:
        with self._lock:
            self.stats[outcome] += 1

    def _call_started(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _call_ended(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def latency_s(self) -> float:
        with self._lock:
            jitter = self._rng.uniform(-self.config.jitter_ms, self.config.jitter_ms) if self.config.jitter_ms else 0.0
        return max(0.0, self.config.latency_ms + jitter) / 1000.0


class _HTTPServer(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True
    block_on_close = False


class _Handler(BaseHTTPRequestHandler):
    server_ref: ModelServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle's
    # algorithm and delayed ACKs add ~40 ms to every reply.
    disable_nagle_algorithm = True
    # A POST counted in ``in_flight`` and not yet ended (``_end_call``).
    _in_call = False

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return  # quiet: tests and benchmarks read stdout

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # The call ends here, before the body goes out: once the client has the whole reply it may send
            # its next call, which must not find this one still counted (``peak_in_flight`` counted 17 calls
            # of a 16-slot gate on a loaded machine when this thread ran its count after the write).
            self._end_call()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timed out, or its job was killed)

    def _error(self, status: int, message: str, kind: str) -> None:
        body = {"error": {"message": message, "type": kind, "code": str(status)}}
        self._send(status, json.dumps(body).encode())

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/").endswith("/stats"):
            server = self.server_ref
            with server._lock:
                body = dict(server.stats) | {"peak_in_flight": server.peak_in_flight}
            self._send(200, json.dumps(body).encode())
            return
        self._error(404, f"no route {self.path}", "not_found")

    def _end_call(self) -> None:
        if self._in_call:
            self._in_call = False
            self.server_ref._call_ended()

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.server_ref._call_started()
        self._in_call = True
        try:
            self._post()
        finally:
            self._end_call()

    def _post(self) -> None:
        # The latency is from the request's arrival to the reply: the work of
        # reading it and of composing the reply is inside it, not added to it.
        arrived = time.perf_counter()
        server = self.server_ref
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._error(404, f"no route {self.path}", "not_found")
            return
        presented = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if server.config.api_key is not None and presented != server.config.api_key:
            server.count("unauthorized")
            self._error(401, f"Incorrect API key provided: {presented}", "invalid_request_error")
            return
        try:
            request = json.loads(raw)
            messages = from_wire(request["messages"])
            tools = tools_from_wire(request.get("tools") or [])
            model = str(request["model"])
        except (ValueError, KeyError, TypeError) as e:
            server.count("bad_request")
            self._error(400, f"malformed request: {e}", "invalid_request_error")
            return
        outcome = server.next_outcome()
        reply = server.responder(messages, tools) if outcome == "ok" else None
        time.sleep(max(0.0, arrived + server.latency_s() - time.perf_counter()))
        server.count(outcome)
        if outcome == "429":
            self._error(429, "Rate limit reached (injected)", "rate_limit_exceeded")
        elif outcome == "500":
            self._error(500, "The server had an error (injected)", "server_error")
        elif outcome == "400":
            self._error(400, f"Bad request (injected); authorization was {presented}", "invalid_request_error")
        elif outcome == "malformed":
            self._send(200, b'{"id": "chatcmpl-broken", "choices": [')
        elif outcome == "timeout":
            time.sleep(server.config.timeout_hang_s)
            self._error(504, "hung (injected)", "timeout")  # the client gave up long ago
        elif reply is not None:
            self._send(200, json.dumps(completion_body(reply, model), ensure_ascii=False).encode())


def _rates(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        kind, _, rate = part.partition("=")
        out[kind.strip()] = float(rate)
    return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.model_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="time each reply takes")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="latency varies uniformly by +- this")
    parser.add_argument("--error-schedule", default="", help="comma list of outcomes for the first requests")
    parser.add_argument("--error-rates", default="", help="kind=rate,... e.g. 429=0.1,500=0.05,timeout=0.02")
    parser.add_argument("--timeout-hang-s", type=float, default=30.0, help="how long a 'timeout' reply hangs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--api-key-env", help="require the key held by this environment variable")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import os

    args = _parse_args(argv)
    try:
        config = ServerConfig(
            latency_ms=args.latency_ms,
            jitter_ms=args.jitter_ms,
            error_schedule=[k.strip() for k in args.error_schedule.split(",") if k.strip()],
            error_rates=_rates(args.error_rates),
            seed=args.seed,
            timeout_hang_s=args.timeout_hang_s,
            api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
        )
    except ValueError as e:
        print(f"model_server: {e}", file=sys.stderr)
        return 2
    server = ModelServer(config)
    url = server.start(args.host, args.port)
    print(f"model server listening on {url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

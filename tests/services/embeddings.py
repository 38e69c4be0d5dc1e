"""A local OpenAI-compatible ``POST /v1/embeddings`` server for tests of the real ``openai`` client.

Its vectors are a fixed, unnormalised function of the text, so expected
results are known and the client's normalisation is exercised. ``mode``
switches it to failures: ``error`` (HTTP 500) or ``short`` (one dimension less
than asked).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def fake_vector(text: str, dim: int) -> list[float]:
    """Unnormalised on purpose: [len(text), 1, 2, ..., dim - 1] (the client must normalise)."""
    return [float(len(text))] + [float(i) for i in range(1, dim)]


def text_vector(text: str, dim: int) -> list[float]:
    """Unnormalised and different for different texts: dim numbers drawn from the text's hash."""
    digest = b""
    counter = 0
    while len(digest) < 2 * dim:
        digest += hashlib.blake2b(f"{counter}:{text}".encode(), digest_size=64).digest()
        counter += 1
    return [float(int.from_bytes(digest[2 * i : 2 * i + 2], "little")) - 32768.0 for i in range(dim)]


class Server(ThreadingHTTPServer):
    requests: list[dict[str, Any]]
    headers_seen: list[dict[str, str]]
    mode: str
    api_key: str
    vector: Any

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, **body})
        self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        mode = self.server.mode
        if mode == "error":
            self._send(500, {"error": {"message": "backend exploded", "type": "server_error"}})
            return
        if self.path != "/v1/embeddings" or self.headers.get("Authorization") != f"Bearer {self.server.api_key}":
            self._send(401, {"error": {"message": "bad key or path", "type": "auth"}})
            return
        dim = int(body.get("dimensions", 8))
        if mode == "short":
            dim -= 1
        inputs = body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": self.server.vector(t, dim)}
            for i, t in reversed(list(enumerate(inputs)))
        ]
        # What some servers get wrong: an error object in a 200, an index given twice or not at all, a zero vector.
        if mode == "error-in-200":
            self._send(200, {"error": {"message": "model is loading", "type": "server_error"}})
            return
        if mode == "same-index":
            data = [{**item, "index": 0} for item in data]
        elif mode == "no-index":
            data = [{k: v for k, v in item.items() if k != "index"} for item in data]
        elif mode == "zeros":
            data = [{**item, "embedding": [0.0] * dim} for item in data]
        self._send(
            200,
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}},
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@contextmanager
def embeddings_server(api_key: str, vector: Any = fake_vector) -> Iterator[Server]:
    """A running server on a free port; ``vector(text, dim)`` makes its embeddings."""
    srv = Server(("127.0.0.1", 0), Handler)
    srv.requests, srv.headers_seen, srv.mode, srv.api_key, srv.vector = [], [], "ok", api_key, vector
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join()

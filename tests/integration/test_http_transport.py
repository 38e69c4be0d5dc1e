"""StdlibTransport under the real ``openai`` client, against a real HTTP/1.1 server on a local port.

The server is the standard library's threading HTTP server (keep-alive on),
which records the client port of every request and every connection it sees
closed, so that the tests can see which connection each call used.
"""

from __future__ import annotations

import gc
import gzip
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from pydantic import SecretStr

from vdoctor.http_transport import StdlibTransport
from vdoctor.models.openai import OpenAIChatModel
from vdoctor.openai_clients import http_client

pytestmark = pytest.mark.integration

KEY = "sk-transport-test-1234"
REPLY = {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "usage": {"prompt_tokens": 3}}


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ports: list[int] = []
        self.closed: list[int] = []
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    recorder: Recorder

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return None

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.recorder.lock:
            self.recorder.ports.append(self.client_address[1])
            self.recorder.bodies.append(body)
            self.recorder.headers.append({k.lower(): v for k, v in self.headers.items()})
        mode = body.get("mode", "ok")
        if mode == "garbage":
            self.wfile.write(b"NOT HTTP AT ALL\r\n\r\n")
            self.close_connection = True
            return
        if mode == "slow":
            time.sleep(1.5)
        payload = json.dumps({**REPLY, "echo": body.get("echo")}).encode()
        self.send_response(int(body.get("status", 200)))
        self.send_header("Content-Type", "application/json")
        if mode == "utf8-header":  # as a gateway names its model (sent as the UTF-8 bytes)
            self._headers_buffer.append("X-Gateway-Model: 通义千问\r\n".encode())  # type: ignore[attr-defined]
        if mode == "cut":  # the body cut short of its announced length, the connection closed
            self.send_header("Content-Length", str(len(payload) + 40))
            self.end_headers()
            self.wfile.write(payload)
            self.close_connection = True
            return
        if mode == "trickle":  # each byte in time for a socket read's timeout, the whole far past the call's
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            for i in range(0, len(payload), 8):
                self.wfile.write(payload[i : i + 8])
                self.wfile.flush()
                time.sleep(0.5)
            return
        if mode == "gzip":
            payload = gzip.compress(payload)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        if mode == "drop-after":  # keep-alive promised, then the socket goes, as an idle timeout does
            self.close_connection = True

    def finish(self) -> None:
        super().finish()
        with self.recorder.lock:
            self.recorder.closed.append(self.client_address[1])


class Server:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.recorder = Recorder()
        handler = type("BoundHandler", (Handler,), {"recorder": self.recorder})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.base_url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.stop()


def client(url: str, transport: StdlibTransport, timeout_s: float = 5.0) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=KEY, base_url=url, max_retries=0, timeout=timeout_s,
        http_client=openai.DefaultHttpxClient(transport=transport),
    )  # fmt: skip


def post(c: openai.OpenAI, **body: Any) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(c.post("/chat/completions", cast_to=str, body={"model": "m", **body}))
    return reply


def wait_for(check: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return bool(check())


def test_calls_go_over_one_kept_alive_connection_per_thread(server: Server) -> None:
    transport = StdlibTransport()
    c = client(server.base_url, transport)
    replies: list[Any] = []

    def calls(thread: int) -> None:
        for k in range(3):
            replies.append(post(c, echo=f"{thread}-{k}")["echo"])

    threads = [threading.Thread(target=calls, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(replies) == sorted(f"{t}-{k}" for t in range(4) for k in range(3))
    ports = server.recorder.ports
    assert len(ports) == 12 and len(set(ports)) == 4, ports  # 4 connections, each used 3 times
    # The openai client's own request: path, auth, JSON body.
    headers = server.recorder.headers[0]
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["content-type"] == "application/json"
    assert headers["host"] == server.base_url.split("/")[2]
    assert server.recorder.bodies[0]["model"] == "m"
    c.close()


def test_a_thread_that_ends_closes_its_connection_and_close_closes_the_rest(server: Server) -> None:
    transport = StdlibTransport()
    c = client(server.base_url, transport)
    post(c)  # this thread's connection
    worker = threading.Thread(target=post, args=(c,))
    worker.start()
    worker.join()
    worker_port = server.recorder.ports[-1]
    del worker
    gc.collect()
    assert wait_for(lambda: worker_port in server.recorder.closed)
    assert server.recorder.ports[0] not in server.recorder.closed
    c.close()
    assert wait_for(lambda: server.recorder.ports[0] in server.recorder.closed)


def test_a_connection_the_server_dropped_while_idle_is_replaced_without_an_error(server: Server) -> None:
    c = client(server.base_url, StdlibTransport())
    post(c, mode="drop-after")
    assert wait_for(lambda: len(server.recorder.closed) == 1)
    assert post(c, echo="again")["echo"] == "again"
    first, second = server.recorder.ports
    assert first != second
    c.close()


def test_gzip_replies_are_decoded(server: Server) -> None:
    c = client(server.base_url, StdlibTransport())
    assert post(c, mode="gzip", echo="zipped")["echo"] == "zipped"
    c.close()


def test_status_errors_reach_the_openai_client_as_status_errors(server: Server) -> None:
    c = client(server.base_url, StdlibTransport())
    with pytest.raises(openai.RateLimitError):
        post(c, status=429)
    with pytest.raises(openai.InternalServerError):
        post(c, status=503)
    assert post(c, echo="after")["echo"] == "after"  # the connection is still good
    assert len(set(server.recorder.ports)) == 1
    c.close()


def test_a_slow_reply_times_out_and_the_next_call_uses_a_new_connection(server: Server) -> None:
    c = client(server.base_url, StdlibTransport(), timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        post(c, mode="slow")
    assert time.monotonic() - started < 1.2
    assert post(c, echo="fast")["echo"] == "fast"
    assert len(set(server.recorder.ports)) == 2
    c.close()


def test_a_reply_that_is_not_http_is_a_connection_error(server: Server) -> None:
    c = client(server.base_url, StdlibTransport())
    with pytest.raises(openai.APIConnectionError) as info:
        post(c, mode="garbage")
    assert not isinstance(info.value, openai.APITimeoutError)
    assert post(c, echo="fine")["echo"] == "fine"
    c.close()


def test_nothing_listening_is_a_connection_error() -> None:
    srv = Server()
    url = srv.base_url
    srv.stop()
    c = client(url, StdlibTransport())
    with pytest.raises(openai.APIConnectionError):
        post(c)
    c.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_https_verifies_the_server_certificate(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    srv = Server(tls)
    try:
        trusted = client(srv.base_url, StdlibTransport(ssl.create_default_context(cafile=str(cert))))
        assert post(trusted, echo="tls")["echo"] == "tls"
        assert post(trusted, echo="tls2")["echo"] == "tls2"
        assert len(set(srv.recorder.ports)) == 1
        trusted.close()
        # The default context (the system's certificates, as the client's own) does not know a self-signed one.
        default = client(srv.base_url, StdlibTransport())
        with pytest.raises(openai.APIConnectionError):
            post(default)
        default.close()
    finally:
        srv.stop()


def test_the_models_use_the_transport_unless_the_environment_names_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    direct = http_client(5.0)
    assert direct is not None and isinstance(direct._transport, StdlibTransport)
    direct.close()
    model = OpenAIChatModel("m", SecretStr(KEY), "http://127.0.0.1:9/v1")
    assert isinstance(model._client()._client._transport, StdlibTransport)
    model.close()
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert http_client(5.0) is None
    proxied = OpenAIChatModel("m", SecretStr(KEY), "https://api.example.invalid/v1")
    client = proxied._client()._client  # the openai client's own default: it routes through the proxy
    assert not isinstance(client._transport, StdlibTransport)
    assert client._mounts
    proxied.close()


def test_a_header_in_utf8_is_handed_on_as_its_bytes(server: Server) -> None:
    """A gateway's header in UTF-8 failed every call with a UnicodeEncodeError the client neither maps nor
    retries: each alert a dead letter (found by an audit)."""
    with StdlibTransport() as transport:
        assert post(client(server.base_url, transport), mode="utf8-header")["choices"][0]["message"]["content"] == "ok"
        with httpx2.Client(transport=transport) as plain:
            reply = plain.post(server.base_url + "/chat/completions", json={"model": "m", "mode": "utf8-header"})
        assert (b"X-Gateway-Model", "通义千问".encode()) in reply.headers.raw


def test_a_reply_trickled_past_the_calls_timeout_is_given_up(server: Server) -> None:
    """Eight bytes every 0.5 s, each read within a 1 s timeout: the call went on as long as the server
    liked (the audit's: 30 s at a timeout of 2). Now the whole exchange is held to the timeout too."""
    with StdlibTransport() as transport:
        c = client(server.base_url, transport, timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            post(c, mode="trickle")
        # Cut at 1 s (plus the last read's wait), where the whole reply takes over 7 s: a wide margin for a busy host.
        assert time.monotonic() - started < 4.0
        assert post(c)["choices"][0]["message"]["content"] == "ok"  # a new connection serves the next call


def test_a_reply_cut_short_of_its_length_is_an_error(server: Server) -> None:
    """Read piece by piece, a body cut before its Content-Length came back as a short 200 (found by a diff
    review): it is a protocol error, as it was, which the model retries as a dropped connection."""
    with StdlibTransport() as transport:
        with pytest.raises(openai.APIConnectionError):
            post(client(server.base_url, transport), mode="cut")

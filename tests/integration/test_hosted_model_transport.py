"""StdlibTransport holds a reply's status line and headers to the call's timeout, as it does its body.

The wire matters here, so the server is a real one on a local port (the standard library's, in a thread
of the test): it sends its status line and headers a byte at a time, each well within a socket read's
timeout, the whole far past the call's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest

from vdoctor.http_transport import StdlibTransport

pytestmark = pytest.mark.integration

# The call's timeout, and the server's pace: a byte of its head every STEP_S, a tenth of the timeout, so
# each socket read gets one in time, and the head's 104 bytes take 5.2 s, ten times the timeout.
TIMEOUT_S = 0.5
STEP_S = 0.05
BODY = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode()
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nX-Padding: %s\r\n\r\n" % (
    len(BODY),
    b"x" * 20,
)


class TricklingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    head_sent: threading.Event  # set on the class the server is given
    stop: threading.Event

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return None

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        self.rfile.read(int(self.headers["Content-Length"]))
        try:
            for i in range(len(HEAD)):
                if self.stop.wait(STEP_S):
                    return
                self.wfile.write(HEAD[i : i + 1])
                self.wfile.flush()
            self.head_sent.set()
            self.wfile.write(BODY)
        except OSError:  # the client gave up and closed the connection
            return
        self.close_connection = True


@pytest.fixture
def trickling() -> Iterator[tuple[str, threading.Event]]:
    """The server's base URL, and the event it sets once it has sent a whole head."""
    head_sent, stop = threading.Event(), threading.Event()
    handler = type("Bound", (TricklingHandler,), {"head_sent": head_sent, "stop": stop})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", head_sent
    stop.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_headers_trickled_past_the_calls_timeout_are_given_up(trickling: tuple[str, threading.Event]) -> None:
    """Each header byte came within a socket read's timeout, so the call went on for as long as the server
    took to send them (only the body was held to the call's timeout). Given up mid-head now."""
    url, head_sent = trickling
    with StdlibTransport() as transport:
        client = openai.OpenAI(
            api_key="sk-unit-transport", base_url=url, max_retries=0, timeout=TIMEOUT_S,
            http_client=openai.DefaultHttpxClient(transport=transport),
        )  # fmt: skip
        with pytest.raises(openai.APITimeoutError):
            client.post("/chat/completions", cast_to=str, body={"model": "m"})
        client.close()
    assert not head_sent.is_set()  # the call gave up before the server had sent its whole head

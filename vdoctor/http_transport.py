"""An HTTP/1.1 transport for the ``openai`` client on the standard library's ``http.client``.

The ``openai`` client sends through ``httpx2``, whose default transport
(``httpcore2`` over ``h11``, in pure Python) costs about 1.3 ms of CPU per
chat call here, against about 0.4 ms for ``http.client`` (its header parsing
and socket reads are in C). The diagnosis operator's runs share one
interpreter, so that CPU is taken from every other run in flight.
``StdlibTransport`` plugs in where ``httpx2`` documents custom transports
(``httpx2.Client(transport=...)``): the ``openai`` client still builds the
request (URL, auth, headers, timeouts) and maps errors and status codes, and
only the bytes on the wire go through ``http.client``.

- One kept-alive connection per calling thread and origin: the operator's
  worker threads each make one call at a time, so a connection is never shared.
- Timeouts come from the request (``openai`` sets them per call): ``connect``
  while connecting, ``read`` for every later socket operation, and for the
  whole reply as well: a server that trickles its status line, headers or body
  (a byte a second under a timeout of two) is given up once ``read`` has
  passed since the request was sent, each socket read of the reply given what
  is left of it (``httpx2``'s default transport, as this one before, waited as
  long as each byte came in time).
- Response headers are handed on as the bytes the server sent: a gateway's
  header in UTF-8 (``X-Gateway-Model: 通义千问``) failed every call with a
  ``UnicodeEncodeError`` the client neither maps nor retries.
- A connection the server closed while it was idle fails on its next use
  before any reply; that request is sent once more on a new connection,
  without the backoff the chat model's own retry of a dropped connection
  would wait. Any other failure is raised as the ``httpx2`` error the
  ``openai`` client maps to ``APITimeoutError`` or ``APIConnectionError``.
- HTTPS uses ``httpx2``'s own default TLS context (the system's certificates,
  or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), built once per transport.
- Proxies: ``httpx2`` honours the environment's only without a custom
  transport, so ``openai_clients.http_client`` keeps the client's own
  transport when a proxy is set.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import threading
import time
import weakref
from typing import Any

import httpx2

# Errors of a kept-alive connection the server has closed, seen before any reply.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class _ReadsWithin(io.RawIOBase):
    """The socket's reads, each given what is left until ``deadline``; a ``TimeoutError`` once it has passed
    (the caller's ``ReadTimeout``)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # the socket's own reader, counted among its open files
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the reply took longer than the call's timeout to arrive")
        self._sock.settimeout(left)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _ReplyWithin(http.client.HTTPResponse):
    """A reply read within the socket's timeout as a whole, from when it is begun (the request sent): every
    read of it, its status line and headers as its body, is given only what is left of that time.

    ``http.client`` reads the status line and headers itself, each socket read within the timeout: a server
    that sent them a byte at a time, each in time, held the call for as long as it liked."""

    def __init__(
        self, sock: socket.socket, debuglevel: int = 0, method: str | None = None, url: str | None = None
    ) -> None:
        super().__init__(sock, debuglevel, method, url)
        timeout = sock.gettimeout()
        if timeout is not None:
            self.fp.close()  # the plain reader ``http.client`` made, in favour of one held to the time
            self.fp = io.BufferedReader(_ReadsWithin(sock, time.monotonic() + timeout))


class _Stale(Exception):
    """A kept-alive connection turned out closed by the server (``error``: how)."""

    def __init__(self, error: OSError | http.client.HTTPException) -> None:
        super().__init__(repr(error))
        self.error = error


def _timeouts(request: httpx2.Request) -> tuple[float | None, float | None]:
    """(connect, read) seconds from the request's ``timeout`` extension (None: wait for ever)."""
    timeout: dict[str, Any] = request.extensions.get("timeout") or {}
    connect, read = timeout.get("connect"), timeout.get("read")
    write = timeout.get("write")
    if read is not None and write is not None:
        read = max(read, write)
    return connect, read


_Origin = tuple[bytes, bytes, int | None]


class _Pool:
    """One thread's connections, by origin (an object, so that the transport can hold it weakly)."""

    def __init__(self) -> None:
        self.conns: dict[_Origin, http.client.HTTPConnection] = {}

    def close(self) -> None:
        conns = list(self.conns.values())
        self.conns.clear()
        for conn in conns:
            conn.close()


class StdlibTransport(httpx2.BaseTransport):
    """``httpx2`` transport sending each request over a per-thread ``http.client`` connection."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self._local = threading.local()
        self._lock = threading.Lock()
        # Every thread's pool, for close(); a pool goes (its connections closed) when its thread does.
        self._pools: weakref.WeakSet[_Pool] = weakref.WeakSet()
        self._closed = False

    def _context(self) -> ssl.SSLContext:
        with self._lock:
            if self._ssl_context is None:
                self._ssl_context = httpx2.create_ssl_context()
            return self._ssl_context

    def _pool(self) -> _Pool:
        pool: _Pool | None = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = _Pool()
            weakref.finalize(threading.current_thread(), pool.close)
            with self._lock:
                self._pools.add(pool)
        return pool

    def _open(self, request: httpx2.Request, connect: float | None) -> http.client.HTTPConnection:
        url = request.url
        scheme, host, port = url.raw_scheme, url.host, url.port
        if scheme == b"https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=connect, context=self._context()
            )
        elif scheme == b"http":
            conn = http.client.HTTPConnection(host, port, timeout=connect)
        else:
            raise httpx2.UnsupportedProtocol(f"unsupported URL scheme {scheme.decode(errors='replace')!r}")
        conn.response_class = _ReplyWithin
        try:
            conn.connect()
        except TimeoutError as e:
            conn.close()
            raise httpx2.ConnectTimeout(f"connecting to {host}:{port}: {e}", request=request) from e
        except OSError as e:
            conn.close()
            raise httpx2.ConnectError(f"connecting to {host}:{port}: {e}", request=request) from e
        return conn

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._closed:
            raise httpx2.ConnectError("the transport is closed", request=request)
        url = request.url
        key = (url.raw_scheme, url.raw_host, url.port)
        connect, read = _timeouts(request)
        pool = self._pool().conns
        conn = pool.get(key)
        if conn is not None:
            try:
                return self._exchange(request, read, pool, key, conn)
            except _Stale:
                pass  # the server closed it while it was idle: once more, on a new connection
        conn = pool[key] = self._open(request, connect)
        try:
            return self._exchange(request, read, pool, key, conn)
        except _Stale as e:
            raise httpx2.ReadError(f"connection lost: {e.error!r}", request=request) from e.error

    @staticmethod
    def _exchange(
        request: httpx2.Request,
        read: float | None,
        pool: dict[_Origin, http.client.HTTPConnection],
        key: _Origin,
        conn: http.client.HTTPConnection,
    ) -> httpx2.Response:
        """One request and its whole reply on ``conn`` (``pool[key]``), dropped from the pool on any failure."""

        def drop() -> None:
            pool.pop(key, None)
            conn.close()

        try:
            if conn.sock is not None:
                conn.sock.settimeout(read)
            conn.putrequest(
                request.method, request.url.raw_path.decode("ascii"), skip_host=True, skip_accept_encoding=True
            )
            for name, value in request.headers.raw:
                conn.putheader(name, value)
            conn.endheaders(request.read())
            reply = conn.getresponse()  # a ``_ReplyWithin``, held to ``read`` as a whole
            content = reply.read()
        except _STALE as e:
            drop()
            raise _Stale(e) from e
        except TimeoutError as e:
            drop()
            raise httpx2.ReadTimeout(f"timed out after {read} s: {e}", request=request) from e
        except http.client.HTTPException as e:
            drop()
            raise httpx2.RemoteProtocolError(f"bad reply: {e!r}", request=request) from e
        except OSError as e:
            drop()
            raise httpx2.ReadError(f"connection failed: {e!r}", request=request) from e
        if reply.will_close:
            drop()
        return httpx2.Response(
            status_code=reply.status,
            # As the bytes on the wire: ``http.client`` reads them as Latin-1, and ``httpx2`` would encode text as
            # ASCII.
            headers=[(name.encode("latin-1"), value.encode("latin-1")) for name, value in reply.getheaders()],
            stream=httpx2.ByteStream(content),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reply.reason.encode("latin-1")},
            request=request,
        )

    def close(self) -> None:
        self._closed = True
        with self._lock:
            pools = list(self._pools)
        for pool in pools:
            pool.close()

    def __del__(self) -> None:  # as the openai client's own HTTP client does: no socket outlives its transport
        self.close()

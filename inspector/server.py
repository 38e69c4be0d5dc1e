"""Run the inspector with uvicorn, its logs (uvicorn's included) scrubbed of secrets.

uvicorn's own access log is off: it writes the query string, where a browser's
first visit carries the token. ``app.AccessLog`` writes method, path, status.
The address is bound before it is announced, and uvicorn serves the bound sockets.
"""

from __future__ import annotations

import errno
import logging
import socket
import sys

import uvicorn
from pydantic import SecretStr

from inspector.app import create_app
from inspector.security import Scrubber
from inspector.views import Inspector
from vdoctor.errors import ConfigError


class ScrubbingFormatter(logging.Formatter):
    """Every formatted record, traceback included, with the secrets replaced by ``***``."""

    def __init__(self, scrub: Scrubber) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.scrub = scrub

    def format(self, record: logging.LogRecord) -> str:
        return self.scrub(super().format(record))


def configure_logging(scrub: Scrubber) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ScrubbingFormatter(scrub))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address ``host`` resolves to, as uvicorn would bind them (asyncio's
    ``create_server``: SO_REUSEADDR, an IPv6 socket IPv6 only), not yet listening.

    An address that cannot be bound (a port another process holds) is a ``ConfigError`` naming host and
    port, raised before the inspector announces where it serves: it logged its address, then uvicorn's
    error, and exited 3.
    """
    where = f"{'[' + host + ']' if ':' in host else host}:{port}"
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(f"cannot listen on {where}: {e.strerror}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:
                # A family this host has no sockets of (IPv6 off, and localhost still ::1 in /etc/hosts): skipped,
                # as asyncio's create_server skips it (a review).
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as e:
        for sock in sockets:
            sock.close()
        held = " (another process holds the port: give another --port)" if e.errno == errno.EADDRINUSE else ""
        raise ConfigError(f"cannot listen on {where}: {e.strerror or e}{held}") from None
    if not sockets:
        raise ConfigError(f"cannot listen on {where}: no address of it can be bound on this host")
    return sockets


def serve(ins: Inspector, host: str, port: int, token: SecretStr | None, local: bool, scrub: Scrubber) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM); an address it cannot bind is a ``ConfigError`` (``listen``)."""
    sockets = listen(host, port)
    try:
        configure_logging(scrub)
        app = create_app(ins, token, local, scrub)
        where = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
        logging.getLogger("inspector").info(
            "memory inspector on %s over %s (read-only)%s", where, ins.memory, "; token required" if token else ""
        )
        config = uvicorn.Config(
            app, host=host, port=port, access_log=False, log_config=None, server_header=False, lifespan="off"
        )
        uvicorn.Server(config).run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()

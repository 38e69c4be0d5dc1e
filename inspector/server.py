"""Run the inspector with uvicorn, its logs (uvicorn's included) scrubbed of secrets.

uvicorn's own access log is off: it writes the query string, where a browser's
first visit carries the token. ``app.AccessLog`` writes method, path, status.
"""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import SecretStr

from inspector.app import create_app
from inspector.security import Scrubber
from inspector.views import Inspector


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


def serve(ins: Inspector, host: str, port: int, token: SecretStr | None, local: bool, scrub: Scrubber) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM)."""
    configure_logging(scrub)
    app = create_app(ins, token, local, scrub)
    where = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
    logging.getLogger("inspector").info(
        "memory inspector on %s over %s (read-only)%s", where, ins.memory, "; token required" if token else ""
    )
    config = uvicorn.Config(
        app, host=host, port=port, access_log=False, log_config=None, server_header=False, lifespan="off"
    )
    uvicorn.Server(config).run()

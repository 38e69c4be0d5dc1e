"""Python logging inside the Flink operators.

In thread mode PyFlink's embedded interpreter (pemja) sets the root logger to
DEBUG and hands every record to the JVM's log4j through JNI, where anything
below INFO is dropped. The HTTP stack under the ``openai`` client writes
several DEBUG records per request, so at a few hundred model calls per second
the operator's workers spent about half their time queueing on that handler's
lock to produce records nobody sees. The operators set the level they want
before any work starts.
"""

from __future__ import annotations

import logging

# Loggers that write a record per request or per connection event at DEBUG.
CHATTY = ("httpx", "httpcore", "httpx2", "httpcore2", "openai", "urllib3", "pymysql", "kafka")


def configure(level: str) -> None:
    """Root logger at ``level``; the HTTP client stacks at WARNING unless ``level`` is DEBUG."""
    logging.getLogger().setLevel(level)
    chatty_level = logging.DEBUG if level == "DEBUG" else logging.WARNING
    for name in CHATTY:
        logging.getLogger(name).setLevel(chatty_level)

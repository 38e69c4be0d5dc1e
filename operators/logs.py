"""Python logging inside the Flink operators.

In thread mode PyFlink's embedded interpreter (pemja) sets the root logger to
DEBUG and hands every record to the JVM's log4j through JNI, where anything
below INFO is dropped. The HTTP stack under the ``openai`` client writes
several DEBUG records per request, so at a few hundred model calls per second
the operator's workers spent about half their time queueing on that handler's
lock to produce records nobody sees. The operators set the level they want
before any work starts, and mask the job's secrets in every record the root
logger's handlers write (``vdoctor.scrub``): at DEBUG the HTTP client logs each
request's URL, with the endpoint's password when its URL holds one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from vdoctor.scrub import Scrubber, scrub_root_handlers

# Loggers that write a record per request or per connection event at DEBUG.
CHATTY = ("httpx", "httpcore", "httpx2", "httpcore2", "openai", "urllib3", "pymysql", "kafka")


def configure(level: str, secrets: Iterable[str | None] = ()) -> None:
    """Root logger at ``level``; the HTTP client stacks at WARNING unless ``level`` is DEBUG; ``secrets``
    (``vdoctor.scrub.settings_secrets``) masked in every record the root logger's handlers write."""
    logging.getLogger().setLevel(level)
    scrub_root_handlers(Scrubber(secrets))
    chatty_level = logging.DEBUG if level == "DEBUG" else logging.WARNING
    for name in CHATTY:
        logging.getLogger(name).setLevel(chatty_level)

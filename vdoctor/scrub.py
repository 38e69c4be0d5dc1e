"""Secrets kept out of text: ``Scrubber`` replaces each one in any text, ``ScrubbingFilter`` in every log record
a handler writes.

The HTTP client under the ``openai`` package logs each request with its URL at INFO, password and all when the
endpoint's URL holds one (``OPENAI_BASE_URL=https://user:password@gateway/v1``). The job's workers keep those
loggers at WARNING unless ``VDOCTOR_LOG_LEVEL`` is DEBUG, and the inspector logs at INFO, so the records that
carry a secret are scrubbed where they are written rather than trusted to stay below the level.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import quote, urlencode

from vdoctor.settings import Settings
from vdoctor.url_credentials import split_url, url_password

MASK = "***"
# What an HTTP client (httpx, and httpx2 under the ``openai`` package) leaves unescaped in a URL's user and
# password when it writes the URL, as in its request log: printable ASCII but the WHATWG userinfo
# percent-encode set. ``a+b c;d`` is written ``a+b%20c%3Bd``, which neither ``quote`` nor form-encoding gives.
_USERINFO_KEPT = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in '"#<>?`{}/;=@[\\]^|')


class Scrubber:
    """Replaces each secret (as given and URL-quoted) by ``***`` in any text."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        found = {s for s in secrets if s}
        # Also as a URL writes it: form-encoded (a space as +) and percent-encoded (a space as %20).
        found |= {quoted for s in list(found) if (quoted := urlencode({"": s})[1:]) != s}
        found |= {quoted for s in list(found) if (quoted := quote(s, safe="")) != s}
        found |= {quoted for s in list(found) if (quoted := quote(s, safe=_USERINFO_KEPT)) != s}
        # Longest first, so a secret that contains another is replaced whole.
        self.secrets = sorted(found, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text


def settings_secrets(settings: Settings) -> list[str | None]:
    """What of ``settings`` must never be shown: the API key and the password of each URL that may hold one
    (long-term memory, knowledge, the model endpoint)."""
    key = settings.api_key()
    urls = [url for url in (settings.memory.url, settings.memory.knowledge_url, settings.endpoint.base_url) if url]
    # Each password also as its URL writes it (``p%2fss``, percent-encoding in any case): an HTTP client logs the
    # URL as given.
    written = [split.written_password for url in urls if (split := split_url(url)) is not None]
    return [key.get_secret_value() if key else None, *map(url_password, urls), *written]


class ScrubbingFilter(logging.Filter):
    """A handler's filter that writes every record's message, and its traceback, with the secrets masked."""

    def __init__(self, scrub: Scrubber) -> None:
        super().__init__()
        self.scrub = scrub

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call: the handler reports it as logging does
            return True
        if (scrubbed := self.scrub(message)) != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info:
            # A handler may format the exception itself (PyFlink's thread mode sends ``exc_info`` to the JVM as
            # its trace): one that holds a secret travels as scrubbed text in its place.
            text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            if (scrubbed := self.scrub(text)) != text:
                record.exc_info, record.exc_text = None, scrubbed
        return True


def scrub_root_handlers(scrub: Scrubber) -> None:
    """Put ``scrub`` on every handler of the root logger (each record any logger propagates there passes
    them), in place of a ``ScrubbingFilter`` put there before; none when there is no secret to mask."""
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, ScrubbingFilter)]:
            handler.removeFilter(old)
        if scrub:
            handler.addFilter(ScrubbingFilter(scrub))

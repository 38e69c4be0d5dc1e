"""What stands between the fleet's memory and the network, and what keeps secrets out of sight.

- ``ReadOnlyMethods``: only GET and HEAD are answered (405 for any other
  method, on every path): the inspector never writes, and offers nothing a
  request could change.
- ``TokenGuard``: when the server has a token (required on any address but
  loopback), every request must carry it: the ``Authorization: Bearer <token>``
  header (scripts), or the ``vdoctor_token`` cookie (browsers). A browser
  gets the cookie by opening any page once with ``?token=<token>``: the
  answer is a redirect to the same page without it, setting the cookie
  (HttpOnly, SameSite=Strict), so the token does not stay in the address
  bar, the history, or a Referer. Anything else is a 401.
- ``LocalHostOnly``: bound to loopback, requests must name a loopback host
  (a web page elsewhere cannot reach the inspector through DNS rebinding).
- ``SecurityHeaders``: no scripts, no framing, no referrer, no caching.
- ``Scrubber``: the token, the URLs' passwords and the model API key are
  replaced by ``***`` in anything logged or shown (errors included);
  ``redact_url`` shows a memory URL without its password.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from pydantic import SecretStr

from vdoctor import url_credentials
from vdoctor.scrub import Scrubber as Scrubber  # (the inspector's, from here)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_COOKIE = "vdoctor_token"
TOKEN_PARAM = "token"
READ_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
     b"frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]  # fmt: skip


async def _answer(send: Send, status: int, body: str, headers: list[tuple[bytes, bytes]], json_body: bool) -> None:
    data = json.dumps({"error": body}).encode() if json_body else body.encode()
    kind = b"application/json" if json_body else b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", kind), (b"content-length", str(len(data)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _is_api(scope: Scope) -> bool:
    return str(scope.get("path", "")).startswith("/api/")


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


class ReadOnlyMethods:
    """405 for every method but GET and HEAD, before anything but the access log sees the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in READ_METHODS:
            allow = [(b"allow", b"GET, HEAD")]
            await _answer(send, 405, "the memory inspector is read-only: GET and HEAD only", allow, _is_api(scope))
            return
        await self.app(scope, receive, send)


class LocalHostOnly:
    """Bound to loopback: the Host header must name a loopback host too (no DNS rebinding)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = urlsplit("//" + _headers(scope).get("host", "")).hostname or ""
            if not is_loopback_host(host):
                await _answer(send, 421, "this inspector answers to localhost only", [], _is_api(scope))
                return
        await self.app(scope, receive, send)


def is_loopback_host(host: str) -> bool:
    """Whether a Host header's name is a loopback one: ``localhost``, or an address of the loopback range
    (``127.0.0.1``, ``127.1.2.3``, ``::1``, and IPv6's form of an IPv4 one, ``::ffff:127.0.0.1``), each
    also written fully qualified, with one trailing dot (``localhost.``). A name that only starts like one
    (``127.attacker.example``) passed as "127.": a DNS-rebinding page under such a name read every page;
    ``localhost.`` and ``[::ffff:127.0.0.1]``, loopback both, were refused (both found by an audit)."""
    name = host.lower()
    name = name[:-1] if name.endswith(".") else name  # the fully qualified form names the same host
    if name in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _query(scope: Scope) -> list[tuple[str, str]]:
    """The query's pairs, percent-decoded without reading "+" as a blank: a token may hold "+" (base64's),
    which a form's decoding made a blank, and the browser login failed (found by an audit)."""
    raw = scope.get("query_string", b"").decode("latin-1")
    pairs = []
    for part in raw.split("&"):
        if part:
            key, _, value = part.partition("=")
            pairs.append((unquote(key), unquote(value)))
    return pairs


def _same_page(path: str) -> str:
    """The page at ``path`` as a redirect's target, relative: "./" and its last segment, every character but
    a segment's own percent-encoded. It cannot leave the site (``//evil.example`` and ``/\\evil.example``
    were another site to a browser, and a CR or LF broke the answer's headers), nor be read as a scheme
    (``./javascript:``), and it keeps a path prefix a reverse proxy took off."""
    return "./" + quote(path.rpartition("/")[2], safe=":@!$&'()*+,;=-._~")


class TokenGuard:
    """Every request carries the token (header or cookie), or gets a 401; ``?token=`` sets the cookie."""

    def __init__(self, app: ASGIApp, token: SecretStr) -> None:
        self.app = app
        self._token = token.get_secret_value().encode()
        # What the cookie holds: a value derived from the token, not the token, so that a cookie sent where it
        # should not go (browsers send a host's cookies to every port of it) does not give the token away,
        # which a script's Bearer header, or another service sharing it, would take.
        self._cookie = hmac.new(self._token, b"vdoctor inspector cookie", hashlib.sha256).hexdigest().encode()

    def _valid(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    def _valid_cookie(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._cookie)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        auth = headers.get("authorization", "")
        bearer = auth[len("bearer ") :].strip() if auth.lower().startswith("bearer ") else None
        cookie = _cookie(headers.get("cookie", ""), TOKEN_COOKIE)
        query = _query(scope)
        param = next((v for k, v in query if k == TOKEN_PARAM), None)
        if self._valid(param):
            # The same page without the token in its URL, and the cookie that stands for it. The other
            # parameters go on as they were written ("+" in a symptom is a blank to the page that reads it).
            raw = scope.get("query_string", b"").decode("latin-1")
            rest = "&".join(p for p in raw.split("&") if p and unquote(p.partition("=")[0]) != TOKEN_PARAM)
            location = urlunsplit(("", "", _same_page(scope["path"]), rest, ""))
            cookie_header = f"{TOKEN_COOKIE}={self._cookie.decode()}; HttpOnly; SameSite=Strict; Path=/"
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [
                        (b"location", location.encode()),
                        (b"set-cookie", cookie_header.encode()),
                        (b"content-length", b"0"),
                        *_HEADERS,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        if self._valid(bearer) or self._valid_cookie(cookie):
            await self.app(scope, receive, send)
            return
        why = (
            "401: this inspector needs its token: an 'Authorization: Bearer <token>' header, "
            "or open any page once with ?token=<token> (a browser then keeps it in a cookie)"
        )
        challenge = [(b"www-authenticate", b'Bearer realm="vdoctor inspector"'), *_HEADERS]
        await _answer(send, 401, why, challenge, _is_api(scope))


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


class SecurityHeaders:
    """No scripts, no framing, no referrer, no caching, on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in _HEADERS if h[0] not in names)]
            await send(message)

        await self.app(scope, receive, with_headers)


def redact_url(url: str) -> str:
    """A memory URL fit to show: everything between the user and the last ``@`` replaced by ``***``.

    The password is found without a URL parser (``vdoctor.url_credentials``), so
    one holding an unescaped ``/``, ``?`` or ``#`` is masked whole all the same.
    """
    return url_credentials.redact_url(url)


def url_password(url: str) -> str | None:
    """The memory URL's password for the ``Scrubber`` (between the user and the last ``@``), or None."""
    return url_credentials.url_password(url)

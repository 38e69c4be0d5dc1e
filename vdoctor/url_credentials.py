"""The credentials of a store URL (``scheme://user:password@host:port/db``), found without a URL parser.

``urllib.parse.urlsplit`` ends a URL's authority at its first ``/``, ``?`` or
``#``, so a password holding one unescaped (``mysql://root:123/abc@db:3306/vd``)
is read as part of the port or the path, and whatever is built from that parse
(an error message, a redacted URL) may show it. Here the credentials are
everything between ``://`` and the *last* ``@``, as ``urlsplit`` itself finds
the host: what follows that ``@`` (host, port, path, query) is safe to show,
and nothing before it is ever shown but the user of a well-formed URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

SCHEME_END = "://"
# What ends a URL's authority (RFC 3986): in a user or password it must be percent-encoded.
AUTHORITY_END = frozenset("/?#")
ENCODING_HINT = "percent-encode special characters in the user and password (/ as %2F, ? as %3F, # as %23, @ as %40)"
MASK = "***"


@dataclass(frozen=True)
class SplitUrl:
    """A URL cut at ``://`` and at the last ``@`` after it."""

    scheme: str
    # Between ``://`` and the last ``@``; None without an ``@``. Never show it.
    userinfo: str | None
    # After the last ``@`` (or after ``://`` without one): host, port, path, query.
    rest: str

    @property
    def shown(self) -> str:
        """The URL without its credentials, fit for a message."""
        return f"{self.scheme}{SCHEME_END}{self.rest}"

    @property
    def user(self) -> str | None:
        """The user, percent-decoded: the userinfo up to its first ``:``."""
        return None if self.userinfo is None else unquote(self.userinfo.partition(":")[0])

    @property
    def written_password(self) -> str | None:
        """The password as the URL writes it (``p%2fss``): the userinfo after its first ``:``; None without one."""
        if self.userinfo is None:
            return None
        _, colon, password = self.userinfo.partition(":")
        return password if colon else None

    @property
    def password(self) -> str | None:
        """The password, percent-decoded (``written_password``); None without one."""
        written = self.written_password
        return None if written is None else unquote(written)

    @property
    def ends_authority_early(self) -> bool:
        """Whether the user or password holds an unescaped ``/``, ``?`` or ``#`` (which a URL parser misreads)."""
        return self.userinfo is not None and not AUTHORITY_END.isdisjoint(self.userinfo)


def url_scheme(url: str) -> str:
    """The scheme of ``url`` as ``urlsplit`` reads it, from the text before the first ``:`` alone.

    ``urlsplit(url).scheme`` parses the whole URL first, and refuses some
    credentials (a character that NFKC folds into ``/``, ``@`` or ``:``, say)
    with a ValueError that quotes them.
    """
    head, colon, _ = url.partition(":")
    return urlsplit(head + colon).scheme if colon else ""


def split_url(url: str) -> SplitUrl | None:
    """``url`` cut into scheme, credentials and the rest; None when it has no ``://``."""
    scheme, sep, after = url.partition(SCHEME_END)
    if not sep:
        return None
    userinfo, at, rest = after.rpartition("@")
    return SplitUrl(scheme=scheme, userinfo=userinfo if at else None, rest=rest)


def redact_url(url: str) -> str:
    """``url`` with its password (everything after the user, up to the last ``@``) replaced by ``***``.

    A URL without ``://`` but with an ``@`` is masked up to its last ``@``:
    there is no telling what in it is a password.
    """
    split = split_url(url)
    if split is None:
        return f"{MASK}@{url.rpartition('@')[2]}" if "@" in url else url
    if split.userinfo is None or ":" not in split.userinfo:
        return url
    user = split.userinfo.partition(":")[0]
    return f"{split.scheme}{SCHEME_END}{user}:{MASK}@{split.rest}"


def shown_url(url: str | None) -> str | None:
    """``redact_url`` of a URL that may be unset: for a repr."""
    return None if url is None else redact_url(url)


def url_password(url: str) -> str | None:
    """The password of ``url``, percent-decoded; None without one."""
    split = split_url(url)
    return None if split is None else split.password or None


def without_password(url: str) -> str:
    """``url`` with its password left out and its user kept (``mysql://root@db:3306/vd``): what may travel
    where the password may not. A URL without a password is returned as it is."""
    split = split_url(url)
    if split is None or split.userinfo is None or ":" not in split.userinfo:
        return url
    return f"{split.scheme}{SCHEME_END}{split.userinfo.partition(':')[0]}@{split.rest}"

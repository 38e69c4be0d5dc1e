"""Values that cross the MySQL protocol: store URLs, vector literals, datetimes, booleans.

Shared by the ``mysql`` and ``doris`` backends (``sqlbase``); no driver here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import numpy as np

from vdoctor.errors import ConfigError, StoreError
from vdoctor.url_credentials import ENCODING_HINT, split_url

# Identifiers are never taken from input as-is: the table comes from this list.
ALLOWED_TABLES = ("case_memory",)
DEFAULT_TABLE = "case_memory"
# The options a MySQL or Doris store URL takes (``?table=case_memory``); any other is refused.
URL_OPTIONS = ("table",)
_DB_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_URL_FORM = "scheme://user:password@host:port/db"
# How pymysql (``stores/mysql.py``, charset utf8mb4) sends the credentials: the user in the
# connection's charset, the password as Latin-1. Anything else fails inside the driver with a
# UnicodeEncodeError that names the character and its position, so it is refused here instead.
USER_ENCODING = "utf-8"
PASSWORD_ENCODING = "latin-1"


@dataclass(frozen=True)
class ConnInfo:
    """A parsed ``scheme://user:password@host:port/db`` URL; ``redacted`` is safe to print."""

    scheme: str
    host: str
    port: int
    user: str
    password: str
    database: str
    table: str

    @property
    def redacted(self) -> str:
        who = f"{self.user}:***@" if self.password else f"{self.user}@"
        return f"{self.scheme}://{who}{self.host}:{self.port}/{self.database}"

    def redact(self, text: str) -> str:
        """``text`` (a driver's error, say) with the password masked."""
        return text.replace(self.password, "***") if self.password else text

    def __repr__(self) -> str:  # never show the password, even in tracebacks
        return f"ConnInfo({self.redacted!r}, table={self.table!r})"


def parse_url(url: str, default_port: int) -> ConnInfo:
    """Parse and validate a MySQL-protocol store URL; errors never echo the user or the password.

    The credentials are cut off at the last ``@`` before anything is parsed
    (``vdoctor.url_credentials``), so a message shows only the scheme and what
    follows that ``@``, however the password is written.
    """
    split = split_url(url)
    if split is None:
        raise ConfigError(f"invalid memory URL: expected {_URL_FORM}")
    shown = split.shown
    if split.ends_authority_early:
        raise ConfigError(f"memory URL {shown}: the user or password holds a '/', '?' or '#'; {ENCODING_HINT}")
    try:
        parts = urlsplit(shown)
        given_port = parts.port
    except ValueError:
        raise ConfigError(f"invalid memory URL {shown}: expected {_URL_FORM}") from None
    # Port 0 is no server's port: it is refused, not taken for the default.
    if given_port == 0:
        raise ConfigError(f"memory URL {shown}: the port must be 1 to 65535 (leave it out for {default_port})")
    port = default_port if given_port is None else given_port
    database = parts.path.lstrip("/")
    if not parts.hostname:
        raise ConfigError(f"memory URL {shown} has no host")
    if not _DB_NAME_RE.match(database):
        raise ConfigError(f"memory URL {shown}: the database name must match {_DB_NAME_RE.pattern}")
    options = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(options) - set(URL_OPTIONS))
    if unknown:
        raise ConfigError(
            f"memory URL {shown}: unknown option {', '.join(unknown)} (the one option is {', '.join(URL_OPTIONS)})"
        )
    table = options.get("table", [DEFAULT_TABLE])[0]
    if table not in ALLOWED_TABLES:
        raise ConfigError(f"memory URL {shown}: table {table!r} is not one of {', '.join(ALLOWED_TABLES)}")
    # No credentials: the user is root. Credentials with an empty user (``:pw@host``) are a mistake, not root.
    if split.user == "":
        raise ConfigError(f"memory URL {shown}: the user is empty; write user:password@ (or no credentials for root)")
    user = split.user or "root"
    password = split.password or ""
    # Neither is quoted: the password is a secret, and so may be a user typed where the password goes.
    if not _encodes(user, USER_ENCODING):
        raise ConfigError(f"memory URL {shown}: the user is not valid text; percent-encode it as UTF-8")
    if not _encodes(password, PASSWORD_ENCODING):
        raise ConfigError(
            f"memory URL {shown}: the password holds a character outside Latin-1, which the MySQL driver (pymysql) "
            "cannot send; use Latin-1 characters only, percent-encoded as UTF-8 (é as %C3%A9)"
        )
    return ConnInfo(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        user=user,
        password=password,
        database=database,
        table=table,
    )


def _encodes(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def vector_literal(vector: Sequence[float]) -> str:
    """An SQL array literal ``[0.1,-0.2,...]`` from finite floats only (anything else raises)."""
    parts = []
    for x in vector:
        if isinstance(x, bool) or not isinstance(x, int | float | np.floating | np.integer):
            raise StoreError(f"a vector holds a {type(x).__name__}, not a number; refusing to build an SQL literal")
        value = float(x)
        if not math.isfinite(value):
            raise StoreError("a vector holds a non-finite value; refusing to build an SQL literal from it")
        parts.append(repr(value))
    if not parts:
        raise StoreError("refusing to build an SQL literal from an empty vector")
    return "[" + ",".join(parts) + "]"


def to_utc(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise StoreError(f"expected a DATETIME from the store, got {type(value).__name__}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def maybe_utc(value: object) -> datetime | None:
    return None if value is None else to_utc(value)


def maybe_naive(value: datetime | None) -> datetime | None:
    return None if value is None else naive_utc(value)


def naive_utc(value: datetime) -> datetime:
    """DATETIME columns hold UTC without a zone."""
    return value.astimezone(UTC).replace(tzinfo=None)


def to_bool(value: object) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true")
    return bool(value)


def as_of_params(at: datetime, archived: bool) -> list[object]:
    """The parameters of ``sqlbase.AS_OF`` (or ``AS_OF_ARCHIVED``) for event time ``at``."""
    return [naive_utc(at)] * (4 if archived else 3)


# What one multi-row statement may carry at most: half the 16 MB ``max_allowed_packet`` that
# MySQL 8, MariaDB 10.11 and Doris have by default (a larger statement is refused whole).
MAX_STATEMENT_BYTES = 8 * 1024 * 1024


def statement_bytes(value: object) -> int:
    """At most how many bytes ``value`` takes in a statement's text, quoted and escaped.

    Text and bytes count twice their UTF-8 length (every byte escaped, the worst case); a
    number, a time, a boolean or NULL a few dozen bytes.
    """
    if isinstance(value, str):
        return 2 * len(value.encode("utf-8")) + 2
    if isinstance(value, bytes | bytearray | memoryview):
        return 2 * len(value) + 10
    return 32


def statement_batches(
    rows: Sequence[Sequence[object]], max_rows: int, max_bytes: int = MAX_STATEMENT_BYTES
) -> list[list[int]]:
    """The rows (by index, in order) of each multi-row statement: at most ``max_rows`` rows and, but for
    a row that is larger on its own, at most ``max_bytes`` of values (``statement_bytes``) each."""
    batches: list[list[int]] = []
    batch: list[int] = []
    used = 0
    for i, row in enumerate(rows):
        size = sum(statement_bytes(v) for v in row)
        if batch and (len(batch) >= max_rows or used + size > max_bytes):
            batches.append(batch)
            batch, used = [], 0
        batch.append(i)
        used += size
    if batch:
        batches.append(batch)
    return batches

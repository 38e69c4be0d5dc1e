"""The closed registry each backend role is chosen from.

Roles: L3 stores, knowledge stores, chat models, embedders, token counters.

A registry names its valid choices; asking for any other is a ``ConfigError``
(or a narrower subclass) that lists them. Entries are openers: functions that
import their implementation module only when called, so an optional driver is
needed only by those who choose it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

from vdoctor.errors import ConfigError
from vdoctor.url_credentials import url_scheme

T = TypeVar("T")


class Registry(Generic[T]):
    """Named openers of one role; ``registry[name]`` or a clear error listing the valid names."""

    def __init__(
        self,
        what: str,
        entries: Mapping[str, T],
        error: type[ConfigError] = ConfigError,
        valid_label: str = "valid",
        sort_names: bool = False,
    ) -> None:
        self.what = what
        self._entries = dict(entries)
        self._error = error
        self._valid_label = valid_label
        self.names: tuple[str, ...] = tuple(sorted(self._entries) if sort_names else self._entries)

    def __getitem__(self, name: str) -> T:
        entry = self._entries.get(name)
        if entry is None:
            raise self._error(f"unknown {self.what} {name!r}; {self._valid_label}: {', '.join(self.names)}")
        return entry

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def for_url(self, url: str) -> T:
        """The entry named by a URL's scheme (``sqlite:///x.db`` -> ``sqlite``), read without parsing the rest."""
        return self[url_scheme(url)]

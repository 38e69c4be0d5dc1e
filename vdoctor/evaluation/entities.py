"""Every number and entity of a text, by the shape of its tokens: the grader of the long-task benchmark.

``bench/long_task.py`` scores what a context keeps with this extractor, so
it must not share the key-fact extractor's blind spots (``memory/facts.py``
decides what working memory keeps; grading with it would be circular). The
two differ by design:

- facts.py reads JSON by key (``codes``, ``readings``, ...) and free text
  with patterns for kinds it knows (codes, readings with units it lists,
  clause keywords, id prefixes); it keeps first/lowest/highest/latest
  readings only.
- this extractor knows no keys, kinds, units or keywords: it walks every
  scalar of a JSON document, splits text into tokens, and takes every URI,
  every ISO time, every token that holds a digit (numbers, ids such as X12,
  WO-20931, P0A7F, 3.21) and every snake_case name. It knows nothing of any
  scenario.

An entity is present in a context when it occurs there as a whole token
(not inside a longer run of letters and digits); a number may also be
followed by a unit (187 in 187mV), never by more digits (187 is not in 1870
or 187.5) or preceded by letters (12 is not in X12).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

_URI = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>,;，。；]+")
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?Z?")
# ASCII runs of letters, digits and joiners, or runs of CJK characters.
_TOKEN = re.compile(r"[A-Za-z0-9_.\-/#]+|[\u3400-\u9fff]+")
_EDGE = ".-/#"


def _text(text: str, out: set[str]) -> None:
    for uri in _URI.findall(text):
        out.add(uri.rstrip(".):"))
    text = _URI.sub(" ", text)
    out.update(_ISO.findall(text))
    for token in _TOKEN.findall(_ISO.sub(" ", text)):
        token = token.strip(_EDGE)
        if not token or not token.isascii():
            continue
        if any(c.isdigit() for c in token) or ("_" in token and token.replace("_", "").isalnum()):
            out.add(token)


def _walk(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _walk(v, out)
    elif isinstance(value, list):
        for v in value:
            _walk(v, out)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        out.add(str(int(value)) if float(value).is_integer() else str(value))
    else:
        _text(str(value), out)


@functools.lru_cache(maxsize=4096)
def _entities(text: str) -> frozenset[str]:
    out: set[str] = set()
    try:
        _walk(json.loads(text), out)
    except ValueError:
        _text(text, out)
    return frozenset(out)


def entities(text: str) -> set[str]:
    """Every number and entity of ``text`` (a JSON document or free text)."""
    return set(_entities(text))


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TIMES = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?Z?)?|\b\d{2}:\d{2}(?::\d{2})?")


@functools.lru_cache(maxsize=64)
def _without_uris_and_times(context: str) -> str:
    return _TIMES.sub(" ", _URI.sub(" ", context))


def present(entity: str, context: str) -> bool:
    """Whether ``entity`` occurs in ``context`` as a whole token.

    A number may carry a unit after it (187 in 187mV) and is looked for outside
    URIs and times (20 is not in 10:20 or in a URI's timestamp).
    """
    if _NUMBER.fullmatch(entity):
        found = re.search(rf"(?<![A-Za-z0-9.]){re.escape(entity)}(?!\.?\d)", _without_uris_and_times(context))
        return found is not None
    return re.search(rf"(?<![A-Za-z0-9.]){re.escape(entity)}(?![A-Za-z0-9])", context) is not None

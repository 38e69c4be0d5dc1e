"""Bidirectional-text controls in stored text, shown on the pages as what they are.

A stored string (an alert's text, a summary, a root cause, a session id) may
hold the Unicode controls that reorder how a browser lays text out: a cause
that reads "replace the pack" and shows "replace fuse F12" ("Trojan Source").
The HTML pages show each control as its escape, ``\\u202e``: in a marked span
in the text of a page (the templates' ``finalize``, so every ``{{ }}`` goes
through it), as plain text in an attribute or the title (``plain``), where
markup is not read. The ``/api/`` answers keep the stored values as they are:
they are data.
"""

from __future__ import annotations

from markupsafe import Markup, escape

# Embeddings and overrides (U+202A-U+202E), isolates (U+2066-U+2069), the left-to-right and right-to-left
# marks (U+200E, U+200F) and the Arabic letter mark (U+061C): every character of Unicode's Bidi_Control
# property, the ones that reorder or re-embed text.
BIDI_CONTROLS = frozenset(
    [chr(c) for c in range(0x202A, 0x202F)] + [chr(c) for c in range(0x2066, 0x206A)] + ["\u200e", "\u200f", "\u061c"]
)


def escape_of(control: str) -> str:
    """How a page shows the control: its Python escape, ``\\u202e``."""
    return f"\\u{ord(control):04x}"


_PLAIN = str.maketrans({c: escape_of(c) for c in BIDI_CONTROLS})
# The marker is written without quotes: were it ever printed inside an attribute value, it could not end it.
_MARKED = str.maketrans({c: f"<span class=bidi>{escape_of(c)}</span>" for c in BIDI_CONTROLS})


def marked(value: object) -> Markup:
    """``value`` HTML-escaped (markup already made, a macro's, stays as it is), each control a marked span."""
    return Markup(str(escape(value)).translate(_MARKED))


def plain(value: object) -> str:
    """``value`` as text, each control replaced by its escape (for attributes and the title)."""
    return str(value).translate(_PLAIN)

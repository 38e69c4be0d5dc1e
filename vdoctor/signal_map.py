"""A fleet's own signal names, mapped onto the names the job reads (``VDOCTOR_SIGNAL_NAMES``).

A fleet names its signals as its platform does: in Chinese (``电池温度``,
``单体压差``), or in a vendor's words (``BMS_CellVdiff``). The job reads a
name's unit from its suffix, and the knowledge pack's rules name the signals
they test (``cell_voltage_diff_mv>=100``): a reading under another name is
kept, but no rule ever confirms a fault by it. A name in another script than
Latin has no snake_case form at all, and its alert is a dead letter.

A signal map names, for each name a fleet sends, the name to read it as::

    {"电池温度": "pack_temp_c", "单体压差(mV)": "cell_voltage_diff_mv", "BMS_CellVdiff": "cell_voltage_diff_mv"}

or the same as CSV, with a header row naming the two columns ``sent`` and ``name``::

    sent,name
    电池温度,pack_temp_c

A sent name is found as it is written (spaces around it aside), or as the
job reads it (``signal_name``: ``电池温度（℃）`` with full-width brackets is
``电池温度(℃)``, ``BMS CellVdiff`` is ``bms_cell_vdiff``). The name it maps to
is a signal name as the contract writes one (snake_case, with the unit's
suffix where the unit is known); a map that holds anything else is refused
when the job starts, naming the entry. Names the map does not hold are read
as before.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vdoctor.events import signal_name
from vdoctor.units import SIGNAL_NAME_RE

# A map is a fleet's signal catalogue: a few hundred names, at most this many.
MAX_ENTRIES = 100_000


def read_signal_map(path: str | Path) -> dict[str, str]:
    """The map in the file at ``path`` (``.csv``: CSV with a header; anything else: a JSON object), checked
    (``check_signal_map``); ``ValueError`` naming the file and the entry for anything else."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"signal map {file}: cannot be read: {e}") from None
    if file.suffix.lower() == ".csv":
        entries = _csv_entries(file, text)
    else:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ValueError(f"signal map {file}: not valid JSON ({e}); write an object of sent name -> name") from None
        if not isinstance(data, dict):
            raise ValueError(f"signal map {file}: expected a JSON object of sent name -> name")
        entries = data
    try:
        return check_signal_map(entries)
    except ValueError as e:
        raise ValueError(f"signal map {file}: {e}") from None


def _csv_entries(file: Path, text: str) -> dict[str, str]:
    rows = csv.reader(io.StringIO(text))
    header = [cell.strip().lower() for cell in next(rows, [])]
    if "sent" not in header or "name" not in header:
        raise ValueError(f"signal map {file}: the first row must name the columns sent and name, got {header[:4]}")
    sent_at, name_at = header.index("sent"), header.index("name")
    entries: dict[str, str] = {}
    for line, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue  # a blank line
        if len(row) <= max(sent_at, name_at):
            raise ValueError(f"signal map {file}: line {line} has no {'name' if len(row) > sent_at else 'sent'} cell")
        sent = row[sent_at].strip()
        if sent in entries:
            raise ValueError(f"signal map {file}: line {line}: {sent!r} is mapped twice")
        entries[sent] = row[name_at]
    return entries


def check_signal_map(entries: Mapping[Any, object]) -> dict[str, str]:
    """``entries`` (sent name -> name) as a map, each name the contract's snake_case; ``ValueError`` naming
    the first entry that is not (an empty sent name, a name that is no signal name)."""
    if len(entries) > MAX_ENTRIES:
        raise ValueError(f"{len(entries)} entries: at most {MAX_ENTRIES}")
    checked: dict[str, str] = {}
    for sent, name in entries.items():
        if not isinstance(sent, str) or not sent.strip():
            raise ValueError(f"a sent name must be non-empty text, got {sent!r}")
        if not isinstance(name, str) or not SIGNAL_NAME_RE.match(name.strip()):
            raise ValueError(
                f"{sent[:40]!r} maps to {str(name)[:40]!r}, which is no signal name: write it in snake_case "
                "(a-z, 0-9 and _, with a letter), with its unit's suffix (pack_temp_c, cell_voltage_diff_mv)"
            )
        checked[sent.strip()] = name.strip()
    SignalRenames(checked)  # two sent names read alike must not map to two names
    return checked


class SignalRenames:
    """A checked map ready for lookups while events are read (``events.parse_event``'s ``rename``)."""

    def __init__(self, entries: Mapping[str, str]) -> None:
        self._sent = dict(entries)
        self._read: dict[str, str] = {}
        for sent, name in self._sent.items():
            read = signal_name(sent)
            if self._read.setdefault(read, name) != name:
                other = next(s for s, n in self._sent.items() if signal_name(s) == read and n != name)
                raise ValueError(
                    f"{other[:40]!r} and {sent[:40]!r} are both read as {read[:40]!r} but map to different "
                    f"names ({self._read[read]!r}, {name!r})"
                )

    def __len__(self) -> int:
        return len(self._sent)

    def __call__(self, given: str) -> str | None:
        """The name ``given`` is read as, or None when the map does not hold it."""
        found = self._sent.get(given.strip())
        if found is None:
            found = self._read.get(signal_name(given))
        return found

"""How the job reads a fleet's feed, before it runs: ``vdoctor check-events``.

Every line is parsed as the job's parse stage parses it (``events.parse_event``,
with the same ``VDOCTOR_NAIVE_TS_ZONE``). The report counts the events by kind
and the dead letters by stage and field, each group with its first line and
reason, and lists every form the feed writes that the job reads as another:
a field's spelling (``eventId``), a signal's name (``Pack Voltage (V)``), a
trouble code (``P0A7F-1B (active)``), an event time without the ISO form or a
zone, a number written with a comma (``1,200``). What a line becomes later in the job (a replayed duplicate, a recheck
for a session memory does not know) needs the job's state, and is not checked
here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from vdoctor.errors import EventError
from vdoctor.events import (
    DEFAULT_DTC_NUMBERS,
    MAX_OBD_DTC,
    AlertEvent,
    Event,
    JsonConstant,
    RecheckEvent,
    Rename,
    code_number_of,
    contract_field,
    contract_keys,
    digits_as_read,
    event_of,
    flat_signals,
    has_snake_form,
    load_object,
    lower_keys,
    named_reading,
    no_reading,
    reading_pairs,
    set_aside_error,
    signal_name,
    trouble_codes,
    unit_field,
)

# How far ahead of this machine's clock an event's time may be before the report names it: a day, past any
# zone a clock was set to by mistake.
AHEAD_S = 24 * 3600

# Kinds of rewritten forms, in the order the report lists them.
FIELD, SIGNAL, NUMBER, CODE, TIME = "field", "signal", "number", "code", "ts"
# Forms kept per kind in the report (the most frequent first); the counts cover them all.
TOP_FORMS = 20


@dataclass
class DeadGroup:
    """Dead letters of one stage and field: how many, and the first one's line number and reason."""

    count: int
    first_line: int
    reason: str


@dataclass
class FeedReport:
    lines: int = 0
    events: Counter[str] = field(default_factory=Counter)
    dead: dict[tuple[str, str], DeadGroup] = field(default_factory=dict)
    # (kind, as written, as read) -> lines
    forms: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # A field the contract does not name, as written -> lines of events that carry it (the job leaves it out:
    # a platform's own name for codes or text, ``dtcs`` or ``message``, would lose them without a word).
    left_out: Counter[str] = field(default_factory=Counter)
    # Events timed more than ``AHEAD_S`` after this machine's clock when checked, and the first one's line: a
    # vehicle clock that runs ahead or was set wrong (2099, an all-ones 32-bit time). The job reads them as
    # sent (a replay's times are its own), and a vehicle's alerts after one join the session it opened.
    ahead: int = 0
    ahead_first: int = 0

    @property
    def dead_letters(self) -> int:
        return sum(group.count for group in self.dead.values())

    def dead_letter(self, stage: str, reason: str, number: int) -> None:
        """Count line ``number``'s dead letter in its group: its stage and, for a validation, the field named."""
        name = reason.split(":", 1)[0] if stage == "validate" and ":" in reason else ""
        group = self.dead.get((stage, name))
        if group is None:
            self.dead[(stage, name)] = DeadGroup(1, number, reason[:300])
        else:
            group.count += 1

    def as_json(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "events": dict(self.events),
            "dead_letters": self.dead_letters,
            "dead": [
                {"stage": stage, "field": name, "count": g.count, "first_line": g.first_line, "reason": g.reason}
                for (stage, name), g in sorted(self.dead.items(), key=lambda kv: -kv[1].count)
            ],
            "read_as": [
                {"kind": kind, "written": written, "read": read, "lines": n}
                for (kind, written, read), n in self.forms.most_common()
            ],
            "left_out": [{"field": name, "lines": n} for name, n in self.left_out.most_common()],
            "ahead_of_clock": {"events": self.ahead, "first_line": self.ahead_first or None},
        }


def check_feed(
    lines: Iterable[str],
    naive_zone: tzinfo | None = None,
    progress: Callable[[int], None] | None = None,
    rename: Rename | None = None,
    number_comma: str | None = None,
    now: datetime | None = None,
    dtc_numbers: str = DEFAULT_DTC_NUMBERS,
) -> FeedReport:
    """The report of ``lines`` (one JSON event each; blank lines are skipped, as the job skips them), read with
    the job's zone for times without one, its signal map, its comma in numbers and its codes sent as numbers,
    as the job reads them (``parse_event``). ``now``: the clock events ahead of it are counted against
    (default: this machine's)."""
    report = FeedReport()
    ahead_of = (now or datetime.now(UTC)) + timedelta(seconds=AHEAD_S)
    for number, line in enumerate(lines, start=1):
        raw = line.rstrip("\r\n")
        if not raw.strip():
            continue
        report.lines += 1
        if progress is not None and report.lines % 100_000 == 0:
            progress(report.lines)
        try:
            data = load_object(raw)
            written = dict(data)  # (reading it as an event changes it)
            event = event_of(data, naive_zone, rename, number_comma, dtc_numbers)
        except EventError as e:
            report.dead_letter(e.stage, str(e), number)
            continue
        report.events[event.type] += 1
        if event.ts > ahead_of:
            report.ahead += 1
            report.ahead_first = report.ahead_first or number
        if isinstance(event, AlertEvent) and event.set_aside:
            # An event, diagnosed without those readings, and a dead letter as well: the job sends both.
            report.dead_letter("validate", set_aside_error(event), number)
        _count_forms(report.forms, written, event, rename, number_comma, dtc_numbers)
        fields = type(event).model_fields
        report.left_out.update(str(key) for key in written if not _read_key(key, fields))
    return report


def _read_key(key: object, fields: Mapping[str, object]) -> bool:
    """Whether an event's field ``key`` is one of ``fields`` (its type's, as the contract names them), in any
    spelling the job reads."""
    if key in fields:
        return True
    name = contract_field(key) if isinstance(key, str) else None
    return name is not None and name in fields


def _count_forms(
    forms: Counter[tuple[str, str, str]],
    data: dict[str, Any],
    event: Event,
    rename: Rename | None = None,
    number_comma: str | None = None,
    dtc_numbers: str = DEFAULT_DTC_NUMBERS,
) -> None:
    """Each form of a line's JSON object ``data`` that ``event`` holds in another (one count per line and form)."""
    seen: set[tuple[str, str, str]] = set()
    for key in data:
        if isinstance(key, str) and (name := contract_field(key)) is not None and name != key:
            seen.add((FIELD, key, name))
    data = contract_keys(data)
    # A platform's alarms, without the contract's own fields (``events.event_of``).
    kind = data.get("type")
    if kind is None:
        seen.add((FIELD, "no type", event.type))
    elif isinstance(kind, str) and kind.strip().lower() != event.type:
        seen.add((FIELD, f"type {kind.strip()[:40]}", event.type))
    if data.get("event_id") is None:
        seen.add((FIELD, "no event_id", "h- and a hash of its fields"))
    if isinstance(event, AlertEvent) and data.get("series") is None:
        seen.add((FIELD, "no series", "series: its VIN's first 8 characters"))
    if isinstance(event, RecheckEvent) and not event.session_id:
        seen.add((FIELD, "no session_id", "the vehicle's newest case"))
    written_ts = data.get("ts")
    read_ts = event.ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(written_ts, str | int | float) and str(written_ts) != read_ts:
        seen.add((TIME, _shape(str(written_ts)), "YYYY-MM-DDThh:mm:ssZ"))
    if isinstance(event, AlertEvent):
        signals = data.get("signals")
        if isinstance(signals, dict):  # (nested objects and arrays by their paths, as the job reads them)
            for written, value in flat_signals(signals):
                if isinstance(value, dict):  # a reading as an object under its name, its unit beside it
                    _reading_form(seen, named_reading(written, value), rename, number_comma)
                    continue
                _number_form(seen, value, number_comma)
                mapped = rename(written) if rename is not None else None
                if value is None:  # (the contract's own form of no reading)
                    continue
                if no_reading(value):
                    _no_reading_form(seen, written, value)
                elif (read := signal_name(mapped or written)) != written and has_snake_form(read):
                    seen.add((SIGNAL, *_index_shape(written, read)))  # (a name with no ASCII form is set aside)
        elif isinstance(signals, list):  # readings as objects: the name with its unit apart
            for item in signals:
                _reading_form(seen, item, rename, number_comma)
        codes = data.get("dtc_codes")
        for entry in [codes] if isinstance(codes, str) else codes if isinstance(codes, list) else []:
            if isinstance(entry, str) and (read_codes := trouble_codes(entry)) is not None and read_codes != [entry]:
                form = _CODE_TOKEN_RE.sub("<code>", _UDS_TOKEN_RE.sub("0x<hex>", entry))
                seen.add((CODE, form, ", ".join(["<code>"] * len(read_codes))))
            elif isinstance(entry, dict):
                keys = ", ".join(f'"{k}"' for k in entry)
                seen.add((CODE, f"{{{keys}}}", "<code>"))
            if (number := code_number_of(entry)) is not None:  # a DTC as its number (``events._code_number``)
                seen.add((CODE, *_number_code_form(number, dtc_numbers)))
    forms.update(seen)


def _number_code_form(number: int, dtc_numbers: str) -> tuple[str, str]:
    """The form of a code sent as a number, as ``dtc_numbers`` reads it. Under ``uds`` a number of two bytes or
    less is told apart: it is what an OBD dongle sends (768, P0300), read as another code (P0003); so is a
    number under 256, a failure type with no code (no code; under ``obd`` a code). 0, a Mode 03 reply's
    padding, is no code under either. The read form fits the report's column."""
    if dtc_numbers == "obd":
        return ("<number of 2 bytes>", "<code>") if number else ("0", "no code")
    if number == 0:
        return "0", "no code"
    if number < 256:
        return "<number under 256>", "no code (--dtc-numbers obd reads 2 bytes)"
    if number <= MAX_OBD_DTC:
        return "<number under 65536, read as 3 bytes>", "<code> (--dtc-numbers obd reads 2 bytes)"
    return "<number of 3 bytes>", "<code>"


def _reading_form(
    seen: set[tuple[str, str, str]], item: dict[object, object], rename: Rename | None, number_comma: str | None
) -> None:
    """The form of a reading sent as an object (a list's item, or one under its name): its name with its unit,
    and its number's where it has a comma."""
    fields = lower_keys(item)
    if fields.get("value") is None:  # (the contract's own form of no reading)
        return
    _number_form(seen, fields["value"], number_comma)
    ((read_as, value),) = reading_pairs([item], rename, number_comma)
    given = f"{fields['name']} [{unit}]" if (unit := unit_field(fields)) else str(fields["name"])
    if no_reading(value):
        _no_reading_form(seen, str(fields["name"]), fields["value"])
    elif (read := signal_name(str(read_as))) != given and has_snake_form(read):
        seen.add((SIGNAL, *_index_shape(given, read)))  # (a name with no ASCII form is set aside)


def _number_form(seen: set[tuple[str, str, str]], value: object, number_comma: str | None) -> None:
    """A reading's number written with a comma, or with points that group thousands where the fleet writes a
    decimal comma, and how it is read (``1,200`` as ``1200``), digits as 9."""
    if isinstance(value, str) and ("," in value or number_comma == "decimal" and "." in value):
        try:
            read = digits_as_read(value, number_comma)
        except ValueError:  # (refused or set aside: the line is a dead letter, counted as one)
            return
        if read != value.strip():  # (a point that stays a decimal one is no other form)
            seen.add((NUMBER, _shape(value.strip()), _shape(read)))


def _no_reading_form(seen: set[tuple[str, str, str]], written: str, value: object) -> None:
    """A reading whose value says there is none (null, ``"N/A"``): read as no reading."""
    shape, _ = _index_shape(written, written)
    # (A bare NaN or Infinity, ``JsonConstant``, as it was written.)
    text = str(value) if isinstance(value, JsonConstant) else json.dumps(value, ensure_ascii=False)
    seen.add((SIGNAL, f"{shape} = {text}", "no reading"))


# A trouble code inside a gateway's form (P0A7F, SPN 1569 FMI 31): forms group by what is around it.
_CODE_TOKEN_RE = re.compile(r"(?<![A-Z0-9])[PCBU][0-9][0-9A-F]{3}(?![0-9A-F])|(?:SPN|FMI)\W{0,2}[0-9]+", re.IGNORECASE)
# A UDS DTC's bytes in hex (0x0A7F1B): its own form.
_UDS_TOKEN_RE = re.compile(r"0x[0-9A-F]{4,6}", re.IGNORECASE)
_INDEX_RE = re.compile(r"\[([0-9]+)\]")


def _index_shape(written: str, read: str) -> tuple[str, str]:
    """A signal name's form with its indexes in brackets as N (``cells[3].temp`` -> ``cells_3_temp`` is
    ``cells[N].temp`` -> ``cells_N_temp``): an array's items group as one form."""
    for index in _INDEX_RE.findall(written):
        read = re.sub(rf"(?<=_){index}(?=_|$)", "N", read, count=1)
    return _INDEX_RE.sub("[N]", written), read


def _shape(ts: str) -> str:
    """An event time's form, its digits as 9 (``2026/11/1 8:15:30`` is ``9999/99/9 9:99:99``): times group by
    the form they are written in."""
    return "".join("9" if c.isdigit() else c for c in ts[:40])


def render(
    report: FeedReport, zone_name: str | None, number_comma: str | None = None, dtc_numbers: str = DEFAULT_DTC_NUMBERS
) -> str:
    """The report as text."""
    kinds = ", ".join(f"{kind} {n:,}" for kind, n in report.events.most_common())
    out = [
        f"{report.lines:,} lines: {sum(report.events.values()):,} events ({kinds or 'none'}), "
        f"{report.dead_letters:,} dead letters"
        + (f"; times without a zone read in {zone_name}" if zone_name else "")
        + (f"; a number's lone comma before three digits read as {number_comma}" if number_comma else "")
        + ("; codes sent as numbers read as 2 bytes (OBD)" if dtc_numbers == "obd" else ""),
    ]
    if report.dead:
        out.append("\ndead letters, by stage and field (the first line of each, and why):")
        for (stage, name), g in sorted(report.dead.items(), key=lambda kv: -kv[1].count):
            out.append(f"  {stage:<8} {name or '-':<12} {g.count:>8,}  line {g.first_line}: {g.reason[:160]}")
    if report.forms:
        out.append("\nread as (what this feed writes that the job reads as another form; lines):")
        for kind in (FIELD, SIGNAL, NUMBER, CODE, TIME):
            of_kind = [(w, r, n) for (k, w, r), n in report.forms.most_common() if k == kind]
            for written, read, n in of_kind[:TOP_FORMS]:
                out.append(f"  {kind:<6} {written[:44]:<44} -> {read[:40]:<40} {n:>8,}")
            if len(of_kind) > TOP_FORMS:
                rest = sum(n for _, _, n in of_kind[TOP_FORMS:])
                more = len(of_kind) - TOP_FORMS
                out.append(f"  {kind:<6} ... {more:,} more forms ({rest:,} lines; --json lists all)")
    if report.ahead:
        out.append(
            f"\nahead of this machine's clock by more than a day: {report.ahead:,} events (the first at line "
            f"{report.ahead_first}): a vehicle clock set wrong? The job reads them as sent, and a vehicle's "
            "later alerts join the session such an alert opened"
        )
    if report.left_out:
        out.append("\nleft out (fields this feed writes that the contract does not name: not read; lines):")
        for name, n in report.left_out.most_common(TOP_FORMS):
            out.append(f"  {name[:60]:<60} {n:>8,}")
        if len(report.left_out) > TOP_FORMS:
            out.append(f"  ... {len(report.left_out) - TOP_FORMS:,} more fields (--json lists all)")
    return "\n".join(out)

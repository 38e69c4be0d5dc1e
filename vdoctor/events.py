"""Input events: a tagged union on ``type`` (DESIGN.md §3.1), and their parser.

Parsing is split in two stages so that a dead letter says what went wrong:
``parse`` when the line is not a JSON object, ``validate`` when it is JSON but
breaks the contract. A validation error names the field and the problem.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import re
import unicodedata
import zlib
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vdoctor.errors import EventError
from vdoctor.units import (
    MAX_SIGNAL_NAME_CHARS,
    SIGNAL_NAME_RE,
    UNITS,
    convert,
    letter_suffix,
    other_quantity,
    slash_unit,
    unit_of,
    unit_suffix,
    unit_symbol,
    word_suffix,
)

# ISO 3779: 17 characters, digits and capital letters except I, O and Q
# (they are too easily confused with 1 and 0). A VIN in lower case is the
# same vehicle: it is upper-cased first (one key per vehicle).
VIN_RE = re.compile(r"^[A-HJ-NPR-Z0-9]{17}$")
VIN_CHARS = 17
# OBD-II / SAE J2012 trouble codes: system letter and four hex digits. The code
# is these five characters, as a scan tool shows it and the knowledge pack
# knows it, however a gateway writes what comes with it:
# - a UDS code's failure-type byte, and a status byte after it (``P0A7F-1B``,
#   ``P0A7F1B``, ``P0A7F 1B``, ``P0A7F:1B-08``);
# - a name before it (``DTC P0A7F``) and its state after it, in brackets or as
#   a word (``P0A7F (active)``, ``P0A7F-1B [08]``, ``P0A7F pending``).
DTC_STATES = (
    "ACTIVE", "PENDING", "CONFIRMED", "STORED", "HISTORY", "HISTORIC", "PERMANENT", "CURRENT", "INTERMITTENT",
    "INACTIVE", "PASSIVE", "PREVIOUS",
)  # fmt: skip
# What may follow a code: its state in brackets or as a word, then a description after a blank, a dash or a
# colon, as scan tools export it (``P0A80 - Replace Hybrid Battery Pack``, ``U0100 Lost Communication With
# ECM/PCM A``), as long as it holds no other code (``_CODE_IN_DESCRIPTION_RE``: ``P0300 P0301`` is two codes,
# split by ``trouble_codes``). The blanks before a description are possessive: no backtracking over them.
# A dash right before a description in another script than Latin (``P0A7F-电池组电压不平衡``) cannot begin a
# failure type; a separator with nothing after it (``P0A7F -``, ``P0A7F:``, an empty description column) is
# read past.
_CODE_TAIL = (
    r"(?:\s*\([^()]*\)|\s*\[[^\[\]]*\]|\s+(?:" + "|".join(DTC_STATES) + r"))*"
    r"(?:(?:\s*+:\s*+|\s++[-\u2013\u2014]\s++|[-\u2013\u2014](?=[^\x00-\x7f])|\s++)"
    r"(?P<description>[^\s:(\[\u2013\u2014-].*))?"
    r"(?:\s*+[:\u2013\u2014-])?"
)
# A code in a description, in any form a code entry is read in (then it is no description: which code the
# entry means is not known). Run on the upper-cased entry.
_CODE_IN_DESCRIPTION_RE = re.compile(r"(?<![A-Z0-9])(?:[PCBU][0-9A-F]{4}|SPN[\s:=_-]*\d|0X[0-9A-F]{4})")
# An entry longer than this is no one code (a description is a line of a scan tool's export); a list of codes in
# one string is split first (``trouble_codes``). It bounds the regular expressions' work on hostile input.
MAX_CODE_ENTRY_CHARS = 200
DTC_RE = re.compile(r"^(?:DTC[\s:#-]*)?([PCBU][0-9A-F]{4})(?:[\s:/._-]?[0-9A-F]{2}){0,2}" + _CODE_TAIL + "$")
# Several codes in one string (``P0300,P0301``, ``P0300 P0301``): split at these, then at blanks.
# (the blanks around each part are stripped: a regex of them backtracks). The ideographic comma 、 too: a Chinese
# list's, which NFKC (``trouble_codes``) leaves as it is, while it makes ，；： the ASCII ones.
_CODE_LIST_RE = re.compile(r"[,;|\u3001]")
# SAE J1939 codes (trucks, buses, machines): a suspect parameter number (SPN, 0 to 524287) and a failure
# mode identifier (FMI, 0 to 31), however a gateway writes them (``SPN 1569 FMI 31``, ``spn1569/fmi31``,
# ``SPN:1569-FMI:31``); an occurrence count (``OC 3``) is left out, as a UDS failure type is. Read as
# ``SPN1569-FMI31``.
# The SPN and FMI with what a gateway writes around them; ``{ws}``: the blanks it may hold (a code field's
# any whitespace, free text's spaces and tabs: a code never runs on across lines).
_J1939 = r"SPN[{ws}:=_-]*(\d{{1,6}})[{ws},;/:_-]*FMI[{ws}:=_-]*(\d{{1,2}})"
# After them, a conversion method (``CM 0``) and an occurrence count (``OC 3``), then what may follow any code.
J1939_RE = re.compile(
    "^"
    + _J1939.format(ws=r"\s")
    + r"(?:[\s,;/:_-]*CM[\s:=_-]*[01])?(?:[\s,;/:_-]*OC[\s:=_-]*\d{1,3})?"
    + _CODE_TAIL
    + "$"
)
# A J1939 code written in free text (a model's summary, an alert's text) in any of those forms.
_J1939_IN_TEXT_RE = re.compile("(?<![A-Za-z0-9])" + _J1939.format(ws=r" \t") + "(?![0-9])", re.IGNORECASE | re.ASCII)
MAX_SPN, MAX_FMI = 524287, 31
CODE_EXAMPLES = "P0A7F or SPN1569-FMI31"
# A DTC as a gateway reading it over UDS writes its bytes in hex (``0x0A7F1B``: P0A7F, failure type 1B; ``0x0A7F``):
# the first two bytes (``uds_code``).
_UDS_HEX_RE = re.compile(r"0X([0-9A-F]{4})(?:[0-9A-F]{2})?$")
# The largest DTC as a number: three bytes (UDS), two (OBD's Mode 03).
MAX_UDS_DTC = 0xFFFFFF
MAX_OBD_DTC = 0xFFFF


def _j1939_code(match: re.Match[str]) -> str | None:
    """The one written form of a J1939 match's code; None when its SPN or FMI is out of range."""
    spn, fmi = int(match.group(1)), int(match.group(2))
    return f"SPN{spn}-FMI{fmi}" if spn <= MAX_SPN and fmi <= MAX_FMI else None


@lru_cache(maxsize=4096)  # as signal names (``signal_name``): a fleet sends the same codes over and over
def trouble_code(text: str) -> str | None:
    """A trouble code in its one written form (``P0A7F``, ``SPN1569-FMI31``; see ``DTC_RE`` and ``J1939_RE``),
    or None when ``text`` is none."""
    code = text.strip().upper()
    if len(code) > MAX_CODE_ENTRY_CHARS:
        return None
    if (match := DTC_RE.match(code)) is not None:
        return None if _other_code(match) else match.group(1)
    if (match := J1939_RE.match(code)) is not None:
        return None if _other_code(match) else _j1939_code(match)
    if (match := _UDS_HEX_RE.match(code)) is not None:
        return uds_code(int(match.group(1), 16))
    return None


def uds_code(number: int) -> str:
    """The code of a DTC as a number (``0x0A7F``, two bytes, ISO 15031-6; of three, UDS's ISO 14229, the third
    its failure type, left out as in ``P0A7F-1B``): the top two bits its letter, then four hex digits."""
    return f"{'PCBU'[number >> 14]}{(number >> 12) & 0x3}{number & 0xFFF:03X}"


def _other_code(match: re.Match[str]) -> bool:
    """Whether a code's match has a description that holds another code (``_CODE_IN_DESCRIPTION_RE``)."""
    description = match.group("description")
    return description is not None and _CODE_IN_DESCRIPTION_RE.search(description) is not None


def trouble_codes(text: str) -> list[str] | None:
    """The codes of one entry of an alert's ``dtc_codes``: one code (``trouble_code``), or several that a
    gateway wrote in one string, split at commas, semicolons or bars, else at blanks (each must be a code);
    None when it is neither. Full-width forms (``Ｐ０Ａ７Ｆ``, ``P0A7F，P0A80``, ``P0A7F：描述``) are read as their
    ASCII ones (NFKC), as a Chinese input method writes them."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    if (code := trouble_code(text)) is not None:
        return [code]
    for parts in ([part.strip() for part in _CODE_LIST_RE.split(text)], text.split()):
        if len(parts) > 1 and None not in (codes := [trouble_code(part) for part in parts if part]):
            return codes  # type: ignore[return-value]
    return None


def canonical_codes(text: str) -> str:
    """``text`` with every J1939 code it writes in another form (``SPN 1569 FMI 31``) in the one form
    (``SPN1569-FMI31``) that key facts, the fidelity check and recall read as a code."""
    # A case-blind scan of a whole source costs ~10 times the four plain searches that rule most texts out.
    if "PN" in text or "pn" in text or "Pn" in text or "pN" in text:
        return _J1939_IN_TEXT_RE.sub(lambda m: _j1939_code(m) or m.group(), text)
    return text


# A signal is any snake_case name with a finite number; its unit, where the
# name's suffix declares a known one, comes from vdoctor.units. No reading is
# rejected for the unit its name declares or lacks. A name is read as a
# fleet's payloads write one:
# - in lower case, with ``.``, ``-``, ``/``, ``:`` and spaces as ``_``
#   (``pack_temp_C``, ``Vehicle.Speed``, ``BMS/PackVolt``);
# - an index or unit in brackets as a part of its own, as a flattened payload
#   writes an array's items or a table its column (``cells[3].temp`` is
#   ``cells_3_temp``, ``Pack Voltage (V)`` is ``pack_voltage_v``);
# - ``%`` as the part ``pct``, and ``°`` left out (``SOC (%)``, ``temp_°C``); any other ASCII punctuation as a
#   break between words (``Fuel Level #1`` is ``fuel_level_1``);
# - camelCase and PascalCase words as parts of their own, a unit as one
#   (``cellVoltageDiff_mV`` is ``cell_voltage_diff_mv``, ``HVBattTempC``
#   ``hv_batt_temp_c``, ``tirePressureKPa`` ``tire_pressure_kpa``,
#   ``insulationResMOhm`` ``insulation_res_megohm``); digits stay with their
#   word (``12VBattery`` is ``12v_battery``), and so do the acronyms written
#   as SoC (``batterySoC`` is ``battery_soc``, not degrees Celsius);
# - outside ASCII, in Latin letters without their accents (``Température``
#   is ``temperature``, ``Öltemp`` ``oltemp``, ``ß`` ``ss``), full-width
#   forms as ASCII (``ＳＯＣ（％）``), and unit symbols as the suffixes write
#   them (``kΩ`` is ``kohm``, ``MΩ`` ``megohm``, ``µA`` ``ua``, ``℃`` ``c``);
#   such a symbol glued to a word starts a part of its own, with its prefix
#   (``leakCurrentµA`` is ``leak_current_ua``, ``cellResistancemΩ``
#   ``cell_resistance_mohm``, ``packTemp℃`` ``pack_temp_c``). A name in
#   another script (``电池温度``) has no such form: a dead letter that says so;
# - a unit written with a slash as its suffix (``speed_km/h`` is
#   ``speed_kmh``, ``Fuel rate (L/h)`` ``fuel_rate_lph``, ``r/min`` ``rpm``);
#   any other slash is a separator (``BMS/PackVolt``, ``A/C``).
# A number sent as a string is read as the number, with or without a unit
# (``_number_text``), true and false as 1 and 0, and a null reading (the sensor
# had no value) is left out.
_NAME_SEPARATORS = str.maketrans({".": "_", "-": "_", " ": "_", "/": "_", ":": "_", "%": "pct", "°": ""})
# After NFKD (``Ω`` the ohm sign is then the Greek omega, ``µ`` the micro sign the Greek mu): the unit
# symbols a name may hold, as the unit suffixes write them (``vdoctor.units``), and ``ß``.
_NAME_SYMBOLS = str.maketrans({"\u03a9": "ohm", "\u03bc": "u", "ß": "ss"})
# After NFKD: a unit symbol outside ASCII (micro, ohm with its prefix, degrees Celsius or Fahrenheit) glued to a
# letter or digit before it, where a part starts (``_latin_name``).
_GLUED_SYMBOL_RE = re.compile(
    r"(?<=[A-Za-z0-9])(?=[kKmMG]\u03a9|\u03bc[A-Za-z]|°[CFcf](?![A-Za-z]))|(?<=[A-Za-z0-9])(?<![kKmMG])(?=\u03a9)"
)
# A fleet's signal map as events are read: the name a signal sent under a name it holds is read as, else None
# (``vdoctor.signal_map.SignalRenames``); it reaches the signals' validator in the validation context, by this key.
Rename = Callable[[str], str | None]
RENAME = "rename"
# Readings set aside by the signals' validator because their text is no number (``NotANumber``) or reads as no
# one number in its name's unit (``Unreadable``): name as sent -> text, in the validation context by this key,
# for ``_set_aside`` (``event_of`` gives each event its own).
TEXT_ASIDE = "text_aside"
# Why each reading of ``TEXT_ASIDE`` that holds a number was set aside (``Unreadable.why``): name as sent ->
# (kind, detail), by this key. A reading that is no number has none (its text says why).
ASIDE_WHY = "aside_why"
# Trouble codes the job cannot read (``"XYZ"``, a number of four bytes): the entry as sent -> why, by this key,
# for ``_set_aside``; None: such a code refuses the alert.
CODES_ASIDE = "codes_aside"
# How a fleet's numbers use a comma, where one number could be read either way (``_ungrouped``): ``decimal``
# (``12,345`` is 12.345) or ``thousands`` (12345); None: such a number is refused, naming both. It reaches
# the signals' validator in the validation context, by this key.
NUMBER_COMMAS = ("decimal", "thousands")
NUMBER_COMMA = "number_comma"
# How a fleet sends a trouble code as a number (``_code_number``): ``uds``, three bytes, as a gateway reading
# DTCs over UDS reports them (687899 is 0x0A7F1B: P0A7F, failure type 1B), or ``obd``, two bytes, as an OBD
# dongle reports Mode 03's (768 is 0x0300: P0300). The same number reads as another code either way, so the
# fleet says which (``VDOCTOR_DTC_NUMBERS``); it reaches the codes' validator in the validation context, by
# this key.
DTC_NUMBER_FORMS = ("uds", "obd")
DEFAULT_DTC_NUMBERS = "uds"
DTC_NUMBERS = "dtc_numbers"
# A unit written with a slash (``km/h``, ``L/100km``) and the name's characters around it up to a separator.
_SLASH_UNIT_RE = re.compile(r"[^\s_.:()\[\]-]*/[^\s_.:()\[\]-]*")
# A part in brackets, ``[3]`` or `` (c)``, after a name's lower-casing: ``_3``, ``_c`` (empty: nothing).
_NAME_BRACKETS_RE = re.compile(r"\s*(?:\[([^\[\]()]*)\]|\(([^\[\]()]*)\))")
# ASCII punctuation left in a name once read (``#``, ``&``, ``+``, ``*``, ``,``, ``=``, ``!``, ``?``, ``'``, ``@``,
# ``$``, braces, a bar, a bracket without its pair), with the ``_`` around it: a break between words, as OBD tools
# name their export's columns (``Fuel Level #1`` is ``fuel_level_1``, ``Turbo Boost & Vacuum Gauge(psi)``
# ``turbo_boost_vacuum_gauge_psi``); such a name refused its alert.
# A match starts only where a run of ``_`` does (the lookbehind): from inside a run, the ``_*+`` was tried again at
# each of its positions, which took seconds on a name of 200,000 underscores.
_NAME_PUNCTUATION_RE = re.compile(r"(?<!_)_*+(?:[\x00-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]++_*+)++")
# A ``+`` is a word of its own (``HV+`` is ``hv_plus``, not ``hv`` beside ``HV``, which is another reading).
_NAME_PLUS_RE = re.compile(r"\+")
# What joins a compound unit's parts (``gal/h``, ``lb-ft``, ``N.m``, ``kW*h``, ``m^3``), in brackets
# (``_bracket_part``).
_UNIT_JOINS_RE = re.compile(r"[/.*^\u00b7-]")
# A % right after a letter or digit starts a part of its own (``soc%`` is ``soc_pct``).
_NAME_PERCENT_RE = re.compile(r"(?<=[a-z0-9])%")
# A name's ASCII words (``_camel_words``), and where a camelCase or PascalCase word starts inside one: at a
# capital after a lower-case letter, and at the last capital of a run that a lower-case letter follows
# (digits stay with the word before them). A field's name is split the same way (``contract_field``).
_NAME_WORD_RE = re.compile(r"[A-Za-z0-9]+")
_WORD_START_RE = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# A word that names a quantity, or a statistic of one, then a unit's prefix glued to it, before the unit (the
# "Voltagem" of cellVoltagemV, "Powerk" of packPowerkW, "Diffm" of cellVoltageDiffmV): the prefix is the
# unit's (``_camel_words``). Only after these words, as a name's other words may end in m or k (systemV, packV).
_GLUED_PREFIX_RE = re.compile(
    r"(?:voltage|volt|current|curr|resistance|res|impedance|power|energy|pressure|frequency|freq|insulation"
    r"|leakage|leak|capacity|diff|difference|delta|max|min|avg|mean|range|spread|drop|limit)[mku]$",
    re.IGNORECASE,
)
# A capital and one lower-case letter, which a capital follows in the acronyms batteries are described by
# (SoC, SoH, SoP, DoD): such a word and that capital are one part.
_ACRONYM_HEAD_RE = re.compile(r"[A-Z][a-z]")
# A number sent as text: decimal digits (ASCII), a point, an exponent; not 1_000, nan or other scripts' digits.
# A unit may follow it (``_number_text``).
_NUMBER_TEXT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?(?![0-9_])", re.ASCII)
# Numbers written with commas (``_ungrouped``): thousands grouped by commas, perhaps with a decimal point after
# them; thousands grouped by points before a decimal comma; a decimal comma. Each then ends the number.
# (A group's head is never 0: 0,187 is a decimal comma.)
_COMMA_GROUPS_RE = re.compile(r"([+-]?[1-9][0-9]{0,2}(?:,[0-9]{3})+)(\.[0-9]+)?(?![0-9,.])", re.ASCII)
_POINT_GROUPS_RE = re.compile(r"([+-]?[1-9][0-9]{0,2}(?:\.[0-9]{3})+),[0-9]+(?![0-9,.])", re.ASCII)
_DECIMAL_COMMA_RE = re.compile(r"([+-]?[0-9]+),[0-9]+(?![0-9,.])", re.ASCII)
# Thousands grouped by points with no decimals (``1.200``, ``1.234.567``), read so only where the fleet writes a
# decimal comma (``_ungrouped``). Not before an exponent: ``1.200e3`` is machine-written, its point a decimal one.
_POINT_THOUSANDS_RE = re.compile(r"([+-]?[1-9][0-9]{0,2}(?:\.[0-9]{3})+)(?![0-9,.eE])", re.ASCII)
# Event times: an ECU whose clock was never set reports 1970 or 2000-01-01,
# and a time beyond these bounds is a clock fault (near the years 1 and 9999
# the session arithmetic would not even run). Such an event is a dead letter
# that says so.
MIN_TS = datetime(2000, 1, 1, tzinfo=UTC)
MAX_TS = datetime(2200, 1, 1, tzinfo=UTC)
# Bounds on free text and collections: an alert is a short message from a
# vehicle, and an unbounded one would blow the model's context and the state.
MAX_TEXT_CHARS = 4000
MAX_DTC_CODES = 128
# Entries of an alert's code list as sent, before they are read as codes: the same code with its failure types
# (``P0A7F-00`` ... ``P0A7F-81``) is one code, and a list of 130 such entries was refused (a review).
MAX_DTC_ENTRIES = 4 * MAX_DTC_CODES
MAX_SIGNALS = 256
MAX_ID_CHARS = 128
# Beyond this magnitude a float no longer holds every integer exactly (2**53 is
# about 9e15), and no vehicle reading (an odometer in metres, an energy counter
# in Wh, even a timestamp in ms) comes near it: such a value is garbage.
MAX_SIGNAL_ABS = 1e15


# What a temperature cannot be, by its unit: below absolute zero.
_ABSOLUTE_ZERO = {"°C": -273.15, "K": 0.0, "°F": -459.67}
_RESISTANCES = frozenset({"Ω", "mΩ", "kΩ", "MΩ"})
# The words of a name that say what it measures: a temperature, a resistance; and the quantities never below
# zero, as the name's last word before its unit (``bms_soc_pct``; ``soc_temp_c`` is a chip's temperature).
_TEMPERATURE_WORDS = frozenset({"temp", "temps", "temperature", "temperatures", "tmp", "ntc", "therm"})
_RESISTANCE_WORDS = frozenset({"res", "resistance", "insulation", "isolation", "iso", "impedance"})
# The quantities never below zero, each with the units it is read in (None: no unit).
_NEVER_NEGATIVE_UNITS: dict[str, frozenset[str | None]] = {
    **dict.fromkeys(("soc", "soh"), frozenset({None, "%"})),
    **dict.fromkeys(("odometer", "odo", "mileage"), frozenset({None, "m", "km", "mi", "cm", "mm"})),
}
# Words that qualify a quantity without changing it (``soc_min_pct``, ``odometer_reading_km``).
_QUALIFIER_WORDS = frozenset({"min", "max", "avg", "mean", "display", "displayed", "reading", "value", "actual"})
# Words of a name that make its value a difference, a change or an error, which may be below zero whatever it
# measures (``cell_temp_diff_k``, ``soc_delta_pct``, ``odometer_offset_km``).
_DIFFERENCE_WORDS = frozenset(
    {"delta", "diff", "difference", "change", "rise", "drop", "offset", "error", "err", "rate", "spread", "gradient"}
)


def implausible(name: str, value: float) -> str | None:
    """Why no vehicle reads ``value`` for the signal ``name``, or None: a temperature below absolute zero, a
    resistance below zero, or a state of charge or health or an odometer below zero. Such a reading
    (``soh_pct`` = -5, a sensor's fault value) met a pack rule (``soh_pct<=70``: replace the pack, P1).

    Only where the name says what it measures: a phase-C current (``motor_phase_c``) is no temperature for
    its suffix, a difference (``cell_temp_diff_k``) may be below zero, a chip's ``soc_temp_c`` is no charge."""
    if value >= 0:
        return None
    words = name.split("_")
    if not _DIFFERENCE_WORDS.isdisjoint(words):
        return None
    unit = unit_of(name)
    if unit in _ABSOLUTE_ZERO and not _TEMPERATURE_WORDS.isdisjoint(words) and value < _ABSOLUTE_ZERO[unit]:
        return f"below absolute zero ({_ABSOLUTE_ZERO[unit]:g} {unit})"
    if unit in _RESISTANCES and not _RESISTANCE_WORDS.isdisjoint(words):
        return f"below zero (0 {unit})"
    # The quantity: the last word but an index, the unit's suffix and qualifiers (``soc_pct_3``, ``soc_min_pct``),
    # in a unit it is read in (``soc_max_c`` is a chip's temperature, ``soc_total_ah`` a charge count).
    while words and words[-1].isdigit():
        words.pop()
    if unit is not None and words and words[-1] in UNITS:
        words.pop()
    while words and words[-1] in _QUALIFIER_WORDS:
        words.pop()
    if words and unit in _NEVER_NEGATIVE_UNITS.get(words[-1], ()):
        return "below zero"
    return None


def session_id_for(vin: str, opened_at: datetime) -> str:
    """The deterministic session id: ``<vin>-<UTC ts of the opening alert as YYYYMMDDTHHMMSS>``."""
    at = opened_at.astimezone(UTC)
    if at.year < 1000:
        # strftime (glibc) leaves such a year unpadded; isoformat would pad it.
        return f"{vin}-{at:%Y%m%dT%H%M%S}"
    # The same digits cut from isoformat's YYYY-MM-DDTHH:MM:SS, several times faster than strftime.
    t = at.isoformat()
    return f"{vin}-{t[:4]}{t[5:7]}{t[8:10]}T{t[11:13]}{t[14:16]}{t[17:19]}"


def following_session_id(opening: str, previous: str | None) -> str:
    """The id of a session whose opening alert's id is ``opening`` (``session_id_for``), after the vehicle's
    session ``previous`` ended: ``opening`` itself, unless ``previous`` opened in the same second and so
    has it (or ``opening-<n>``); then the next of ``opening-2``, ``opening-3``, ... Two sessions of one
    id were one record in long-term memory: the second case replaced the first. The same events give the
    same ids again (a replay, a restore): the previous session is part of the vehicle's state."""
    index = None if previous is None else same_second_index(opening, previous)
    return opening if index is None else f"{opening}-{index + 1}"


def same_second_index(opening: str, session_id: str) -> int | None:
    """Which session of the second that ``opening`` (``session_id_for``) names ``session_id`` is: 1 for
    ``opening`` itself, n for ``opening-n`` (``following_session_id``); None for a session of another second
    (and for a milestone's id)."""
    if session_id == opening:
        return 1
    n = session_id[len(opening) + 1 :] if session_id.startswith(opening + "-") else ""
    return int(n) if n.isascii() and n.isdigit() else None


def vin_form(text: str) -> str:
    """A VIN as it is read: stripped and upper-cased, a full-width form (``ＬＳＶ…``) as its ASCII one (NFKC),
    characters of no width left out (a zero-width space or joiner, as a copy from a web page or a spreadsheet
    brings along), and blanks and dashes inside it where the rest is a VIN (``LSVAU2180N-2183294``)."""
    if not text.isascii():
        text = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    text = text.strip().upper()
    if len(text) > VIN_CHARS and ("-" in text or " " in text):
        # Grouped for reading (LSVAU2180N 2183294, LSVAU-2180N-2183294), as forms and labels print it: the VIN
        # without them, where that is one (no VIN holds a blank or a dash).
        if VIN_RE.match(bare := text.replace(" ", "").replace("-", "")):
            return bare
    return text


def key_vin(vin: object) -> str | None:
    """A VIN as a Kafka record key: as the parser reads it (``vin_form``: one key per vehicle); None for a value
    that is not text, is empty, or cannot be written as UTF-8 (a lone surrogate)."""
    if not isinstance(vin, str) or not (vin := vin_form(vin)):
        return None
    try:
        vin.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return vin


def has_snake_form(read: str) -> bool:
    """Whether a name as ``signal_name`` reads it is a snake_case candidate. One outside ASCII (another script,
    that no signal map entry renamed) has none: its reading is set aside (``AlertEvent.signals_set_aside``)."""
    return read.isascii()


# A fleet's payloads name the same few hundred signals over and over: each name is read once.
@lru_cache(maxsize=4096)
def signal_name(given: str) -> str:
    """A signal's name as sent, read as its snake_case name (the rules above); not checked here."""
    name = given.strip()
    if "/" in name:
        name = _SLASH_UNIT_RE.sub(_slash_unit, name)
    if not name.isascii():
        name = _latin_name(name)
    if not name.islower() and not name.isupper():
        name = _NAME_WORD_RE.sub(_camel_words, name)
    name = name.lower()
    if "[" in name or "(" in name:
        name = _NAME_BRACKETS_RE.sub(_bracket_part, name)
    if "%" in name:
        name = _NAME_PERCENT_RE.sub("_%", name)
    name = name.translate(_NAME_SEPARATORS)
    if "+" in name:
        name = _NAME_PLUS_RE.sub("_plus_", name).rstrip("_")
    return _NAME_PUNCTUATION_RE.sub(_word_break, name) if _NAME_PUNCTUATION_RE.search(name) else name


def _word_break(found: re.Match[str]) -> str:
    """Punctuation in a name (``signal_name``) as ``_`` between words, and as nothing at its start or end."""
    return "" if found.start() == 0 or found.end() == len(found.string) else "_"


def _latin_name(name: str) -> str:
    """A name outside ASCII in the Latin letters it holds (``signal_name``); other scripts left as they are."""
    # Ω as ohm keeps its prefix's case: MΩ is MOhm, megohms (``_camel_words``), mΩ mOhm, milliohms.
    name = _GLUED_SYMBOL_RE.sub("_", unicodedata.normalize("NFKD", name)).translate(_NAME_SYMBOLS)
    return "".join(c for c in name if not unicodedata.combining(c))


def _slash_unit(found: re.Match[str]) -> str:
    """A part of a name holding a slash: the suffix of the unit it writes (``km/h``: ``kmh``), else as it is."""
    symbol = slash_unit(found.group())
    return unit_suffix(symbol) if symbol is not None else found.group()


def _camel_words(found: re.Match[str]) -> str:
    """A camelCase or PascalCase word of a name as its parts joined by ``_`` (``signal_name``); a unit symbol
    stays whole (``mV``, ``kWh``), and so does one split from its prefix at the word's end (``KPa``, ``KOhm``)."""
    word = found.group()
    if word.islower() or word.isupper():
        return word
    parts: list[str] = []
    for part in [word] if unit_symbol(word) is not None else _WORD_START_RE.split(word):
        if parts and len(part) == 1 and part.isupper() and _ACRONYM_HEAD_RE.fullmatch(parts[-1]):
            parts[-1] += part  # SoC, SoH, DoD: one word (as "so" and "c" it would read as degrees Celsius)
        else:
            parts.append(part)
    if len(parts) > 1 and len(parts[-2]) == 1 and unit_symbol(parts[-2] + parts[-1]) is not None:
        parts[-2:] = [parts[-2] + parts[-1]]
    elif len(parts) > 1 and _GLUED_PREFIX_RE.search(parts[-2]) and unit_symbol(parts[-2][-1] + parts[-1]):
        # A unit's prefix glued to the quantity it measures (cellVoltagemV, packPowerkW): milli- or kilo- of
        # the unit, not a word "voltagem" and volts (1000 times the reading).
        parts[-2:] = [parts[-2][:-1], parts[-2][-1] + parts[-1]]
    # In lower case, MOhm would be mOhm and mW MW: a part in megohms or milliwatts is written as its suffix (any
    # other as it is).
    return "_".join(unit_suffix(symbol) if (symbol := unit_symbol(part)) in _CASED else part for part in parts)


# The units whose symbol in lower case is another unit's suffix (``signal_name``): megohms (``_mohm`` is
# milliohms) and milliwatts (``_mw`` is megawatts).
_CASED = frozenset({"M\u03a9", "mW"})


def _bracket_part(found: re.Match[str]) -> str:
    part = (found.group(1) if found.group(1) is not None else found.group(2)).strip()
    if _UNIT_JOINS_RE.search(part) and not any(c.isspace() for c in part):
        # A unit in brackets is read whole (``(N.m)`` is ``nm``), and one the table does not know as its
        # characters joined (``(gal/h)`` is ``galh``) where read as words its last part would be the name's
        # unit (``fuel_rate_gal_h`` in hours): a compound of letters with a slash, or one whose last part is
        # a unit (``(lb-ft)``, in feet). Parts with digits (``(1.2)``, ``(Bank-1)``, ``(1-12)``: joined,
        # ``(1.2)`` and ``(12)`` were one name) and labels (``(Pre-Cat)``, ``(X-axis)``) stay words.
        if (symbol := unit_symbol(part)) is not None:
            return "_" + unit_suffix(symbol)
        if not any(c.isdigit() for c in part):
            last = _UNIT_JOINS_RE.split(part)[-1].lower()
            if "/" in part or last in UNITS:
                return "_" + _UNIT_JOINS_RE.sub("", part)
    return "_" + part if part else ""


class NotANumber(ValueError):
    """A reading sent as text that holds no number the job reads: a state or a label (``ON``, ``CHARGING``,
    ``D``), metadata a platform keeps among its readings (a firmware version ``1.2.3``, a status word
    ``0x8001``, a position ``31.23,121.47``), or a number in a form the job does not read (``187 mV high``,
    ``inf``). In the signals' validator it is set aside (``AlertEvent.signals_set_aside``): the alert is
    diagnosed from its other readings, codes and text, and its line goes to the dead letters naming it."""


class Unreadable(ValueError):
    """A reading sent as text that holds a number, which cannot be read as one number in its name's unit: sent in a
    unit its name does not allow (``UnitConflict``), or written with a comma that reads two ways
    (``TwoWayComma``). Where the validation context has ``TEXT_ASIDE`` it is set aside as text that is no
    number is (``AlertEvent.signals_set_aside``), its reason kept (``AlertEvent.signals_set_aside_why``) for
    the dead letter (``set_aside_error``); elsewhere it refuses the alert with its message."""

    # The kind of reason, a key of ``_ASIDE_HEADINGS``.
    kind = ""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail

    @property
    def why(self) -> tuple[str, str]:
        """The reason as ``AlertEvent.signals_set_aside_why`` keeps it: (kind, detail)."""
        return self.kind, self.detail


class UnitConflict(Unreadable):
    """A reading in a unit of another quantity than its name's, or in one that differs from it by its case alone
    (``"41.5°"`` for ``pack_temp_c``, ``"5 MΩ"`` for ``insulation_res_mohm``): which one is right is not known."""

    kind = "unit"


class TwoWayComma(Unreadable):
    """A number with one comma before three digits alone (``"3,000 rpm"``: 3000 or 3.000?), when the fleet has
    not said how it writes a comma (``VDOCTOR_NUMBER_COMMA``)."""

    kind = "comma"


class TwoWayPoint(Unreadable):
    """A number with one point before three digits alone (``"1.200 rpm"``, ``"3.215 V"``) where the fleet writes a
    decimal comma (``VDOCTOR_NUMBER_COMMA=decimal``): thousands, or a machine's decimal point?"""

    kind = "point"


class SameName(Unreadable):
    """Two readings under one name (``pack_temp_C`` and ``pack_temp_c``): which one is the reading is not known,
    so both are set aside."""

    kind = "twice"


class Implausible(Unreadable):
    """A number no vehicle reads: over ``MAX_SIGNAL_ABS`` (an unset 64-bit counter, 2**64 - 1), not finite
    (``1e400``), or what the quantity cannot be (``implausible``: a temperature below absolute zero)."""

    kind = "range"


class NoName(Unreadable):
    """A reading whose name, once read (``signal_name``), is still no signal name (``SIGNAL_NAME_RE``): digits or
    punctuation alone (``2026_11``, ``#``), a ``_`` first, or longer than ``MAX_SIGNAL_NAME_CHARS``. The alert is
    read without it, as without a name in another script; such a name refused the alert."""

    kind = "form"


class NameTaken(Unreadable):
    """A reading whose name, with the unit its text gave it (``with_unit``), another reading of the alert has
    (``"battery_voltage": "12.6 V"`` beside ``"battery_voltage_v": 12.5``): the first one is kept."""

    kind = "name"


def with_unit(read: str, symbol: str) -> str | None:
    """The name a reading of the signal ``read`` (as ``signal_name`` reads it) sent in the unit ``symbol`` is kept
    under when that unit is the reading's own, not the name's: the name with the unit's suffix, where the name
    declares no unit (``insulation_res`` in MΩ: ``insulation_res_megohm``), or declares one by a suffix that may
    be a word of it and the unit is of another quantity (``units.word_suffix``: ``cell_voltage_min`` in V is a
    minimum, ``cell_voltage_min_v``). None where the name's unit holds (the reading is converted to it, or
    refused). One rule for a unit written in the text and one given beside the value (``reading_pairs``)."""
    declared = unit_of(read)
    if declared is None or _suffix_no_unit(read, symbol, declared):
        return f"{read}_{unit_suffix(symbol)}"
    return None


def _number_text(name: str, text: str, declared: str | None = None, comma: str | None = None) -> float:
    """A reading sent as text in the unit ``declared`` (``_read_number``): its number in that unit."""
    return _read_number(name, text, declared, comma)[0]


def _read_number(
    name: str, text: str, declared: str | None = None, comma: str | None = None
) -> tuple[float, str | None]:
    """A reading sent as text: a number, or a number and a unit of the table (``vdoctor.units``), as the number
    and the name it is kept under when that is another (``with_unit``), else None. In the unit the signal's
    name declares (``cell_voltage_diff_mv``: ``"187 mV"``; ``pack_temp_c``: ``"41.5°C"``) it is the number; in
    another unit of the same quantity it is converted to the name's (``"0.187 V"``: 187 mV, ``"105 °F"``:
    40.6 °C, ``"3 hrs"`` for ``idle_min``: 180); in a unit of another quantity, or one that differs from the
    name's by its case alone (mΩ and MΩ: ``_mohm`` may mean either) it is refused, naming both
    (``UnitConflict``). A name that declares no unit takes the number in the unit written, under its name with
    that unit's suffix, as a unit given beside the value is read (``"0.5 MΩ"`` for ``insulation_res``:
    ``insulation_res_megohm``, 0.5), and a number without a unit as sent (its unit stays unknown).
    ``declared``: the unit to read it in when not the name's (a reading whose unit is given beside it: the
    name is then that reading's, never another). ``comma``: how the fleet's numbers use a comma
    (``NUMBER_COMMAS``, ``_ungrouped``)."""
    if not text.isascii():  # full-width digits and signs (４１．５), as a Chinese input method writes them
        text = unicodedata.normalize("NFKC", text)
    if "," in (text := text.strip()) or comma == "decimal" and "." in text:
        text = _ungrouped(name, text, comma)
    if "\u2212" in text:  # the minus sign of typeset numbers (−5), as some locales' formatting writes it
        text = text.replace("\u2212", "-")
    number = _NUMBER_TEXT_RE.match(text)
    if number is None:
        raise NotANumber(f"signal {name[:40]} = {text[:20]!r} is not a number")
    value = float(number.group())
    if unit := text[number.end() :].strip():
        if (signed := _coordinate(name, text, value, unit)) is not None:
            return signed, None
        symbol = unit_symbol(unit)
        if symbol is None:
            if not text[number.end()].isspace() or not _unit_text(unit):
                raise NotANumber(f"signal {name[:40]} = {text[:20]!r} is not a number (nor one with a unit)")
            if (declared := declared or unit_of(name)) is not None and not names_unit(unit, declared):
                # (15 inHg for boost_kpa: which of the two holds is not known, and read in kPa it is 3.4 times off)
                raise UnitConflict(
                    f"signal {name[:40]} = {text[:20]!r}: {unit} is no unit the job knows, its name's unit is "
                    f"{declared}: send the number in {declared}",
                    f"{unit} is no unit the job knows, the name's unit is {declared}",
                )
            # (12 gal, 28 mpg: the number, its unit unknown, as {"value": 12, "unit": "gal"}; 15 kPa(g) for boost_kpa:
            # in the name's unit)
            return value, None
        if declared is None and (renamed := with_unit(name, symbol)) is not None:
            return value, renamed  # (the name declares no unit, or its suffix is a word: the unit is the reading's)
        if (declared := declared or unit_of(name)) is not None and symbol != declared:
            converted = convert(value, symbol, declared)
            if converted is None:
                raise UnitConflict(
                    f"signal {name[:40]} = {text[:20]!r} is in {symbol}, its name's unit is {declared}: "
                    f"send the number in {declared}",
                    f"{symbol}, the name's unit is {declared}",
                )
            return converted, None
    return value, None


# What a template writes where a unit's field has none (beside ``NO_READING_TEXTS``).
_NO_UNIT_WORDS = frozenset({"unit", "units", "1", "?"})


def names_unit(unit: str, declared: str) -> bool:
    """Whether ``unit``, which the table does not know, says the name's own unit ``declared`` or none: a mark of
    no unit (``N/A``, ``-``, ``none``, ``unit``), or the unit's symbol with a qualifier after it (``kPa(g)``,
    ``kPaG``: a symbol of two characters or more, so that ``mpg`` is not metres). Read in ``declared``, as it
    was before units the table does not know were set aside for a name that declares one."""
    if no_reading(unit) or unit.strip().lower() in _NO_UNIT_WORDS:
        return True
    # In its written case: "mPa" is no MPa (the table reads milli and mega by their case).
    return len(declared) >= 2 and unit.strip().startswith(declared)


# The most characters of a unit the table does not know after a number (``_unit_text``: ``kWh/100km``, ``µg/m³``).
MAX_UNIT_TEXT_CHARS = 16


def _unit_text(unit: str) -> bool:
    """Whether what follows a reading's number after a blank (``_read_number``) reads as a unit the table does not
    know (``gal``, ``psig``, ``lb-ft``, ``g/km``, ``kWh/100km``, ``µg/m³``): one word of at most
    ``MAX_UNIT_TEXT_CHARS``, a letter first (or ``°``, ``µ``, ``%`` before one). Not more text (``187 mV high``),
    digits (``1 234``), nor, glued to the number, a version's or a position's rest (``1.2.3``, ``31.23,121.47``),
    a hex number's (``0x8001``) or a cut exponent (``12.6e``): the caller asks for the blank."""
    return (
        len(unit) <= MAX_UNIT_TEXT_CHARS
        and (unit[0].isalpha() or unit[0] in "°µ%")
        and any(c.isalpha() for c in unit)
        and not any(c.isspace() or c in ",;" for c in unit)
    )


# A signal whose name is a latitude or a longitude (a word of it: ``gps_lat``, ``longitude``), and the hemisphere
# letters (any case) and Chinese words GPS receivers and platforms write after such a coordinate, with the axis
# each belongs to and its sign: south and west are negative (``"33.87S"`` is -33.87; as ``W`` it would be watts).
# A coordinate's name: the axis alone, or after a word that says position (``gps_lat``, ``latitude``,
# ``pos_lon_deg``). Not lat or lon anywhere in a name: in vehicle dynamics they are lateral and longitudinal
# (``lat_response_time_s``, ``brake_force_lon`` in N), whose units N, S and W are a hemisphere's letters too.
_COORDINATE_NAME_RE = re.compile(
    r"^(?:(?:gps|gnss|geo|nav|pos|position|loc|location|vehicle|veh|current|cur|last|home|start|end|dest"
    r"|destination)_)?"
    r"(?:(lat|latitude)|lon|lng|longitude)(?:_deg(?:rees)?)?$"
)
_HEMISPHERES = {
    "n": ("lat", 1.0), "s": ("lat", -1.0), "e": ("lon", 1.0), "w": ("lon", -1.0),
    "北纬": ("lat", 1.0), "南纬": ("lat", -1.0), "东经": ("lon", 1.0), "西经": ("lon", -1.0),
}  # fmt: skip


def _coordinate(name: str, text: str, value: float, unit: str) -> float | None:
    """A coordinate's reading with its hemisphere after it (``"121.47W"``, ``"33.87 S"``, ``"31.23°N"``,
    ``"121.47东经"``) as its signed number, for a signal whose name is a latitude or a longitude; None for any
    other name or unit. A hemisphere of the other axis (a latitude east), or one after a signed number, is a
    reading its name does not allow (``UnitConflict``)."""
    hemisphere = _HEMISPHERES.get(unit.removeprefix("°").strip().lower())
    if hemisphere is None or (named := _COORDINATE_NAME_RE.search(name)) is None:
        return None
    axis, sign = hemisphere
    if axis != ("lat" if named.group(1) else "lon"):
        detail = f"{unit}, a latitude's hemisphere is N or S" if named.group(1) else f"{unit}, a longitude's is E or W"
        raise UnitConflict(f"signal {name[:40]} = {text[:20]!r}: {detail}", detail)
    if text[:1] in ("+", "-"):
        raise UnitConflict(
            f"signal {name[:40]} = {text[:20]!r} has a sign and a hemisphere: which one holds is not known",
            f"{unit} after a signed number",
        )
    return sign * value


def _suffix_no_unit(name: str, symbol: str, declared: str) -> bool:
    """Whether a reading of ``name`` (whose suffix declares ``declared``) sent in ``symbol`` tells that the suffix
    is a word, not its unit (``with_unit``): a suffix that may be either (``units.word_suffix``), and a unit
    of another quantity."""
    if not other_quantity(symbol, declared):
        return False
    # A letter's suffix (o2_sensor_a in V: sensor A) too, but a bare degree sign for a temperature: its degrees'
    # scale is not written, and read as an angle it would be no temperature.
    return word_suffix(name) or letter_suffix(name) and not (symbol == "°" and declared in _ABSOLUTE_ZERO)


def _ungrouped(name: str, text: str, comma: str | None = None) -> str:
    """A number written with a comma (``_number_text``), in plain digits: grouped in thousands by commas
    (``12,345,678``, ``12,345.6``) or by points before a decimal comma (``12.345,6``), or with a decimal comma
    (``41,5``, ``0,187 V``). One comma before three digits alone (``12,345``) may be either, a thousand times
    apart: read as the fleet's ``comma`` says (``decimal``: 12.345, ``thousands``: 12345), and without it
    refused, naming both and the setting. Where the fleet writes a decimal comma, points that group a number's
    digits in threes twice or more are thousands (``1.234.567``); one point before three digits alone
    (``1.200``, ``3.215``) reads two ways even there (thousands, or a machine's decimal point: printf's ``%.3f``)
    and is refused naming both; any other point stays a decimal one (``3.7``, ``0.500``, ``1.2345``: the numbers
    machines write, with a point whatever the fleet's locale). Any other text is left as it is (and refused by
    the caller if no number)."""
    if (grouped := _COMMA_GROUPS_RE.match(text)) is not None:
        digits, point = grouped.group(1, 2)
        if digits.count(",") == 1 and point is None:
            grouping, fraction = digits.replace(",", ""), digits.replace(",", ".")
            if comma is None:
                raise TwoWayComma(
                    f"signal {name[:40]} = {text[:20]!r}: {grouping} or {fraction}? send the number without a "
                    f"thousands separator, with a point before its decimals, or set {NUMBER_COMMA_ENV} to how the "
                    "fleet writes numbers (decimal or thousands)",
                    f"{grouping} or {fraction}?",
                )
            return (fraction if comma == "decimal" else grouping) + text[len(digits) :]
        return digits.replace(",", "") + text[len(digits) :]
    if (grouped := _POINT_GROUPS_RE.match(text)) is not None:
        return grouped.group(1).replace(".", "") + "." + text[grouped.end(1) + 1 :]
    if (decimal := _DECIMAL_COMMA_RE.match(text)) is not None:
        return decimal.group(1) + "." + text[decimal.end(1) + 1 :]
    if comma == "decimal" and (grouped := _POINT_THOUSANDS_RE.match(text)) is not None:
        digits = grouped.group(1)
        if digits.count(".") == 1:
            # One point before three digits reads two ways even here: thousands (1.200 rpm) or the decimal point
            # of a machine's number with three decimals (3.215 V, printf's %.3f), a thousand times apart.
            grouping, fraction = digits.replace(".", ""), digits
            raise TwoWayPoint(
                f"signal {name[:40]} = {text[:20]!r}: {grouping} or {fraction}? where the fleet writes a decimal "
                "comma a point before three digits may group thousands or be a machine's decimal point: send the "
                "number without a thousands separator, or with more or fewer than three decimals",
                f"{grouping} or {fraction}?",
            )
        return digits.replace(".", "") + text[grouped.end(1) :]
    return text


def digits_as_read(text: str, comma: str | None = None) -> str:
    """A reading's text with a comma in it, or a point under a decimal comma, as its number is read
    (``_ungrouped``: ``"1,200 rpm"`` is ``"1200 rpm"`` with thousands, ``"41,5"`` is ``"41.5"``, ``"1.200 rpm"``
    ``"1200 rpm"`` with decimal); ``ValueError`` where it is refused."""
    return _ungrouped("", text.strip(), comma)


def lower_keys(obj: dict[object, object]) -> dict[str, object]:
    """An object's fields by their names in lower case (a reading's or a code's object, keys in any case)."""
    return {str(k).lower(): v for k, v in obj.items()}


def reading_pairs(
    items: list[dict[object, object]], rename: Rename | None = None, comma: str | None = None
) -> list[tuple[object, object]]:
    """Readings sent as a list of objects (``[{"name": "Pack Temp", "value": 41.5, "unit": "°C"}]``, keys in
    any case) as (name, value) pairs: a unit of the table that the name does not declare becomes its suffix
    (``pack_temp_c``), one other than the name's converts the value to the name's (as ``_number_text``,
    and refused where that refuses), one not in the table leaves the name as it is (the reading's unit
    unknown, as a name's unknown suffix), unless the name declares a unit: then it is set aside, as the same
    number and unit in text are. ``rename``: the fleet's signal map, applied to each name before
    its unit (``parse_event``); ``comma``: how its numbers use a comma (``_ungrouped``)."""
    pairs: list[tuple[object, object]] = []
    for item in items:
        fields = lower_keys(item)
        name, unit = fields.get("name"), unit_field(fields)
        if not isinstance(name, str) or "value" not in fields:
            raise ValueError(f'a reading needs a "name" and a "value", got {json.dumps(item, default=str)[:80]}')
        if rename is not None:
            name = rename(name) or name
        if isinstance(unit, str) and (symbol := unit_symbol(unit)) is not None:
            read = signal_name(name)
            if not has_snake_form(read):  # set aside under its name as sent (``AlertEvent``)
                pairs.append((name, fields["value"]))
                continue
            if (renamed := with_unit(read, symbol)) is not None:
                name = renamed
            elif (declared := unit_of(read)) is not None and declared != symbol:
                pairs.append((name, _in_unit(read, fields["value"], symbol, declared, comma)))
                continue
        elif isinstance(unit, str) and unit.strip() and is_finite_number(fields["value"]):
            read = signal_name(name)
            if has_snake_form(read) and (declared := unit_of(read)) is not None and not names_unit(unit, declared):
                # A unit the table does not know for a name that declares one (boost_kpa in inHg): as the same
                # reading with its unit in its text, "15 inHg", set aside naming both (read in kPa, it was 3.4
                # times off).
                pairs.append((name, f"{fields['value']} {unit.strip()}"))
                continue
        pairs.append((name, fields["value"]))
    return pairs


def _in_unit(name: str, value: object, symbol: str, declared: str, comma: str | None = None) -> object:
    """A reading's value sent in ``symbol`` (a number, or text as ``_number_text`` reads it) in the name's
    unit ``declared``; a null value stays null (left out), and text that is no number (``NotANumber``) as it is:
    the signals' validator sets it aside, as it does such text sent in the name's own unit."""
    if no_reading(value):
        return None
    if isinstance(value, str):
        try:
            value = _number_text(name, value, symbol, comma)  # its number in ``symbol``
        except (NotANumber, UnitConflict):
            return value  # (read again, and set aside, where the alert is read)
    converted = convert(value, symbol, declared) if is_finite_number(value) else None  # type: ignore[arg-type]
    if converted is None:
        # As the same reading written with its unit in its text, ``"41.5 V"``: set aside where the alert is read
        # (``UnitConflict``); it refused the alert, which the text's form never did.
        return f"{value} {symbol}"
    return converted


# What platforms write for a sensor that gave no value (a CSV's empty cell, "N/A", "--", pandas' NaN,
# GB/T 32960's 无效 "invalid"), in any case: no reading, as null is (``no_reading``).
NO_READING_TEXTS = frozenset({"", "-", "--", "---", "n/a", "na", "null", "none", "nan", "无", "无效"})


def no_reading(value: object) -> bool:
    """Whether a reading's value says the sensor gave none: null, or one of ``NO_READING_TEXTS``."""
    return (
        value is None
        or (isinstance(value, str) and value.strip().lower() in NO_READING_TEXTS)
        or type(value) is JsonConstant
    )


# The keys that name a reading's unit beside its value (``unit`` first).
UNIT_KEYS = ("unit", "units", "uom")


def value_object(value: object) -> bool:
    """Whether ``value`` is a reading as an object under its name, its value with its unit beside it
    (``{"pack_temp_c": {"value": 41.5, "unit": "°C"}}``, keys in any case): a ``value``, and a unit (``UNIT_KEYS``)
    or no other number, so that what a platform writes about a reading beside it (its time, quality, status)
    is left out with it, while ``{"value": 1, "ts": 1762000000}`` is a nested payload of two readings."""
    if not isinstance(value, dict):
        return False
    fields = lower_keys(value)
    if "value" not in fields:
        return False
    if any(key in fields for key in UNIT_KEYS):
        return True
    return not any(
        isinstance(v, int | float | dict | list) and not isinstance(v, bool) for k, v in fields.items() if k != "value"
    )


def unit_field(fields: dict[str, object]) -> object:
    """A reading object's unit (``UNIT_KEYS``, the first given that is not null), or None."""
    return next((fields[key] for key in UNIT_KEYS if fields.get(key) is not None), None)


def named_reading(name: str, value: dict[object, object]) -> dict[object, object]:
    """A reading sent as an object under its name (``value_object``) as a list's reading: its ``name``, its
    ``value`` and ``unit`` (keys in lower case), which ``reading_pairs`` reads."""
    item: dict[object, object] = {"name": name}
    item.update(lower_keys(value))
    return item


def flat_signals(signals: dict[object, object]) -> list[tuple[str, object]]:
    """Readings nested in objects and arrays, as a telematics platform's payload nests them
    (``{"bms": {"PackTemp": 41.5, "cell_v": [3.61, 3.62]}}``), as (name, value) pairs named by their path as
    a platform that flattens it writes it: a key after a ``.``, an array's item by its index from 0 in
    brackets (``bms.PackTemp``, ``bms.cell_v[0]``), which ``signal_name`` reads as ``bms_pack_temp`` and
    ``bms_cell_v_0``. An empty object or array is no reading. A reading as an object (``value_object``) is
    one pair, its value that object. Stops one reading past ``MAX_SIGNALS`` (the alert is then refused for
    its count)."""
    pairs: list[tuple[str, object]] = []
    stack: list[tuple[str, object]] = [(str(k), v) for k, v in reversed(signals.items())]
    while stack and len(pairs) <= MAX_SIGNALS:
        path, value = stack.pop()
        if isinstance(value, dict) and not value_object(value):
            stack += [(f"{path}.{k}", v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            stack += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
        else:
            pairs.append((path, value))
    return pairs


# The fields of a code sent as an object that hold its code (keys in lower case).
_CODE_KEYS = ("code", "dtc", "dtc_code", "dtccode")
# The fields that make an object in place of ``dtc_codes`` one code, not codes as its keys.
_CODE_OBJECT_KEYS = frozenset((*_CODE_KEYS, "spn", "fmi"))


def _json_in_text(text: str) -> object:
    """A field's JSON sent as a string (``"[\"P0301\"]"``, ``"{\"pack_temp_c\": 41.5}"``: a doubly-encoded
    payload), read as a line is (``_load_json``); the text as it is when it is no JSON."""
    try:
        return _load_json(text)
    except (ValueError, RecursionError):
        return text


def _code_entry(entry: dict[object, object], numbers: str) -> object:
    """A code sent as an object: its ``code`` or ``dtc`` (``{"code": "P0A7F", "status": "active"}``), or a
    J1939 ``spn`` and ``fmi`` (``{"spn": 1569, "fmi": 31}``); keys in any case, the others left out.
    ``numbers``: how the fleet sends a code as a number (``DTC_NUMBER_FORMS``)."""
    fields = lower_keys(entry)
    if (code := _code_field(fields)) is not None:
        return code if isinstance(code, str) else _code_number(code, numbers)
    # A platform that writes every number as a float sends 1569.0: a whole float is its digits, as an id's is.
    spn, fmi = _whole_number_digits(fields.get("spn")), _whole_number_digits(fields.get("fmi"))
    if isinstance(spn, int | str) and isinstance(fmi, int | str) and not isinstance(spn, bool | float):
        parts = str(spn).strip(), str(fmi).strip()
        if not all(part.isdigit() for part in parts):
            raise ValueError(f"SPN {parts[0][:12]!r} and FMI {parts[1][:12]!r} must be whole numbers from 0")
        return f"SPN{parts[0]}-FMI{parts[1]}"
    if any(key in fields and no_reading(fields[key]) for key in _CODE_KEYS):
        return ""  # (a code field that says there is none, null or "N/A", and no other code: no code)
    raise ValueError(f'a code entry needs a "code" (or "spn" and "fmi"), got {json.dumps(entry, default=str)[:80]}')


def _code_field(fields: dict[str, object]) -> str | int | None:
    """The code of a code sent as an object (its keys in lower case: ``lower_keys``): the first of ``_CODE_KEYS``
    that holds text other than no reading, or a whole number (``_code_number``); None when none does."""
    for key in _CODE_KEYS:
        if isinstance(code := fields.get(key), str) and not no_reading(code):
            return code
        if type(code := _whole(code)) is int:
            return code
    return None


def _whole(value: object) -> object:
    """A code sent as a whole float (``768.0``, as a platform that writes every number as a float sends it) as
    its int; any other float is no code; any other value as it came."""
    if type(value) is not float:
        return value
    if not value.is_integer() or abs(value) >= _EXACT_FLOAT_INT:
        raise ValueError(f"{_code_number_text(value)} is not a trouble code (a code sent as a number is whole)")
    return int(value)


def code_number_of(entry: object) -> int | None:
    """The number a code entry of ``dtc_codes`` sends its code as (``768``, ``768.0``, ``{"code": 768}``), else
    None (also for a number that is no code)."""
    try:
        code = _code_field(lower_keys(entry)) if isinstance(entry, dict) else _whole(entry)
    except ValueError:
        return None
    return code if type(code) is int else None


def _code_number_text(number: float) -> str:
    """A number as an error names it: at most 24 characters, cut with "…"."""
    text = str(number)
    return text if len(text) <= 24 else text[:23] + "…"


def _code_number(number: int, numbers: str) -> str:
    """A code sent as a number, as its code (``uds_code``). ``numbers`` (``DTC_NUMBER_FORMS``): ``uds``, a DTC
    of three bytes as a gateway reading it over UDS reports it (687899 is 0x0A7F1B: P0A7F, failure type 1B;
    its first two bytes are the code), or ``obd``, two bytes as an OBD dongle reports Mode 03's (768 is
    0x0300: P0300; 0, as a Mode 03 reply pads its last pair, is no code)."""
    if numbers == "obd":
        if number == 0:
            return ""
        if not 0 <= number <= MAX_OBD_DTC:
            raise ValueError(
                f"{_code_number_text(number)} is not a trouble code: an OBD DTC is a number of two bytes "
                f"({DTC_NUMBERS_ENV}=obd; uds reads three)"
            )
        return uds_code(number)
    if not 0 <= number <= MAX_UDS_DTC:
        raise ValueError(f"{_code_number_text(number)} is not a trouble code (a UDS DTC is a number of three bytes)")
    # 0 (and its failure type alone, below 256) is no code: a list padded with zeros, as an OBD reply pads its
    # last pair; it was read as P0000 (an audit).
    return uds_code(number >> 8) if number >> 8 else ""


def given_vin(text: str) -> str:
    """A VIN a user gives a command or the inspector (``--vin``, a page's path), read as an event's
    (``vin_form``: any case, full-width, blanks around); a ``ValueError`` when it is no VIN."""
    vin = vin_form(text)
    if not VIN_RE.match(vin):
        raise ValueError(f"{text[:40]!r} is not a VIN (17 characters, digits and capitals but I, O, Q)")
    return vin


def given_codes(texts: list[str]) -> list[str]:
    """Trouble codes a user gives a command or the inspector (``--codes``, ``?codes=``), read as the job reads
    an alert's (``trouble_codes``: ``P0A7F-1B``, ``DTC P0A7F``, ``SPN 1569 FMI 31``), each once; a
    ``ValueError`` names the first that is none."""
    codes: list[str] = []
    for text in texts:
        read = trouble_codes(text)
        if read is None:
            raise ValueError(f"{text[:40]!r} is not a trouble code (e.g. P0A7F or SPN1569-FMI31)")
        codes += read
    return list(dict.fromkeys(codes))


def given_time(text: str) -> datetime:
    """A time a user gives a command or the inspector (``--as-of``, ``--at``, ``?at=``): ISO-8601 with a
    timezone, read as an event's time is (UTC, to the second, between ``MIN_TS`` and ``MAX_TS``). A
    ``ValueError`` names what is wrong, for the caller to prefix with the option's name."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO-8601 time: {text[:40]!r} (e.g. 2026-11-05T10:00:00Z)") from None
    if value.tzinfo is None:
        raise ValueError(f"{text[:40]!r} has no timezone (e.g. 2026-11-05T10:00:00Z)")
    try:
        return _to_utc_second(value)
    except ValueError:
        raise ValueError(
            f"{text[:40]!r} is not between {MIN_TS.year} and {MAX_TS.year - 1}, as an event's time is"
        ) from None


def _to_utc_second(value: datetime) -> datetime:
    if value.tzinfo is not UTC or value.microsecond:
        try:
            value = value.astimezone(UTC).replace(microsecond=0)
        except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00: before the year 1 in UTC
            raise ValueError(f"{value.isoformat()} is out of range") from None
    # (Already UTC to the second is the usual case: see ``_iso_string``.)
    if not MIN_TS <= value < MAX_TS:
        raise ValueError(
            f"{value.isoformat().replace('+00:00', 'Z')} is not between {MIN_TS.year} and {MAX_TS.year - 1} "
            "(is the vehicle's clock set?)"
        )
    return value


def _none_as(default: object) -> Any:
    """A before-validator reading null as ``default`` (a field a vehicle sends as null when it has nothing)."""

    def read(value: object) -> object:
        return default if value is None else value

    return read


# The form events are written in, UTC to the second (``2026-11-01T08:15:30Z``): such a
# string is read by ``datetime.fromisoformat``, several times faster than a parse
# followed by ``_to_utc_second``'s conversion, to the same value. Other forms, and a
# string of this form that is not a date (month 13), take pydantic's parse and errors.
_UTC_SECOND_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


# Times as platforms and exports write them besides ISO 8601, each rewritten in the ISO form and then
# read as any ISO time (without a zone: in ``VDOCTOR_NAIVE_TS_ZONE``'s): a date with ``/`` or ``.``
# and unpadded parts (``2026/11/1 8:15:30``, as Chinese platforms and spreadsheets write it), a zone
# after a blank (``08:15:30 UTC``, ``08:15:30 +08:00``), and the 14 digits ``YYYYMMDDhhmmss`` (text or
# a number) in which GB/T 32960 platforms keep a terminal's time (as a Unix time in milliseconds those
# digits would be after the year 2600: never a time this reads).
# Unix times in microseconds and nanoseconds start here (``_unix_fine``): 1e14 us is 1973, 1e17 ns is 1973.
UNIX_MICROS_FROM, UNIX_NANOS_FROM = 10**14, 10**17
_LOOSE_DATE_RE = re.compile(r"([0-9]{4})[-/.]([0-9]{1,2})[-/.]([0-9]{1,2})(?:([ T])([0-9]{1,2})(?=:))?")
# A zone after a blank, or UTC/GMT glued to the time, with an offset after it as Java, JavaScript and Chinese
# platforms write one (``08:15:30UTC``, ``16:15:30 GMT+8``, ``16:15:30 UTC+08:00``).
_ZONE_AFTER_BLANK_RE = re.compile(
    r"(?: ?(?:UTC|GMT)|(?<=[0-9]) Z)([+-][0-9]{1,2}(?::?[0-9]{2})?)?\Z|(?<=[0-9]) ([+-][0-9]{2}:?[0-9]{2})\Z",
    re.IGNORECASE,
)


def _iso_zone(found: re.Match[str]) -> str:
    """A zone ``_ZONE_AFTER_BLANK_RE`` found as ISO 8601 writes it: ``Z``, or the offset as ``+08:00``."""
    offset = found.group(1) or found.group(2)
    if offset is None:
        return "Z"
    digits = offset[1:].replace(":", "")
    hours, minutes = (digits[:-2], digits[-2:]) if len(digits) > 2 else (digits, "00")
    return f"{offset[0]}{int(hours):02d}:{minutes}"


# ISO 8601's basic format (``20261101T081530Z``, as AWS and iCalendar write it), its fraction and zone kept.
_BASIC_TIME_RE = re.compile(
    r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})((?:[.,][0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)",
    re.IGNORECASE,
)
_COMPACT_TIME_RE = re.compile(r"(2[01][0-9]{2})([0-9]{2})([0-9]{2})([0-9]{2})([0-9]{2})([0-9]{2})")
# A time with the month by its English name, as HTTP and e-mail (RFC 2822: ``Sun, 01 Nov 2026 08:15:30 GMT``)
# and JavaScript's ``Date.toString()`` (``Sun Nov 01 2026 16:15:30 GMT+0800 (China Standard Time)``) write it,
# with its zone written as GMT, UTC, Z or an offset, or with none (then read as any time without a zone); a
# zone's abbreviation (CST: China or the US Central?) is refused, as any other text.
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), start=1)}
_DAY = r"(?:(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*,?\s+)?"
_CLOCK = r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?(?:\s*(gmt|utc|ut|z))?(?:\s*([+-][0-9]{2}:?[0-9]{2}))?"
_NAMED_MONTH_RE = re.compile(
    rf"{_DAY}(?:([0-9]{{1,2}})\s+([a-z]{{3}})[a-z]*\.?|([a-z]{{3}})[a-z]*\.?\s+([0-9]{{1,2}}),?)\s+([0-9]{{4}})\s+"
    rf"{_CLOCK}(?:\s*\([^()]*\))?",
    re.IGNORECASE,
)


def _iso_form(value: object) -> object:
    """``value`` as an ISO 8601 time where it writes one in another form (the forms above); else as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and 20000101000000 <= value < 22000101000000:
        value = str(value)
    elif (seconds := _unix_fine(value)) is not None:
        return seconds
    if not isinstance(value, str):
        return value
    text = value
    if (compact := _COMPACT_TIME_RE.fullmatch(text)) is not None:
        return "{}-{}-{}T{}:{}:{}".format(*compact.groups())
    if text.endswith("]") and (bracket := text.rfind("[")) > 0:
        return _zone_in_brackets(text[:bracket], text[bracket + 1 : -1])
    if (basic := _BASIC_TIME_RE.fullmatch(text)) is not None:
        year, month, day, hour, minute, second, rest = basic.groups()
        return f"{year}-{month}-{day}T{hour}:{minute}:{second}{rest}"
    if text[:1].isalpha() or " " in text[:3]:
        return _named_month(text)
    if (date := _LOOSE_DATE_RE.match(text)) is not None:
        year, month, day, sep, hour = date.groups()
        head = f"{year}-{int(month):02d}-{int(day):02d}" + (f"{sep}{int(hour):02d}" if hour is not None else "")
        text = head + text[date.end() :]
    return _ZONE_AFTER_BLANK_RE.sub(_iso_zone, text)


def _zone_in_brackets(time: str, zone: str) -> object:
    """A time with its zone's name in brackets after it, as Java's ``ZonedDateTime.toString()`` writes it
    (``2026-11-01T16:15:30.123+08:00[Asia/Shanghai]``, ``...Z[UTC]``): its offset where it writes one, else
    the named zone's at that time (a repeated hour read as its first occurrence). A name that is no zone
    leaves the text as it is (refused as any other)."""
    read = _iso_form(time)
    if not isinstance(read, str):
        return f"{time}[{zone}]"
    try:
        at = datetime.fromisoformat(read)
    except ValueError:
        return f"{time}[{zone}]"
    if at.tzinfo is not None:
        return at
    try:
        return at.replace(tzinfo=time_zone(zone))
    except ValueError:
        return f"{time}[{zone}]"


def _unix_fine(value: object) -> float | None:
    """A Unix time in microseconds or nanoseconds (a number, or a string of its digits), as Java's ``Instant``,
    Go's ``UnixNano``, InfluxDB and OpenTelemetry (``time_unix_nano``) write it, in seconds; None for any other
    value. Told apart by size: from 2000 to 2199 a time in seconds has 9 or 10 digits, in milliseconds 12 or
    13, in microseconds 15 or 16, in nanoseconds 18 or 19 (the 14 digits between are ``YYYYMMDDhhmmss``)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        number: float = int(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = value
    else:
        return None
    if UNIX_MICROS_FROM <= number < UNIX_NANOS_FROM:
        return number / 1e6
    if UNIX_NANOS_FROM <= number < UNIX_NANOS_FROM * 1000:
        return number / 1e9
    return None


def _named_month(text: str) -> str:
    """A time with its month's English name (``_NAMED_MONTH_RE``) in ISO form; any other text as it is."""
    found = _NAMED_MONTH_RE.fullmatch(text.strip())
    if found is None:
        return text
    day_first, month_first, month_then, day_then, year, hour, minute, second, utc, offset = found.groups()
    month = _MONTHS.get((month_first or month_then).lower())
    if month is None:
        return text
    day = int(day_first or day_then)
    zone = (offset if ":" in offset else f"{offset[:3]}:{offset[3:]}") if offset else "Z" if utc else ""
    return f"{year}-{month:02d}-{day:02d}T{int(hour):02d}:{minute}:{second or '00'}{zone}"


# The largest whole number a JSON float holds exactly: above it, two ids a digit apart read as one.
_EXACT_FLOAT_INT = 2**53


def _whole_number_digits(value: object) -> object:
    """An id or code sent as a whole number as its digits: ``12345``, and ``12345.0`` as a platform that
    writes every number as a float sends it (up to 2**53, where a float still tells the ids apart); any
    other value as it came, for the field's own check."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"must be a string or a whole number, got {value!r}")
        if abs(value) >= _EXACT_FLOAT_INT:
            raise ValueError(f"a number sent as a float is exact only up to 2**53, got {value!r}: send it as a string")
        return str(int(value))
    return value


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, str_strip_whitespace=True)

    event_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    vin: str
    ts: AwareDatetime

    @field_validator("event_id", mode="before")
    @classmethod
    def _id_digits(cls, value: object) -> object:
        # An id sent as a whole number is the same id as its digits.
        return _whole_number_digits(value)

    @field_validator("vin")
    @classmethod
    def _check_vin(cls, value: str) -> str:
        value = vin_form(value)
        if not VIN_RE.match(value):
            raise ValueError(
                f"must be 17 characters of digits and capital letters except I, O, Q (ISO 3779), got {value[:40]!r}"
            )
        return value

    @field_validator("ts", mode="before")
    @classmethod
    def _iso_string(cls, value: object) -> object:
        # The contract is an ISO-8601 string with a timezone. A Unix time (a number, or a string of its
        # digits) is read as pydantic reads one: seconds up to 2e10, milliseconds above (microseconds and
        # nanoseconds, from 1e14, in seconds first: ``_unix_fine``); the bounds on
        # the time (``_to_utc_second``) turn away what that guesses wrong.
        if isinstance(value, bool) or not isinstance(value, str | datetime | int | float):
            raise ValueError(f"must be an ISO-8601 string with a timezone, got {type(value).__name__}")
        if isinstance(value, str) and _UTC_SECOND_RE.fullmatch(value):
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                pass
        return _iso_form(value)

    @field_validator("ts")
    @classmethod
    def _second_precision(cls, value: datetime) -> datetime:
        return _to_utc_second(value)


class AlertEvent(_Event):
    """An alert from a vehicle: free text, trouble codes and signal readings."""

    type: Literal["alert"]
    series: Annotated[str, Field(min_length=1, max_length=64)]
    alert_text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""
    dtc_codes: Annotated[list[str], Field(max_length=MAX_DTC_ENTRIES)] = []
    signals: Annotated[
        dict[str, Annotated[float, Field(strict=True, allow_inf_nan=False)]],
        Field(max_length=MAX_SIGNALS),
    ] = {}
    # Readings under names written in another script than Latin (``电池温度``) that the fleet's signal map
    # does not name, and readings whose text holds no digit (a state: ``"ON"``, ``"CHARGING"``; as sent, under
    # the name as sent): the first have no snake_case form and the second no number, so the alert is diagnosed
    # without them, and its line goes to the dead letters as well, saying so (``set_aside_error``). Empty for
    # every other alert.
    signals_set_aside: dict[str, float | str] = {}
    # Why each reading of ``signals_set_aside`` that holds a number was set aside (``Unreadable.why``): name as
    # sent -> (kind, detail), for ``set_aside_error``. Empty for the others.
    signals_set_aside_why: dict[str, tuple[str, str]] = {}
    # Trouble codes the job cannot read, as sent, each with why: the alert is diagnosed from its other codes,
    # its text and its readings, and its line goes to the dead letters as well (``set_aside_error``). Until this
    # release one such code refused the alert. Empty for every other alert.
    codes_set_aside: dict[str, str] = {}

    @field_validator("series", mode="before")
    @classmethod
    def _series_digits(cls, value: object) -> object:
        # A series (model) code sent as a whole number is the same code as its digits, as an event id is.
        return _whole_number_digits(value)

    @field_validator("alert_text", mode="before")
    @classmethod
    def _alert_lines(cls, text: object) -> object:
        # null is no text; a list of messages (a platform that sends each active warning apart) is one text,
        # the messages joined by "; ", its nulls and blanks left out.
        if text is None:
            return ""
        if isinstance(text, list) and all(isinstance(line, str | None) for line in text):
            text = "; ".join(line.strip() for line in text if line and line.strip())
        return whole_characters(text)

    @field_validator("dtc_codes", mode="before")
    @classmethod
    def _code_entries(cls, codes: object, info: ValidationInfo) -> object:
        # null is no code; one string is one entry ("P0A7F", "P0300,P0301"); an entry may be an object; a null
        # entry is no code either, nor one that says so as a reading's text does (``no_reading``: "", "N/A",
        # "none", "无"). One number in place of the list is refused: it may be a count of codes as well as a code.
        if codes is None:
            return []
        # Where codes the job cannot read go (``codes_set_aside``); None: such a code refuses the alert.
        aside: dict[str, str] | None = (info.context or {}).get(CODES_ASIDE)
        if isinstance(codes, str) and codes.lstrip().startswith("["):
            codes = _json_in_text(codes)  # (a list sent as its JSON text: a doubly-encoded payload)
        if isinstance(codes, str):
            codes = [codes]
        elif isinstance(codes, dict):
            # One code as an object, as XML-to-JSON converters write a list of one ({"code": "P0301", ...}), or
            # codes as an object's keys, their states as its values ({"P0301": "confirmed", ...}).
            codes = [codes] if not _CODE_OBJECT_KEYS.isdisjoint(lower_keys(codes)) else list(codes)
        if isinstance(codes, list) and None in codes:
            codes = [entry for entry in codes if entry is not None]
        if isinstance(codes, list) and not {dict, int, float}.isdisjoint(map(type, codes)):  # (map: no frames)
            # A code as its number (``_code_number``), read as the fleet says it sends them (three bytes unless
            # it says two); as a whole float too (768.0), as a platform that writes every number so sends it.
            numbers = (info.context or {}).get(DTC_NUMBERS) or DEFAULT_DTC_NUMBERS
            read: list[object] = []
            for entry in codes:
                try:
                    code = _code_entry(entry, numbers) if isinstance(entry, dict) else _whole(entry)
                    read.append(_code_number(code, numbers) if type(code) is int else code)
                except ValueError as e:
                    if aside is None:
                        raise
                    aside[json.dumps(entry, ensure_ascii=False, default=str)[:80]] = str(e)
            codes = read
        if isinstance(codes, list) and any(type(entry) is str and no_reading(entry) for entry in codes):
            codes = [entry for entry in codes if not (type(entry) is str and no_reading(entry))]
        if isinstance(codes, list) and aside is not None and any(type(entry) is not str for entry in codes):
            for entry in codes:  # (true, a list: no code in any form)
                if type(entry) is not str:
                    sent = json.dumps(entry, ensure_ascii=False, default=str)[:80]
                    aside[sent] = f"{sent} is not a trouble code"
            codes = [entry for entry in codes if type(entry) is str]
        if isinstance(codes, list) and len(codes) > 1 and all(type(entry) is str for entry in codes):
            # The same entry again is the same code: ["P0A7F"] * 500 was over the bound of 128, the alert refused.
            codes = list(dict.fromkeys(codes))
        return codes

    @field_validator("dtc_codes")
    @classmethod
    def _check_codes(cls, codes: list[str], info: ValidationInfo) -> list[str]:
        aside: dict[str, str] | None = (info.context or {}).get(CODES_ASIDE)
        out: dict[str, None] = {}  # (in order, each once: a list's "not in" made an entry of 65,536 codes take 28 s)
        for code in codes:
            found = trouble_codes(code)
            if found is None:
                why = f"{code[:24]!r} is not a trouble code like {CODE_EXAMPLES}"
                if aside is None:
                    raise ValueError(why)
                aside[code[:80]] = why
                continue
            out.update(dict.fromkeys(found))
        if len(out) > MAX_DTC_CODES:
            raise ValueError(f"{len(out)} trouble codes: at most {MAX_DTC_CODES} in one alert")
        return list(out)

    @field_validator("signals", mode="before")
    @classmethod
    def _read_signals(cls, signals: object, info: ValidationInfo) -> object:
        if signals is None:
            return {}
        if isinstance(signals, str):
            # Readings sent as their JSON text (a doubly-encoded payload); "" or "N/A" is none.
            if no_reading(signals):
                return {}
            text, signals = signals, _json_in_text(signals)
            if not isinstance(signals, dict | list):
                raise ValueError(f"a string that is no JSON object of readings: {text[:40]!r}")
        context = info.context or {}
        # The fleet's signal map (``parse_event``'s ``rename``), when it has one.
        rename: Rename | None = context.get(RENAME)
        # How its numbers use a comma (``parse_event``'s ``number_comma``), when it says.
        comma: str | None = context.get(NUMBER_COMMA)
        # Where readings whose text is no number go (``_set_aside``), and why those that hold one were set aside;
        # None: such a reading refuses the alert.
        text_aside: dict[str, str] | None = context.get(TEXT_ASIDE)
        aside_why: dict[str, tuple[str, str]] | None = context.get(ASIDE_WHY)
        if isinstance(signals, dict):
            pairs: Iterable[tuple[object, object]] = signals.items()
            values = signals.values()
            if dict in map(type, values) or list in map(type, values):  # (map: no Python frame per value)
                pairs = flat_signals(signals)
        elif isinstance(signals, list) and all(isinstance(item, dict) for item in signals):  # [] is no reading
            pairs = reading_pairs(signals, rename, comma)
            rename = None  # (applied)
        else:
            return signals  # the field's own error
        read: dict[object, object] = {}
        named_by_text: set[object] = set()  # names a unit in a reading's text gave (``with_unit``)
        given_as: dict[object, object] = {}  # each name read, as it was sent
        twice: set[object] = set()  # names two readings were sent under (``SameName``): none of them read
        for name, value in pairs:
            renaming = rename
            if isinstance(value, dict):  # a reading as an object under its name (``flat_signals``)
                ((name, value),) = reading_pairs([named_reading(str(name), value)], rename, comma)
                renaming = None  # (applied)
            if value is None or isinstance(value, str) and no_reading(value) or type(value) is JsonConstant:
                continue  # (NaN, Infinity: as the text "NaN")
            given, sent = name, value
            if isinstance(name, str):
                read_as = signal_name((renaming(name) or name) if renaming is not None else name)
                # A name with no snake_case form (another script) is kept as sent, to be set aside
                # (``_set_aside``) under the name a signal map's entry for it takes.
                name = read_as if has_snake_form(read_as) else name.strip()
            if name in read and name in named_by_text and text_aside is not None and aside_why is not None:
                # battery_voltage = "12.6 V" (read as battery_voltage_v) beside battery_voltage_v = 12.5: a display
                # text beside its raw value. The first is kept, this one set aside, as a unit never refuses an alert.
                text_aside[str(given)] = str(value)
                aside_why[str(given)] = NameTaken("", f"read as {name}, as an earlier reading of this alert is").why
                continue
            if name in read or name in twice:  # pack_temp_C and pack_temp_c: which one is the reading is not known
                if text_aside is None or aside_why is None:
                    raise ValueError(f"signal {str(given)[:40]!r} is {name!r} as another name of this alert is")
                unread = [(given, value), *([(given_as[name], read.pop(name))] if name in read else [])]
                for other, other_value in unread:
                    text_aside[str(other)] = str(other_value)
                    aside_why[str(other)] = SameName("", f"read as {name}, as another reading of this alert is").why
                twice.add(name)
                continue
            if isinstance(value, bool):
                value = float(value)
            elif isinstance(value, str):
                text = value
                try:
                    value, renamed = _read_number(str(name), text, None, comma)
                except NotANumber:
                    if text_aside is None:
                        raise
                    text_aside[str(given)] = text  # (a state, a label, a version: the alert is read without it)
                    continue
                except Unreadable as unread:  # (pack_temp_c = "41.5°", rpm = "3,000": the alert is read without it)
                    if text_aside is None or aside_why is None:
                        raise
                    text_aside[str(given)] = text
                    aside_why[str(given)] = unread.why
                    continue
                if renamed is not None:  # (insulation_res = "0.5 MΩ": insulation_res_megohm)
                    name = renamed
                    if name in read and text_aside is not None and aside_why is not None:
                        text_aside[str(given)] = text  # (the first reading of the name is kept, as above)
                        aside_why[str(given)] = NameTaken("", f"read as {name}, as an earlier reading is").why
                        continue
                    if name in read:
                        raise ValueError(f"signal {str(given)[:40]!r} is {name!r} as another name of this alert is")
                    if name in twice and text_aside is not None and aside_why is not None:
                        text_aside[str(given)] = text  # (two readings under the name were set aside: so is this)
                        aside_why[str(given)] = SameName("", f"read as {name}, as other readings of this alert are").why
                        continue
                    named_by_text.add(name)
            if text_aside is not None and aside_why is not None and type(name) is str and name.isascii():
                # "2026_11", "#", a name over 96 characters: the alert is read without it, as without a name in
                # another script. Checked here, where readings are set aside: ``_check_signals`` then checks a
                # name only where nothing collects them (one check a name either way).
                if not SIGNAL_NAME_RE.match(name):
                    text_aside[str(given)] = str(sent)[:40]
                    long = len(name) > MAX_SIGNAL_NAME_CHARS
                    detail = f"{len(name)} characters once read" if long else f"read as {name!r}"
                    aside_why[str(given)] = NoName("", detail).why
                    continue
            if not _finite(value) and text_aside is not None and aside_why is not None:
                # Past a double's range, in the JSON (1e400, read as infinite) or in text ("1e400 V"), or a whole
                # number of hundreds of digits: it refused the alert ("should be a finite number").
                text_aside[str(given)] = str(sent)[:40]
                aside_why[str(given)] = Implausible("", "out of range").why
                continue
            read[name] = value
            given_as[name] = given
        return read

    @field_validator("signals")
    @classmethod
    def _check_signals(cls, signals: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        context = info.context or {}
        text_aside: dict[str, str] | None = context.get(TEXT_ASIDE)
        aside_why: dict[str, tuple[str, str]] | None = context.get(ASIDE_WHY)
        unread: list[str] = []
        for name, value in signals.items():
            # A name outside ASCII has no snake_case form: it is set aside (``_set_aside``), its reading checked.
            # Where readings are set aside, ``_read_signals`` has set aside those of the names that are none.
            if text_aside is None and has_snake_form(name) and not SIGNAL_NAME_RE.match(name):
                raise ValueError(
                    f"signal name {name[:40]!r} must be snake_case (letters, digits and _, not starting with _, "
                    f"with at least one letter, at most {MAX_SIGNAL_NAME_CHARS} characters)"
                )
            why = "out of range" if abs(value) > MAX_SIGNAL_ABS else implausible(name, value)
            if why is None:
                continue
            if text_aside is None or aside_why is None:
                raise ValueError(f"signal {name} = {value!r} is {why}")
            # Set aside, as a reading in a unit its name does not allow is: the alert keeps its codes and text.
            text_aside[name], aside_why[name] = str(value), Implausible("", why).why
            unread.append(name)
        if not unread:
            return signals
        return {name: value for name, value in signals.items() if name not in unread}

    def says_anything(self) -> bool:
        """Whether the alert carries anything to diagnose: text, a trouble code, or a reading (even one set aside)."""
        return bool(
            self.alert_text.strip() or self.dtc_codes or self.signals or self.signals_set_aside or self.codes_set_aside
        )

    @property
    def set_aside(self) -> bool:
        """Whether the alert was read without readings or codes it set aside: its line is a dead letter as well."""
        return bool(self.signals_set_aside or self.codes_set_aside)

    @model_validator(mode="after")
    def _set_aside(self, info: ValidationInfo) -> AlertEvent:
        signals = self.signals
        texts: dict[str, str] | None = info.context.get(TEXT_ASIDE) if info.context else None
        if codes := info.context.get(CODES_ASIDE) if info.context else None:
            self.__dict__["codes_set_aside"] = {**self.codes_set_aside, **codes}
        if "".join(signals).isascii() and not texts:  # (a fleet that sends snake_case names: one C call)
            return self
        # The model is frozen once built; this is its building.
        self.__dict__["signals"] = {name: value for name, value in signals.items() if has_snake_form(name)}
        aside: dict[str, float | str] = {name: value for name, value in signals.items() if not has_snake_form(name)}
        self.__dict__["signals_set_aside"] = {**self.signals_set_aside, **aside, **(texts or {})}
        if why := info.context.get(ASIDE_WHY) if info.context else None:
            self.__dict__["signals_set_aside_why"] = {**self.signals_set_aside_why, **why}
        return self


_LONE_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def whole_characters(text: object) -> object:
    """Text with each lone surrogate (half of a character a JavaScript producer cut in two, written as its
    escape ``\\ud83d``) as U+FFFD, as bytes that are not UTF-8 are read: the alert lost all of its text,
    codes and readings to one broken emoji (pydantic refuses such a string). Anything else as it came."""
    if isinstance(text, str) and not text.isascii() and _LONE_SURROGATE_RE.search(text):
        return _LONE_SURROGATE_RE.sub("\ufffd", text)
    return text


# A recheck's verdict as workshop and QA systems write it (``PASS``, ``OK``/``NG``, 合格).
_VERDICT_WORDS = {
    **dict.fromkeys(("pass", "passed", "ok", "good", "fixed", "success", "successful", "i.o.", "io"), True),
    **dict.fromkeys(("合格", "正常", "通过", "已修复", "修复", "已解决", "良好"), True),
    **dict.fromkeys(("fail", "failed", "ng", "bad", "not fixed", "failure", "unsuccessful", "nok", "n.i.o."), False),
    **dict.fromkeys(("nio", "不合格", "异常", "未通过", "未修复", "不正常", "未解决", "故障"), False),
}


# What a recheck's verdict may be, as its errors say.
_VERDICTS_READ = (
    "true or false (1 or 0), or a word such as pass, ok, fixed, 合格, 正常, 已修复 (passed) or fail, ng, not fixed, "
    "不合格, 异常, 未修复 (failed)"
)
# The words pydantic reads as a bool itself (its ``bool`` validation of a string, in lower case).
_PYDANTIC_BOOL_WORDS = frozenset(("0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"))


# A session id's least length: a VIN, "-" and the time (``session_id_for``) is 33; shorter is no id of ours.
SESSION_ID_MIN_CHARS = 18
# A session id's VIN, "-" and opening time (``session_id_for``), before any suffix of its own.
SESSION_HEAD_CHARS = 33


class RecheckEvent(_Event):
    """The result of a recheck after a repair, naming the session it verifies."""

    type: Literal["recheck"]
    # Empty (not sent, or null): the vehicle's newest case (``write_policy.latest_case``), as a workshop's
    # system that knows the vehicle and not this job's session ids sends a recheck.
    session_id: Annotated[str, Field(max_length=MAX_ID_CHARS)] = ""
    recheck_ok: bool
    note: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""

    @field_validator("note", mode="before")
    @classmethod
    def _note_text(cls, value: object) -> object:
        return "" if value is None else whole_characters(value)

    _no_session = field_validator("session_id", mode="before")(_none_as(""))

    @field_validator("session_id")
    @classmethod
    def _session_form(cls, value: str) -> str:
        if value and len(value) < SESSION_ID_MIN_CHARS:
            raise ValueError(f"a session id is <vin>-<UTC time it opened, YYYYMMDDTHHMMSS>, got {value[:40]!r}")
        # Its VIN and opening time in capitals, as the job writes them: a VIN is read in any case (``vin_form``),
        # and a workshop system that wrote the id in lower case had its recheck refused as naming another
        # vehicle's session (an audit). What follows them (a milestone's ``-m1``) is kept as written.
        head = SESSION_HEAD_CHARS
        return value[:head].upper() + value[head:] if value[:head].isascii() else value

    @field_validator("recheck_ok", mode="before")
    @classmethod
    def _verdict_word(cls, value: object) -> object:
        # Besides true/false (yes/no, 1/0: pydantic's), the words workshop systems write a verdict in.
        if isinstance(value, str) and (verdict := _VERDICT_WORDS.get(value.strip().lower())) is not None:
            return verdict
        if isinstance(value, str) and value.strip().lower() not in _PYDANTIC_BOOL_WORDS:
            # pydantic's own message ("unable to interpret input") named neither the value nor what is read.
            raise ValueError(f"{value[:40]!r} is no verdict: {_VERDICTS_READ}")
        if isinstance(value, int | float) and not isinstance(value, bool) and value not in (0, 1):
            raise ValueError(f"{_code_number_text(value)} is no verdict: {_VERDICTS_READ}")
        return value


# A lifecycle change as fleet systems write it (``write-off``, ``sold``, 报废, 过户).
_CHANGE_WORDS = {
    **dict.fromkeys(("scrap", "scrapped", "write off", "written off", "total loss", "报废", "報廢"), "scrapped"),
    **dict.fromkeys(("transfer", "transferred", "sold", "ownership change", "过户", "過戶", "转让"), "transferred"),
}


class LifecycleEvent(_Event):
    """A vehicle leaves the fleet's care: its long-term memory is soft-deleted."""

    type: Literal["lifecycle"]
    change: Literal["scrapped", "transferred"]

    @field_validator("change", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        word = value.strip().lower()
        return _CHANGE_WORDS.get(word.replace("_", " ").replace("-", " "), word)


Event = AlertEvent | RecheckEvent | LifecycleEvent
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Annotated[Event, Field(discriminator="type")])
_MODELS: dict[str, type[AlertEvent] | type[RecheckEvent] | type[LifecycleEvent]] = {
    "alert": AlertEvent,
    "recheck": RecheckEvent,
    "lifecycle": LifecycleEvent,
}
# An alert's type as telematics platforms name it (any case): an alarm, a warning, a fault (报警, 告警, 故障).
_ALERT_TYPES = frozenset({"alarm", "warning", "warn", "fault", "报警", "告警", "故障"})
# A series not sent: the VIN's first characters, its manufacturer (WMI, 3) and vehicle descriptor (VDS, 5),
# in which a manufacturer codes the model line, body and drive (ISO 3779; GB 16735 in China).
SERIES_FROM_VIN_CHARS = 8


def event_type(data: dict[str, Any]) -> str | None:
    """The event type of a line's object (fields as the contract names them), None when it names none of
    them: its ``type`` in any case (an alert also as ``alarm``, ``warning``, ``fault``, 报警, 告警, 故障), or,
    with no ``type``, the one its fields give (``recheck_ok``: a recheck, ``change``: a lifecycle event, else
    an alert: a feed of a platform's alarms carries no type)."""
    kind = data.get("type")
    if kind is None:
        return "recheck" if "recheck_ok" in data else "lifecycle" if "change" in data else "alert"
    name = kind.strip().lower() if isinstance(kind, str) else str(kind)  # "Alert" is "alert"
    if name in _MODELS:
        return name
    return "alert" if name in _ALERT_TYPES else None


def content_id(data: dict[str, Any]) -> str:
    """An id for an event sent without one: a hash of the contract's fields it holds (as the contract names
    them, in any order), so that the same event sent again has the same id and is processed once, also when
    a platform adds fields of its own that change from one sending to the next (a time it was received)."""
    text = _canonical_json({k: v for k, v in data.items() if k in CONTRACT_FIELDS})
    return "h-" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=10).hexdigest()


def _canonical_json(value: Any) -> str:
    """``value``'s JSON with its keys sorted and no blanks, anything else as its text: one text however it came."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


# What a dedup mark leaves out of an event's fields: the id (the same by construction) and the time, which the
# dedup ids compare on their own (in seconds: ``2026-11-01T08:00:00Z`` and ``...:00.000Z`` alike).
_UNMARKED_FIELDS = frozenset({"event_id", "ts"})


def content_mark(raw: str) -> int:
    """16 bits of a hash of an event's content as its line sends it, for the dedup ids (``DedupState``): the
    contract's fields but its id and time (as the contract names them, in any order, and so are the items of
    its lists; a platform's own fields, which may change from one sending to the next, left out), every number
    as a float (187 and 187.0 alike).
    The same event sent again, however its producer writes it, has the same mark; read from the line, not from
    the job's parse, so that a change of the fleet's settings (its signal map) or of the job's release leaves it
    as it was. A line that is no JSON object has the hash of its text."""
    try:
        data = contract_keys(load_object(raw))
    except (EventError, ValueError):
        text = raw
    else:
        text = _canonical_json(
            {k: _as_floats(v) for k, v in data.items() if k in CONTRACT_FIELDS and k not in _UNMARKED_FIELDS}
        )
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) & 0xFFFF


def _as_floats(value: Any) -> Any:
    """``value`` with every number in it a float (not a bool), its objects and lists walked, each list sorted."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {k: _as_floats(v) for k, v in value.items()}
    if isinstance(value, list):  # (in any order: a code list, readings as a list of objects)
        items = [_as_floats(v) for v in value]
        return sorted(items, key=_canonical_json)
    return value


# The contract's field names. A platform's own spelling of one is read as it: in any case, camelCase or
# PascalCase, with - or blanks (eventId, DTCCodes, Alert-Text, VIN); other fields are left out, as ever.
CONTRACT_FIELDS = frozenset(name for model in _MODELS.values() for name in model.model_fields)
_KEY_SEPARATORS = str.maketrans({"-": "_", " ": "_", ".": "_"})


@lru_cache(maxsize=1024)
def contract_field(key: str) -> str | None:
    """The contract's field that ``key`` spells another way (``eventId``: ``event_id``); None for none."""
    name = _WORD_START_RE.sub("_", key.strip()).lower().translate(_KEY_SEPARATORS)
    return name if name in CONTRACT_FIELDS else None


def contract_keys(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each field a platform spells its own way under the contract's name; ``ValueError``
    when two spellings of one field are both given (which one holds the value is not known)."""
    if CONTRACT_FIELDS.issuperset(data):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key if key in CONTRACT_FIELDS else contract_field(key) if isinstance(key, str) else None
        if name is None:
            out[key] = value  # not a field of the contract: left out when validated
        elif name in out and out[name] != value:
            raise ValueError(f"{key!r} is the field {name!r}, given twice with another value")
        elif name in out:
            continue  # the same value under two spellings (vin and VIN): one field, as sent
        else:
            out[name] = value
    return out


def raw_vin(data: object) -> object:
    """The ``vin`` field of a raw event's JSON object, however the producer spells it; None without one."""
    if not isinstance(data, dict):
        return None
    if "vin" in data:
        return data["vin"]
    return next((v for k, v in data.items() if isinstance(k, str) and contract_field(k) == "vin"), None)


class JsonConstant:
    """``NaN``, ``Infinity`` or ``-Infinity`` written as a JSON value (not JSON, but Python's ``json.dumps`` writes
    them): as a reading's value it is no reading, as the text ``"NaN"`` is (``no_reading``); anywhere else it is
    refused, naming it (``describe_validation_error``). The whole line was refused at the parse stage."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


_JSON_CONSTANTS = {name: JsonConstant(name) for name in ("NaN", "Infinity", "-Infinity")}


def _json_constant(name: str) -> JsonConstant:
    return _JSON_CONSTANTS[name]


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # An object that names one key twice (``"vin": "A...", "vin": "B..."``): which one holds the value is not
    # known, and json would keep the last without a word.
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {twice[:40]!r} is given twice in one object")
    return found


# ``json.loads(raw, parse_constant=_json_constant, object_pairs_hook=_unique_keys)`` without building a
# decoder per line.
_DECODER = json.JSONDecoder(parse_constant=_json_constant, object_pairs_hook=_unique_keys)


# A surrogate written as its escape (``\ud83d``): JSON's decoder makes a lone one a string no UTF-8 holds.
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES_RE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_surrogate_escape(text: str | bytes) -> bool:
    """Whether JSON text holds a surrogate's escape at all: only then is what it reads walked for lone ones
    (``whole_strings``), or its escapes rewritten (``whole_escapes``)."""
    if isinstance(text, str):
        return "\\u" in text and _SURROGATE_ESCAPE_RE.search(text) is not None
    return b"\\u" in text and _SURROGATE_ESCAPE_BYTES_RE.search(text) is not None


def whole_strings(value: Any) -> Any:
    """``value`` (JSON read into Python) with every string in it, keys too, through ``whole_characters``: a lone
    surrogate escape read as U+FFFD, where it made text that no JSON or UTF-8 writer takes."""
    if isinstance(value, str):
        return whole_characters(value)
    if isinstance(value, dict):
        return {whole_characters(k): whole_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_strings(v) for v in value]
    return value


def _finite(value: object) -> bool:
    """Whether a number is finite as a double holds it (an int past a double's range is not); any other value
    is left to the field's own check."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return True
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


# Read left to right: an escaped backslash (kept: what follows it is text, not an escape), a surrogate pair's
# escapes (kept: one whole character), or a surrogate's escape alone (half a character).
_SURROGATE_ESCAPES_RE = re.compile(
    r"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _whole_escape(found: re.Match[str]) -> str:
    escape = found.group(0)
    return escape if escape == "\\\\" or len(escape) == 12 else "\\ufffd"


def whole_escapes(text: str) -> str:
    """Text with each escape of half a character (``\\ud83d`` alone) written as U+FFFD's, ``\\ufffd``: JSON in
    a model's prose (its answer) decoded anywhere later then makes no lone surrogate. A pair's escapes, and
    text after an escaped backslash (``\\\\ud83d``, a backslash and then letters), stay as they are."""
    return _SURROGATE_ESCAPES_RE.sub(_whole_escape, text) if _has_surrogate_escape(text) else text


def loads_whole(text: str) -> Any:
    """``json.loads(text)``, each lone surrogate escape in it read as U+FFFD (``whole_strings``); walked only
    when the text has a surrogate escape at all."""
    found = json.loads(text)
    return whole_strings(found) if _has_surrogate_escape(text) else found


def _load_json(raw: str) -> Any:
    """``json.loads(raw, parse_constant=_json_constant, object_pairs_hook=_unique_keys)``, with its errors.

    A lone surrogate escape anywhere (half of an emoji a JavaScript producer cut in two) is read as U+FFFD,
    as bytes that are not UTF-8 are: in a signal's text it passed the contract and then failed the event's
    JSON for the next operator, which failed the job on the same record at every restart (an audit)."""
    # A byte-order mark before the object is read past: Windows tools (Notepad, Excel's "CSV UTF-8", PowerShell)
    # start a UTF-8 file with one, and the file's first event was a dead letter ("Unexpected UTF-8 BOM").
    if isinstance(raw, str):
        found = _DECODER.decode(raw[1:] if raw.startswith("\ufeff") else raw)
    else:
        if raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        found = json.loads(raw, parse_constant=_json_constant, object_pairs_hook=_unique_keys)
    return whole_strings(found) if _has_surrogate_escape(raw) else found


# pydantic's errors for text it cannot read as a time: their message names neither the text nor what is read.
_TIME_PARSING_ERRORS = frozenset({"datetime_parsing", "datetime_from_date_parsing"})


def describe_validation_error(
    error: ValidationError,
    name: Callable[[tuple[int | str, ...]], str | None] | None = None,
    leave_out: Callable[[tuple[int | str, ...], str], bool] | None = None,
) -> str:
    """One line per problem: ``field: what is wrong``. ``name`` gives a field's location the name its user
    knows it by (a flag, a variable), or None to keep its path; ``leave_out`` (location, error type) the problems
    that another one named explains."""
    parts = []
    for item in error.errors(include_url=False):
        if leave_out is not None and leave_out(item["loc"], item["type"]):
            continue
        loc = (name(item["loc"]) if name else None) or ".".join(str(p) for p in item["loc"]) or "event"
        msg = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] in _TIME_PARSING_ERRORS:
            why = msg.removeprefix("Input should be a valid datetime or date, ")
            msg = (
                f"{str(item.get('input'))[:40]!r} is no time: an ISO-8601 time with a timezone "
                f"(2026-11-01T08:15:30Z) or a Unix time ({why})"
            )
        if type(given := item.get("input")) is JsonConstant:
            msg = f"{given} is no value: JSON has no NaN or Infinity (a reading's is read as no reading)"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


# The setting that names the zone of event times written without one (``parse_event``'s ``naive_zone``).
NAIVE_TS_ZONE_ENV = "VDOCTOR_NAIVE_TS_ZONE"
# The setting that names the fleet's signal map (``parse_event``'s ``rename``; ``vdoctor.signal_map``).
SIGNAL_MAP_ENV = "VDOCTOR_SIGNAL_NAMES"
# The setting that says how the fleet's numbers use a comma (``parse_event``'s ``number_comma``).
NUMBER_COMMA_ENV = "VDOCTOR_NUMBER_COMMA"
# The setting that says how the fleet sends a trouble code as a number (``parse_event``'s ``dtc_numbers``).
DTC_NUMBERS_ENV = "VDOCTOR_DTC_NUMBERS"
# A fixed offset from UTC: +08:00, -0530, +8.
_OFFSET_RE = re.compile(r"^(?:UTC|GMT)?([+-])([0-9]{1,2})(?::?([0-9]{2}))?$")


def number_comma(given: str) -> str:
    """The setting ``VDOCTOR_NUMBER_COMMA`` as ``parse_event`` takes it: ``decimal`` or ``thousands`` (any case,
    spaces around); ``ValueError`` for anything else."""
    value = given.strip().lower()
    if value not in NUMBER_COMMAS:
        raise ValueError(
            f"{NUMBER_COMMA_ENV} must be decimal (12,345 is 12.345) or thousands (12,345 is 12345), got {given!r}"
        )
    return value


def dtc_numbers(given: str) -> str:
    """The setting ``VDOCTOR_DTC_NUMBERS`` as ``parse_event`` takes it: ``uds`` or ``obd`` (any case, spaces
    around); ``ValueError`` for anything else."""
    value = given.strip().lower()
    if value not in DTC_NUMBER_FORMS:
        raise ValueError(
            f"{DTC_NUMBERS_ENV} must be uds (a code sent as a number is three bytes, as UDS reports it: 687899 "
            f"is P0A7F) or obd (two bytes, as OBD Mode 03 reports it: 768 is P0300), got {given!r}"
        )
    return value


def time_zone(name: str) -> tzinfo:
    """The zone a setting names: an IANA name (``Asia/Shanghai``, ``Europe/Berlin``: daylight saving
    time included), ``UTC``, or a fixed offset (``+08:00``, ``UTC+8``); ``ValueError`` for anything else."""
    text = name.strip()
    if text.upper() in ("UTC", "Z", "GMT"):
        return UTC
    if (offset := _OFFSET_RE.match(text.upper())) is not None:
        sign, hours, minutes = offset.groups()
        delta = timedelta(hours=int(hours), minutes=int(minutes or 0))
        if delta > timedelta(hours=14):
            raise ValueError(f"{name!r} is more than 14 hours from UTC")
        return timezone(-delta if sign == "-" else delta)
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is no time zone: give an IANA name (Asia/Shanghai), UTC or an offset (+08:00)"
        ) from None


def _read_time(value: object) -> object:
    """``value`` (an event's ``ts``) as a datetime where it writes one in a form this reads (naive when it
    writes no zone: ``2026-11-01 08:15:30``), else as it is: pydantic's parse and errors. Read once, here:
    the field's validator then takes the datetime as it is."""
    if isinstance(value, str):
        if _UTC_SECOND_RE.fullmatch(value):
            return value  # (the usual case: see ``_iso_string``)
        value = value.strip()  # (a blank around it, as around a VIN)
    if not isinstance(text := _iso_form(value), str):
        return text
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return value  # not a time this reads: pydantic's parse and errors


def parse_event(
    raw: str,
    naive_zone: tzinfo | None = None,
    rename: Rename | None = None,
    number_comma: str | None = None,
    dtc_numbers: str = DEFAULT_DTC_NUMBERS,
) -> Event:
    """Parse one JSON line into an event, or raise ``EventError`` with its stage.

    ``naive_zone``: the zone of a ``ts`` written without one (``VDOCTOR_NAIVE_TS_ZONE``: a fleet whose
    clocks send local time, as GB/T 32960 terminals send Beijing time); None: such a ``ts`` is a dead
    letter that says so. A local time that a change to daylight saving time repeats is read as its first
    occurrence, and one it skips as the time that far past the change.
    ``rename``: the fleet's signal map (``VDOCTOR_SIGNAL_NAMES``, ``vdoctor.signal_map.SignalRenames``):
    the name each signal sent under a name it holds is read as.
    ``number_comma``: how the fleet's numbers use a comma (``VDOCTOR_NUMBER_COMMA``, one of
    ``NUMBER_COMMAS``): a reading sent as ``"12,345"`` is 12.345 (``decimal``) or 12345 (``thousands``);
    None: such a reading is set aside, its dead letter naming both (``set_aside_error``). Under ``decimal`` a
    points grouping digits in threes twice or more group thousands (``"1.234.567"``; ``_ungrouped``). Every other
    form of a number reads the same whatever it says (``41,5`` has a decimal comma, ``12,345,678`` and
    ``12,345.6`` group thousands, ``3.7`` has a decimal point).
    ``dtc_numbers``: how the fleet sends a trouble code as a number (``VDOCTOR_DTC_NUMBERS``, one of
    ``DTC_NUMBER_FORMS``): ``uds``, three bytes (687899 is 0x0A7F1B, P0A7F), or ``obd``, two (768 is 0x0300,
    P0300). A code sent as text (``"P0300"``, ``"0x0300"``, ``"0x0A7F1B"``) reads the same either way.
    """
    return event_of(load_object(raw), naive_zone, rename, number_comma, dtc_numbers)


def load_object(raw: str) -> dict[str, Any]:
    """The JSON object of one line (``parse_event``'s first step); ``EventError`` at the parse stage."""
    try:
        data: Any = _load_json(raw)
    except (ValueError, RecursionError) as e:
        raise EventError("parse", f"not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise EventError("parse", f"expected a JSON object, got {type(data).__name__}")
    return data


# An alert's fields that the job fills as it reads the line (what it set aside, and why).
_READ_FIELDS = ("signals_set_aside", "signals_set_aside_why", "codes_set_aside")


def event_of(
    data: dict[str, Any],
    naive_zone: tzinfo | None = None,
    rename: Rename | None = None,
    number_comma: str | None = None,
    dtc_numbers: str = DEFAULT_DTC_NUMBERS,
) -> Event:
    """The event of a line's JSON object (``parse_event``'s second step: it may change ``data``)."""
    if number_comma is not None and number_comma not in NUMBER_COMMAS:
        raise ValueError(f"number_comma must be one of {', '.join(NUMBER_COMMAS)} or None, got {number_comma!r}")
    if dtc_numbers not in DTC_NUMBER_FORMS:
        raise ValueError(f"dtc_numbers must be one of {', '.join(DTC_NUMBER_FORMS)}, got {dtc_numbers!r}")
    try:
        data = contract_keys(data)
    except ValueError as e:
        raise EventError("validate", str(e)) from None
    for field in _READ_FIELDS:
        # What the job found reading the line, never the line's to say: a line that held them made its own
        # dead letter and flags (found by a review).
        data.pop(field, None)
    if data.get("event_id") is None:
        data["event_id"] = content_id(data)
    if (written := data.get("ts")) is not (read := _read_time(written)):
        if isinstance(read, datetime) and read.tzinfo is None:
            if naive_zone is None:
                raise EventError(
                    "validate",
                    f"ts: {str(written)[:40]!r} has no timezone: write one (Z, +08:00), or set "
                    f"{NAIVE_TS_ZONE_ENV} to the zone the fleet's clocks are in (Asia/Shanghai)",
                )
            read = read.replace(tzinfo=naive_zone)
        data["ts"] = read
    typed = data.get("type") is not None
    name = event_type(data)
    if name is None:
        known, got = ", ".join(_MODELS), repr(data["type"])[:40]
        raise EventError("validate", f"type: must be one of {known} (or alarm, warning, fault), got {got}")
    model = _MODELS[name]
    if data.get("type") != name:
        data["type"] = name
    if name == "alert" and data.get("series") is None and isinstance(vin := data.get("vin"), str):
        data["series"] = vin_form(vin)[:SERIES_FROM_VIN_CHARS]  # (a full-width VIN's series is its ASCII one)
    try:
        context: dict[str, object] = {
            RENAME: rename, NUMBER_COMMA: number_comma, DTC_NUMBERS: dtc_numbers, TEXT_ASIDE: {}, ASIDE_WHY: {},
            CODES_ASIDE: {},
        }  # fmt: skip
        event = model.model_validate(data, context=context)
    except ValidationError as e:
        # A series not sent is the VIN's (above): without a VIN, "series: Field required" says nothing more.
        no_series = name == "alert" and data.get("series") is None
        reason = describe_validation_error(
            e, leave_out=lambda loc, kind: no_series and loc == ("series",) and kind == "missing"
        )
        if any(item["type"] == "missing" for item in e.errors()) and (own := _own_fields(data)):
            # A field the contract needs under a name of the platform's own (timestamp, eventTime): say which.
            reason += f" (the line's fields that are none of the contract's: {own})"
        raise EventError("validate", reason) from e
    if event.vin.count(event.vin[0]) == len(event.vin):
        # 00000000000000000: a terminal not yet bound to a vehicle. Read as one, every such terminal of the fleet
        # would share its sessions and its long-term memory. Checked here, as a line is read, and not by the
        # model: an event of such a VIN that a checkpoint of an earlier release holds is validated again when
        # it runs, and must not fail there.
        raise EventError("validate", f"vin: {event.vin!r} is a placeholder (one character 17 times), not a VIN")
    if not typed and isinstance(event, AlertEvent) and not event.says_anything():
        # A line that names no type is an alert by its fields (a platform's alarm feed carries none), and one with
        # none of an alert's is something else: a position report, a heartbeat, or an alert whose text and codes
        # come under names of the platform's own. Diagnosed, it was an empty alert, and two of them in one second
        # had one content id (the second dropped as a duplicate). An alert the producer typed as one is
        # diagnosed even bare: the vehicle said something is wrong.
        raise EventError("validate", _empty_alert_error(data))
    return event


# How many of an empty alert's own fields its dead letter names.
_EMPTY_ALERT_FIELDS_NAMED = 8


def _own_fields(data: dict[str, Any]) -> str:
    """The fields of a line that are none of the contract's, named (the first few): what a platform sends a
    field under when its name is its own, for a rename upstream; "" for none."""
    own = [repr(str(key)[:40]) for key in data if key not in CONTRACT_FIELDS]
    return _listed(own, _EMPTY_ALERT_FIELDS_NAMED) if own else ""


def _empty_alert_error(data: dict[str, Any]) -> str:
    """The reason an alert with nothing to diagnose is a dead letter, naming the fields it was sent with that
    the contract does not know (what a platform sends its text or codes under, for a rename upstream)."""
    fields = _own_fields(data)
    return (
        "a line without a type is read as an alert, and this one has none of an alert's alert_text, dtc_codes "
        "or signals"
        + (f" (its fields that are none of the contract's: {fields})" if fields else "")
        + ": a position report or heartbeat is no alert, and an alert's text or codes under names of the "
        "platform's own need the contract's names (or a type, to be diagnosed bare)"
    )


def set_aside_error(event: AlertEvent) -> str:
    """The dead letter's reason for an alert diagnosed without the readings and codes it set aside
    (``signals_set_aside``, ``codes_set_aside``)."""
    parts = [_signals_aside_error(event)] if event.signals_set_aside else []
    if codes := event.codes_set_aside:
        n = len(codes)
        listed = _listed(list(codes.values()), first=3)  # (each reason names its code as sent)
        parts.append(
            f"dtc_codes: {n} code{'s' if n > 1 else ''} set aside: {listed}. The alert was diagnosed without "
            f"{'them' if n > 1 else 'it'} (flag codes_set_aside)"
        )
    return ". ".join(parts)


def _signals_aside_error(event: AlertEvent) -> str:
    aside, why = event.signals_set_aside, event.signals_set_aside_why
    n = len(aside)
    script = [repr(name[:40]) for name, value in aside.items() if not isinstance(value, str)]
    texts = [f"{name[:40]!r} = {value[:20]!r}" for name, value in aside.items() if isinstance(value, str)
             and name not in why]  # fmt: skip
    reasons = []
    if script:
        reasons.append(
            "not written in Latin letters (a signal's name is snake_case in ASCII; map the fleet's names with "
            f"{SIGNAL_MAP_ENV}, README Signal maps): {_listed(script)}"
        )
    if texts:
        reasons.append(f"text that is no number (a reading is a number): {_listed(texts)}")
    for kind, heading in _ASIDE_HEADINGS.items():
        read = [f"{name[:40]!r} = {value[:20]!r} ({why[name][1]})" for name, value in aside.items()
                if isinstance(value, str) and why.get(name, ("",))[0] == kind]  # fmt: skip
        if read:
            reasons.append(f"{heading}: {_listed(read)}")
    return (
        f"signals: {n} reading{'s' if n > 1 else ''} set aside, {'; '.join(reasons)}. "
        f"The alert was diagnosed without {'them' if n > 1 else 'it'} (flag signals_set_aside)"
    )


# The dead letter's heading for readings set aside for each kind of reason (``Unreadable.kind``).
_ASIDE_HEADINGS = {
    UnitConflict.kind: "in a unit its name does not allow",
    TwoWayComma.kind: f"a number with a comma that reads two ways (set {NUMBER_COMMA_ENV} to how the fleet writes "
    "numbers, decimal or thousands)",
    TwoWayPoint.kind: "a number with one point before three digits, which reads two ways where the fleet writes a "
    "decimal comma (thousands, or a machine's decimal point)",
    NameTaken.kind: "under the name of an earlier reading of the alert (one of the two named by the unit in its "
    "text; the earlier one kept)",
    NoName.kind: "a name that is no signal name (snake_case once read: letters, digits and _, not starting with _, "
    f"with at least one letter, at most {MAX_SIGNAL_NAME_CHARS} characters)",
    SameName.kind: "two readings under one name (which one is the reading is not known: both set aside)",
    Implausible.kind: "a number no vehicle reads",
}


def _listed(items: list[str], first: int = 5) -> str:
    """The first ``first`` of ``items`` and how many more."""
    more = f" and {len(items) - first} more" if len(items) > first else ""
    return ", ".join(items[:first]) + more


def is_finite_number(value: object) -> bool:
    """True for int/float values that are finite (bool excluded)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

"""Units of vehicle telemetry, read from a signal name's suffix (DESIGN.md §3.1).

``cell_voltage_diff_mv`` is in mV, ``insulation_res_kohm`` in kΩ. A name whose
suffix is not in the table keeps its readings with the unit unknown: no
reading or alert is ever rejected for the unit its name declares or lacks (a
reading sent as text in another unit than its name's is: ``unit_symbol``
reads such units, ``events`` refuses the conflict). The table covers what vehicle
telemetry reports (electrical, thermal, pressure, speed, time, energy, flow,
mass, angle, ratios); extend it here, in one place.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# suffix (after the last underscores of the name) -> unit symbol, as people write it.
UNITS: dict[str, str] = {
    # electrical
    "mv": "mV",
    "v": "V",
    "kv": "kV",
    "ua": "µA",
    "ma": "mA",
    "a": "A",
    "ka": "kA",
    "mohm": "mΩ",
    "ohm": "Ω",
    "kohm": "kΩ",
    "megohm": "MΩ",
    "w": "W",
    "kw": "kW",
    "mw": "MW",
    "wh": "Wh",
    "kwh": "kWh",
    "ah": "Ah",
    "mah": "mAh",
    "hz": "Hz",
    "khz": "kHz",
    "uf": "µF",
    # thermal
    "c": "°C",
    "degc": "°C",
    "f": "°F",
    "k": "K",
    # pressure
    "pa": "Pa",
    "kpa": "kPa",
    "mpa": "MPa",
    "bar": "bar",
    "mbar": "mbar",
    "psi": "psi",
    # speed, distance, rotation
    "kmh": "km/h",
    "kph": "km/h",
    "mph": "mph",
    "mps": "m/s",
    "rpm": "rpm",
    "km": "km",
    "m": "m",
    "mm": "mm",
    "cm": "cm",
    "mi": "mi",
    # time
    "ms": "ms",
    "us": "µs",
    "s": "s",
    "sec": "s",
    "min": "min",
    "h": "h",
    "hr": "h",
    "d": "d",
    # mechanics, flow, mass, volume
    "nm": "N·m",
    "n": "N",
    "kn": "kN",
    "g": "g",
    "kg": "kg",
    "t": "t",
    "l": "L",
    "ml": "mL",
    "lph": "L/h",
    "lpm": "L/min",
    "l100km": "L/100km",
    "gps": "g/s",
    "mg": "mg",
    # angle, acceleration, ratios, misc
    "deg": "°",
    "rad": "rad",
    "mps2": "m/s²",
    "pct": "%",
    "percent": "%",
    "ppm": "ppm",
    "db": "dB",
    "dbm": "dBm",
    "lux": "lx",
}
# The symbols, as written (``unit_symbol``: mΩ and MΩ, mV and MV differ by their case alone).
_SYMBOLS = frozenset(UNITS.values())
# The symbols by their NFKC form (``unit_symbol``: the table writes µ as the micro sign, which NFKC makes mu).
_NFKC_SYMBOLS = {unicodedata.normalize("NFKC", symbol): symbol for symbol in _SYMBOLS}
# The symbols written with a slash, by their lower-case form: ``l/min`` and ``L/MIN`` are litres a minute. (The
# others are not read case-blind: mΩ and MΩ, mV and MV differ by their case alone.)
_SLASH_SYMBOLS = {written.lower(): symbol for written, symbol in _NFKC_SYMBOLS.items() if "/" in written}
# Other ways telemetry writes the table's units after a number, by their lower-case form without spaces (not
# suffixes of names: ``_hrs`` or ``_days`` could be more than a unit there). ``r/min`` is how Chinese data
# sheets write rpm; relative humidity is a percentage.
_WRITTEN = {
    "r/min": "rpm", "rev/min": "rpm", "m/s^2": "m/s²", "n.m": "N·m", "ohms": "Ω", "kohms": "kΩ",
    "mohms": "mΩ", "degf": "°F", "hrs": "h", "hour": "h", "hours": "h", "mins": "min", "secs": "s",
    "seconds": "s", "day": "d", "days": "d", "mile": "mi", "miles": "mi", "kmph": "km/h", "km/hr": "km/h",
    "%rh": "%",
}  # fmt: skip
# Each symbol's first suffix in the table (``unit_suffix``).
_SUFFIX_OF = {symbol: suffix for suffix, symbol in reversed(UNITS.items())}
# Suffixes longest first, so that ``_kwh`` wins over ``_h`` and ``_kohm`` over ``_ohm``.
_SUFFIXES = sorted(UNITS, key=len, reverse=True)
# A signal's name: snake_case (a-z, 0-9 and _), not starting with _, with at least one letter. It may
# start with digits (12v_battery_v, 48v_bus_v, 2nd_row_temp_c), as fleets name their low-voltage rails;
# digits alone (2026_11) are no name. In text, put what must not precede a name before this: the
# lookahead asks for the letter only where a name starts.
# ``HAS_LETTER`` at a name's start: a letter comes before anything but digits and _ (patterns of names with
# another shape, snake_case words in text, start with it too).
HAS_LETTER = r"(?=[0-9_]*[a-z])"
SIGNAL_NAME = HAS_LETTER + r"[a-z0-9][a-z0-9_]*"
# A signal's name as read, at most this long: a bound on what a session keeps, with room for the ``_`` that
# reading a camelCase name of 64 characters adds (``events.signal_name``).
MAX_SIGNAL_NAME_CHARS = 96
# A signal's name as the contract allows it: ``SIGNAL_NAME``, at most ``MAX_SIGNAL_NAME_CHARS`` characters.
SIGNAL_NAME_RE = re.compile("^" + HAS_LETTER + rf"[a-z0-9][a-z0-9_]{{0,{MAX_SIGNAL_NAME_CHARS - 1}}}$")


# Names whose unit is remembered: a fleet reports a few hundred signal names, and every
# reading span (ReadingSpan.of) asks again; the suffix scan tries up to every suffix.
UNIT_CACHE_NAMES = 4096


@functools.lru_cache(maxsize=UNIT_CACHE_NAMES)
def unit_of(name: str) -> str | None:
    """The unit a signal name declares by its suffix, or None when the suffix is not a known unit."""
    for suffix in _SUFFIXES:
        if name.endswith("_" + suffix) and len(name) > len(suffix) + 1:
            return UNITS[suffix]
    return None


@functools.lru_cache(maxsize=UNIT_CACHE_NAMES)
def unit_symbol(written: str) -> str | None:
    """The table's symbol of a unit written after a number (``"mV"``, ``"°C"``, ``"km/h"``, ``"kΩ"``), or of
    one written as a name's suffix is, in any case (``"mv"``, ``"C"``, ``"kph"``, ``"KWH"``); None for none.

    Compatibility characters read as what they stand for (Unicode's NFKC): the micro sign and the Greek mu
    alike (``"µA"``, ``"μA"``), the ohm sign as omega (``"MΩ"`` stays megohms: the symbols' case is read
    first, and ``"MOhm"`` is megohms too), ``"℃"``, full-width letters (``"ｋＰａ"``) and the squared units
    of CJK text (``"㎷"``, ``"㏀"``).
    """
    text = unicodedata.normalize("NFKC", written).strip()
    if (symbol := _NFKC_SYMBOLS.get(text)) is not None:
        return symbol
    if text[:1] == "M" and text[1:].lower() in ("ohm", "ohms", "ω"):  # megohms however the rest is written
        return "MΩ"
    lower = text.lower().replace(" ", "")
    if (symbol := _spelled(lower)) is not None:
        return symbol
    key = lower.replace("/", "").replace("·", "").replace("μ", "u").replace("ω", "ohm")
    return UNITS.get(key.removeprefix("°") if key != "°" else "deg")


def slash_unit(written: str) -> str | None:
    """The table's symbol of a unit written with a slash (``"km/h"``, ``"L/100km"``, ``"r/min"``: rpm), in any
    case; None for anything else, a slash between words included (``"A/C"``, ``"a/h"``: not ampere-hours)."""
    lower = unicodedata.normalize("NFKC", written).strip().lower().replace(" ", "")
    return _spelled(lower) if "/" in lower else None


def _spelled(lower: str) -> str | None:
    """The symbol of a unit spelled another way than the table's or with a slash, in its lower-case form without
    spaces (``_WRITTEN``, ``_SLASH_SYMBOLS``); None for any other."""
    return _WRITTEN.get(lower) or _SLASH_SYMBOLS.get(lower)


def unit_suffix(symbol: str) -> str:
    """The suffix a name declares ``symbol`` by (``"°C"``: ``c``, ``"%"``: ``pct``, ``"km/h"``: ``kmh``): the
    table's first for it."""
    return _SUFFIX_OF[symbol]


def unit_symbols() -> list[str]:
    """Every unit symbol, longest first (for reading numbers with units out of free text)."""
    return sorted(set(UNITS.values()), key=len, reverse=True)

"""Units of vehicle telemetry, read from a signal name's suffix (DESIGN.md §3.1).

``cell_voltage_diff_mv`` is in mV, ``insulation_res_kohm`` in kΩ. A name whose
suffix is not in the table keeps its readings with the unit unknown: no
reading or alert is ever rejected for the unit its name declares or lacks. A
reading sent with another unit than its name's (``unit_symbol`` reads it) is
converted to the name's where both measure one quantity (``convert``), and
refused by ``events`` where they do not. The table covers what vehicle
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
    # Milliwatts by a suffix of their own, as megohms are: a name is lower case, and ``_mw`` has meant megawatts
    # (a megawatt charger's power).
    "milliw": "mW",
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
    "hpa": "hPa",
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
    # Days by their word: ``_d`` alone is a sensor's letter in SAE J1979's names (accelerator pedal position D,
    # ``accelerator_pedal_position_d``) more often than days, and read as days it showed 18.4d in key facts.
    "days": "d",
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
    # Direct and alternating volts and amperes, units spelled out, degrees with the ordinal º (NFKC: o) or the
    # ring ˚ in place of °, and engine speed as German data sheets write it (Umdrehungen pro Minute).
    "vdc": "V", "vac": "V", "volt": "V", "volts": "V", "amp": "A", "amps": "A", "ampere": "A", "amperes": "A",
    "watt": "W", "watts": "W", "minute": "min", "minutes": "min", "second": "s", "celsius": "°C",
    "degcelsius": "°C", "fahrenheit": "°F", "oc": "°C", "of": "°F", "\u030ac": "°C", "\u030af": "°F",
    "u/min": "rpm", "1/min": "rpm", "min-1": "rpm", "min^-1": "rpm", "degreesc": "°C", "degreesf": "°F",
    # Chinese units, as Chinese platforms and spreadsheets write them after a number (``398.5伏``, ``250千帕``,
    # ``62 千米/小时``). Not 度 alone: degrees (°C) on a thermometer, kilowatt-hours on an electricity bill.
    "伏": "V", "伏特": "V", "毫伏": "mV", "千伏": "kV", "安": "A", "安培": "A", "毫安": "mA", "瓦": "W",
    "瓦特": "W", "千瓦": "kW", "千瓦时": "kWh", "安时": "Ah", "毫安时": "mAh", "欧": "Ω", "欧姆": "Ω",
    "毫欧": "mΩ", "千欧": "kΩ", "兆欧": "MΩ", "帕": "Pa", "千帕": "kPa", "兆帕": "MPa", "摄氏度": "°C",
    "华氏度": "°F", "赫兹": "Hz", "千赫": "kHz", "毫米": "mm", "厘米": "cm", "米": "m", "千米": "km",
    "公里": "km", "毫秒": "ms", "秒": "s", "分钟": "min", "小时": "h", "天": "d", "千米/小时": "km/h",
    "公里/小时": "km/h", "米/秒": "m/s", "转/分": "rpm", "转/分钟": "rpm", "转每分": "rpm",
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


# The indexes that end an array item's name (``_3`` of ``cell_voltage_v_3``; ``_1_0`` of a nested array's).
_INDEX_TAIL_RE = re.compile(r"(?:_[0-9]+)+$")

# Names whose unit is remembered: a fleet reports a few hundred signal names, and every
# reading span (ReadingSpan.of) asks again; the suffix scan tries up to every suffix.
UNIT_CACHE_NAMES = 4096


# Words that name a quantity a vehicle measures (as a signal's name writes them): ``_min`` after one of them, or
# after a unit's suffix (``cell_v_min``, ``cell_temp_c_min``), is that quantity's minimum, not minutes
# (``cell_voltage_min``, ``soc_min``, ``cell_temp_min``), as ``_max`` after it is its maximum. Minutes are the
# unit of a duration, whose name says so by another word (``idle_min``, ``charge_time_min``, ``runtime_min``).
_QUANTITY_WORDS = (
    "voltage|volt|volts|current|curr|resistance|res|impedance|power|energy|pressure|press|frequency|freq"
    "|insulation|leakage|leak|capacity|temp|temperature|soc|soh|speed|spd|torque|flow|level"
)
# Suffixes that are a word of the name, not its unit (``unit_of``): a quantity's minimum (above), and ``t`` after
# an index (``cells_3_t``: a flattened array's T for a temperature; no item of an array weighs tonnes).
_NOT_A_UNIT_RE = re.compile(rf"(?:^|_)(?:(?:{_QUANTITY_WORDS}|{'|'.join(_SUFFIXES)})_min|[0-9]+_t)$")


@functools.lru_cache(maxsize=UNIT_CACHE_NAMES)
def unit_of(name: str) -> str | None:
    """The unit a signal name declares by its suffix, or None when the suffix is not a known unit, or is a word of
    the name (``_NOT_A_UNIT_RE``: ``cell_voltage_min`` is a minimum, not minutes; ``cells_3_t`` no tonnes).

    An array's item, named by its index after the array's name (``cell_voltage_v_3``, from
    ``cell_voltage_v[3]``; ``cell_temps_c_1_0`` from a nested array), has the array's unit."""
    for suffix in _SUFFIXES:
        if name.endswith("_" + suffix) and len(name) > len(suffix) + 1:
            return None if _NOT_A_UNIT_RE.search(name) else UNITS[suffix]
    stem = _INDEX_TAIL_RE.sub("", name)
    return unit_of(stem) if stem != name else None


# Suffixes that may be a word of a name instead of its unit: ``_min`` after a word that names no quantity
# (minutes, or a minimum of something; after one that does it is a minimum, ``_NOT_A_UNIT_RE``), and a phase's
# letter after ``phase`` or ``ph`` (``motor_current_phase_c``, ``ph_a``). A reading sent for such a name in a
# unit of another quantity than the suffix's tells that the suffix was a word (``word_suffix``). Elsewhere a
# suffix is the unit it spells: ``pack_temp_c`` sent in volts is a reading in the wrong unit, set aside.
_WORD_SUFFIX_RE = re.compile(r"(?:^|_)(?:min|(?:phase|ph)_[abc])$")


# A suffix of one letter (``_a``, ``_c``, ``_m``) is a unit (amperes, °C, metres), or the letter SAE J1979 and
# scan tools name a sensor or a bank by (``o2_sensor_a``, ``tps_a``, ``throttle_position_c``). Where a word of
# the name says the letter's quantity (``pack_temp_c``, ``pack_current_a``) it is the unit; elsewhere a reading
# whose text gives a unit of another quantity says it is a letter (``letter_suffix``).
_LETTER_QUANTITY_WORDS: dict[str, frozenset[str]] = {
    "temperature": frozenset({"temp", "temps", "temperature", "temperatures", "tmp", "ntc", "therm"}),
    "current": frozenset({"current", "curr", "amp", "amps", "ampere", "amperes"}),
    "voltage": frozenset({"voltage", "voltages", "volt", "volts"}),
    "power": frozenset({"power", "pwr"}),
    "length": frozenset({"distance", "dist", "length", "odometer", "odo", "mileage", "altitude", "height", "depth"}),
    "time": frozenset({"time", "duration", "runtime", "uptime", "elapsed"}),
    "force": frozenset({"force"}),
    "mass": frozenset({"mass", "weight"}),
    "volume": frozenset({"volume"}),
}


# The letters SAE J1979 and scan tools name sensors and banks by (o2 sensor A-B, pedal D-F, throttle B-C). Another
# letter (``_v``, ``_s``, ``_m``) is its unit: ``battery_v`` = ``"41 °C"`` is a conflict, not a sensor V.
SENSOR_LETTERS = frozenset("abcdef")


def letter_suffix(name: str) -> bool:
    """Whether ``name``'s suffix is one letter that may be a sensor's or a bank's instead of its unit (one of
    ``SENSOR_LETTERS``), where no word of the name says the unit's quantity (``o2_sensor_a``, ``motor_temp_a``;
    not ``pack_current_a``)."""
    words = name.split("_")
    if len(words) < 2 or words[-1] not in SENSOR_LETTERS or (symbol := UNITS.get(words[-1])) is None:
        return False
    quantity = _QUANTITY_OF.get(symbol, ("",))[0]
    return _LETTER_QUANTITY_WORDS.get(quantity, frozenset()).isdisjoint(words)


def word_suffix(name: str) -> bool:
    """Whether ``name``, whose suffix declares a unit, ends in one that may be a word of it instead
    (``_WORD_SUFFIX_RE``: ``_min``, minutes or a minimum; ``phase_c``, degrees Celsius or phase C)."""
    return _WORD_SUFFIX_RE.search(_INDEX_TAIL_RE.sub("", name)) is not None


def other_quantity(written: str, declared: str) -> bool:
    """Whether a reading in ``written`` measures another quantity than a name declaring ``declared`` does: not
    the same unit, not two units of one quantity (``convert`` converts those), and not two that differ by
    their case alone (mΩ and MΩ: the same quantity, a factor of a billion apart)."""
    if written.lower() == declared.lower():
        return False
    source, target = _QUANTITY_OF.get(written), _QUANTITY_OF.get(declared)
    return source is None or target is None or source[0] != target[0]


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
    symbol = UNITS.get(key.removeprefix("°") if key != "°" else "deg")
    if symbol is not None and _other_prefix(text, symbol):
        return None
    return symbol


def _other_prefix(text: str, symbol: str) -> bool:
    """Whether ``text``, written in mixed case, says milli- where the table's ``symbol`` is mega- or the other
    way round (``"mW"`` is no megawatt, ``"mPa"`` no megapascal): a factor of a billion, so not read case-blind.
    Text in one case (``"MW"``, ``"mw"``, ``"KWH"``) and another letter's case (``"KWh"``, ``"Mph"``) are."""
    return (
        text[:1] in ("m", "M") and symbol[:1] in ("m", "M") and text[:1] != symbol[:1]
        and symbol[1:] in _SYMBOLS and text != text.lower() and text != text.upper()
    )  # fmt: skip


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


# Units of one quantity, each as (factor, offset) to the quantity's base unit: base = value * factor + offset.
# A reading sent in one of them for a name that declares another is converted (``convert``). Not here: units
# with no other of their quantity in the table (%, ppm, dB, rpm, N·m, L/100km, ...).
_QUANTITIES: dict[str, dict[str, tuple[float, float]]] = {
    "voltage": {"mV": (1e-3, 0.0), "V": (1.0, 0.0), "kV": (1e3, 0.0)},
    "current": {"µA": (1e-6, 0.0), "mA": (1e-3, 0.0), "A": (1.0, 0.0), "kA": (1e3, 0.0)},
    "resistance": {"mΩ": (1e-3, 0.0), "Ω": (1.0, 0.0), "kΩ": (1e3, 0.0), "MΩ": (1e6, 0.0)},
    "power": {"mW": (1e-3, 0.0), "W": (1.0, 0.0), "kW": (1e3, 0.0), "MW": (1e6, 0.0)},
    "energy": {"Wh": (1.0, 0.0), "kWh": (1e3, 0.0)},
    "charge": {"mAh": (1e-3, 0.0), "Ah": (1.0, 0.0)},
    "frequency": {"Hz": (1.0, 0.0), "kHz": (1e3, 0.0)},
    "temperature": {"K": (1.0, 0.0), "°C": (1.0, 273.15), "°F": (5 / 9, 273.15 - 32 * 5 / 9)},
    "pressure": {"Pa": (1.0, 0.0), "hPa": (1e2, 0.0), "kPa": (1e3, 0.0), "MPa": (1e6, 0.0), "bar": (1e5, 0.0),
                 "mbar": (1e2, 0.0), "psi": (6894.757293168, 0.0)},
    "speed": {"m/s": (1.0, 0.0), "km/h": (1 / 3.6, 0.0), "mph": (0.44704, 0.0)},
    "length": {"mm": (1e-3, 0.0), "cm": (1e-2, 0.0), "m": (1.0, 0.0), "km": (1e3, 0.0), "mi": (1609.344, 0.0)},
    "time": {"µs": (1e-6, 0.0), "ms": (1e-3, 0.0), "s": (1.0, 0.0), "min": (60.0, 0.0), "h": (3600.0, 0.0),
             "d": (86400.0, 0.0)},
    "force": {"N": (1.0, 0.0), "kN": (1e3, 0.0)},
    "mass": {"mg": (1e-3, 0.0), "g": (1.0, 0.0), "kg": (1e3, 0.0), "t": (1e6, 0.0)},
    "volume": {"mL": (1e-3, 0.0), "L": (1.0, 0.0)},
    "flow": {"L/h": (1.0, 0.0), "L/min": (60.0, 0.0)},
    "angle": {"°": (1.0, 0.0), "rad": (180 / 3.141592653589793, 0.0)},
}  # fmt: skip
# symbol -> (its quantity, factor, offset)
_QUANTITY_OF = {symbol: (name, *scale) for name, units in _QUANTITIES.items() for symbol, scale in units.items()}


def convert(value: float, written: str, declared: str) -> float | None:
    """``value`` in the unit ``written`` as a number in ``declared`` (two symbols of the table), to 12
    significant digits (``0.187 V`` is 187.0 mV, not 187.00000000000003); None when the two units measure
    different quantities, or differ by their case alone (mΩ and MΩ: a name's suffix is lower case, so
    ``_mohm`` may mean either, and the factor between them is a billion)."""
    if written == declared:
        return value
    source, target = _QUANTITY_OF.get(written), _QUANTITY_OF.get(declared)
    if source is None or target is None or source[0] != target[0] or written.lower() == declared.lower():
        return None
    (_, f_from, o_from), (_, f_to, o_to) = source, target
    return float(f"{((value * f_from + o_from) - o_to) / f_to:.12g}")


def unit_symbols() -> list[str]:
    """Every unit symbol, longest first (for reading numbers with units out of free text)."""
    return sorted(set(UNITS.values()), key=len, reverse=True)

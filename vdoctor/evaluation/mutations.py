"""Broken summaries, to test the fidelity check: a faithful case summary, mutated one way.

``mutate`` breaks a summary in one of ``KINDS`` and returns None when the
summary has nothing of that kind to break (no voided conclusion to present as
valid, say). It works on the summary's text with its own patterns, not with
the checker's parsers, so that a blind spot of the checker is not copied into
the mutations:

- ``digit``: one digit of one number (a reading, a time, the confidence, a
  threshold, a time in a URI) changed to another digit;
- ``drop_reading``: a signal's readings, one of its first/latest/extreme
  values, or the confirming reading removed;
- ``unit_swap``: the unit after a number replaced by another (mV -> V, °C -> °F);
- ``cause_invented``: a cause no case had stated, in one of several phrasings
  (``cause: ...``, ``root cause ...``, ``原因：...``, ``due to ...``, or
  written into the conclusion with no cue word at all);
- ``cause_swapped``: another case's root cause, in the same phrasings;
- ``void_as_valid``: a voided conclusion with its void marks taken away;
- ``excluded_dropped``: an excluded hypothesis removed;
- ``code_added``: a trouble code the session never saw added to the conclusion.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from vdoctor.memory.request import SummaryRequest
from vdoctor.units import SIGNAL_NAME, unit_symbols

KINDS = (
    "digit",
    "drop_reading",
    "unit_swap",
    "cause_invented",
    "cause_swapped",
    "void_as_valid",
    "excluded_dropped",
    "code_added",
    "conclusion_negated",
    "own_cause_excluded",
)

# A number not glued to a letter (so not a digit of a code, a VIN or a name).
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?")
# A reading as the summary writes it: name=value, up to the next space.
_READING = re.compile(rf"(?<![A-Za-z0-9_]){SIGNAL_NAME}=-?\d[^\s|;]*")
_PART = re.compile(r"[→↓↑]-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_CONFIRMED = re.compile(rf";? ?confirmed {SIGNAL_NAME}=-?[\d.]+(?:>=|<=)-?[\d.]+")
_UNITS = sorted(unit_symbols(), key=len, reverse=True)
# A unit right after a number of its own (not the last letter of a code like P1A9A).
_UNIT_AFTER_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.])-?\d+(?:\.\d+)?( ?)(" + "|".join(re.escape(u) for u in _UNITS) + r")(?![A-Za-z0-9])"
)
# Units people confuse; anything else is swapped for a random other unit.
SWAPS = {
    "mV": "V", "V": "mV", "kV": "V", "A": "mA", "mA": "A", "°C": "°F", "°F": "°C", "kPa": "bar", "bar": "kPa",
    "%": "ppm", "km": "mi", "km/h": "mph", "rpm": "Hz", "Hz": "rpm", "s": "ms", "ms": "s", "kΩ": "Ω", "Ω": "kΩ",
    "N·m": "kN", "kWh": "Wh", "Wh": "kWh", "L/h": "L/min", "°": "rad", "kW": "W", "W": "kW",
}  # fmt: skip
_VOID_WORDS = re.compile(
    r"的?结论已作废|已作废|作废|被推翻|推翻|撤销|\s*is void|\bvoided\b|\bvoid\b|\boverturned\b", re.I
)
_VOID_EVENT = re.compile(r"\| void \||\bvoid:", re.I)
INVENTED_PARTS = ["ground strap G401", "wiper motor relay", "seat heater module", "rear camera harness", "horn relay"]
INVENTED_MODES = ["corroded", "chafed", "water-logged", "loose", "cracked", "burnt"]
INVENTED_ZH = ["雨刮继电器烧蚀", "座椅加热模块进水", "搭铁线G401腐蚀", "尾门线束磨破"]
CAUSE_FORMS = ("cause: {x}", "root cause {x}", "原因：{x}", "due to {x}", "unmarked")
# Codes a session could have seen; one it did not see is added.
EXTRA_CODES = ["P0420", "P0171", "P0300", "P0128", "U0100", "B1318", "C0035", "P0A7F", "P0AA6", "U0073", "P2187"]


@dataclass(frozen=True)
class Mutation:
    kind: str
    text: str
    note: str


def _splice(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _concluded_line(lines: list[str]) -> int | None:
    return next((i for i in range(len(lines) - 1, -1, -1) if re.search(r"\bconcluded\b", lines[i])), None)


def _digit(summary: str, rng: random.Random) -> Mutation | None:
    numbers = list(_NUMBER.finditer(summary))
    if not numbers:
        return None
    m = rng.choice(numbers)
    positions = [i for i in range(m.start(), m.end()) if summary[i].isdigit()]
    pos = rng.choice(positions)
    new = rng.choice([d for d in "0123456789" if d != summary[pos]])
    return Mutation("digit", _splice(summary, pos, pos + 1, new), f"{m.group()} digit {summary[pos]}->{new}")


def _still_stated(text: str, name: str, value: str) -> bool:
    """Whether ``text`` still states ``value`` for signal ``name`` (in any of its readings)."""
    for m in re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(name)}=([^\s|;]*)", text):
        if value in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", m.group(1)):
            return True
    return False


def _reading_statements(summary: str) -> list[tuple[int, int, str, str]]:
    """(start, end, signal, value) of every reading the summary states, whole or as one part of a span."""
    found: list[tuple[int, int, str, str]] = []
    for m in _READING.finditer(summary):
        name = m.group().split("=", 1)[0]
        if summary[max(0, m.start() - 10) : m.start()].endswith("confirmed "):
            continue
        first = re.match(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", m.group()[len(name) + 1 :])
        start, end = m.start(), m.end()
        if end < len(summary) and summary[end] == " ":  # a whole reading takes a neighbouring space with it
            end += 1
        elif start > 0 and summary[start - 1] == " ":
            start -= 1
        found.append((start, end, name, first.group() if first else ""))
        found += [(m.start() + p.start(), m.start() + p.end(), name, p.group()[1:]) for p in _PART.finditer(m.group())]
    for m in _CONFIRMED.finditer(summary):
        name, _, rest = m.group().split("confirmed ", 1)[1].partition("=")
        found.append((m.start(), m.end(), name, re.split(r"[<>]=", rest)[0]))
    return found


def _drop_reading(summary: str, rng: random.Random) -> Mutation | None:
    """Remove one reading of one signal from everywhere the summary states it."""
    options = _reading_statements(summary)
    if not options:
        return None
    _, _, name, value = rng.choice(options)
    text = summary
    for _ in range(len(options)):
        hit = next(((a, b) for a, b, n, v in _reading_statements(text) if (n, v) == (name, value)), None)
        if hit is None or not _still_stated(text, name, value):
            break
        text = _splice(text, hit[0], hit[1], "")
    return Mutation("drop_reading", text, f"dropped {name}={value}")


def _unit_swap(summary: str, rng: random.Random) -> Mutation | None:
    found = list(_UNIT_AFTER_NUMBER.finditer(summary))
    if not found:
        return None
    m = rng.choice(found)
    unit = m.group(2)
    other = SWAPS.get(unit) or rng.choice([u for u in _UNITS if u != unit])
    return Mutation("unit_swap", _splice(summary, m.start(2), m.end(2), other), f"{unit}->{other}")


def _state_cause(summary: str, cause: str, rng: random.Random, kind: str) -> Mutation | None:
    lines = summary.splitlines()
    form = rng.choice(CAUSE_FORMS)
    stated = next((i for i, line in enumerate(lines) if re.match(r"(?:root )?cause:|原因[：:]", line, re.I)), None)
    if stated is not None:
        # The summary states a cause already: replace it.
        head = re.match(r"((?:root )?cause:|原因[：:])\s*", lines[stated], re.I)
        assert head is not None
        rest = lines[stated][head.end() :]
        tail = rest[rest.index("; fix:") :] if "; fix:" in rest else ""
        lines[stated] = head.group(0) + cause + tail
        return Mutation(kind, "\n".join(lines), f"replaced stated cause with {cause!r}")
    concluded = _concluded_line(lines)
    if form == "unmarked" and concluded is not None:
        lines[concluded] = re.sub(r"(concluded [A-Z0-9 ]+)", rf"\1 {cause} ", lines[concluded], count=1)
    elif form == "due to {x}" and concluded is not None:
        lines[concluded] = re.sub(r"(concluded [A-Z0-9 ]+)", rf"\1 due to {cause} ", lines[concluded], count=1)
    else:
        fmt = form if form not in ("unmarked", "due to {x}") else "cause: {x}"
        lines.append(fmt.format(x=cause))
    return Mutation(kind, "\n".join(lines), f"{form} {cause!r}")


def _void_as_valid(summary: str, request: SummaryRequest, rng: random.Random) -> Mutation | None:
    voids = [v for v in (request.decision.void if request.decision else []) if v in summary]
    if not voids:
        return None
    text = rng.choice(voids)
    lines = summary.splitlines()
    i = next(i for i, line in enumerate(lines) if text in line)
    valid = _VOID_WORDS.sub("", text).strip(" ,，:：") or text
    line = lines[i].replace(text, valid)
    lines[i] = _VOID_EVENT.sub(lambda m: "| concluded |" if m.group().startswith("|") else "conclusion:", line)
    return Mutation("void_as_valid", "\n".join(lines), f"{text!r} -> {valid!r}")


def _excluded_dropped(summary: str, request: SummaryRequest, rng: random.Random) -> Mutation | None:
    texts = [x for x in (request.decision.excluded if request.decision else []) if x in summary]
    if not texts:
        return None
    text = rng.choice(texts)
    lines = summary.splitlines()
    i = next(i for i, line in enumerate(lines) if text in line)
    rest = re.sub(r"[|\s:-]|excluded|ruled out", "", lines[i].replace(text, ""), flags=re.I)
    if not re.sub(r"\d", "", rest):  # the line held only this exclusion (and its time)
        del lines[i]
    else:
        lines[i] = lines[i].replace(text, "")
    return Mutation("excluded_dropped", "\n".join(lines), f"dropped {text!r}")


def _code_added(summary: str, request: SummaryRequest, rng: random.Random) -> Mutation | None:
    unseen = [c for c in EXTRA_CODES if c not in request.source]
    lines = summary.splitlines()
    concluded = _concluded_line(lines)
    if not unseen or concluded is None:
        return None
    code = rng.choice(unseen)
    form = rng.choice([r"\1 {c}", r"\1 (also {c})"]).format(c=code)
    lines[concluded] = re.sub(r"(concluded [A-Z0-9]+)", form, lines[concluded], count=1)
    return Mutation("code_added", "\n".join(lines), f"added {code}")


NEGATIONS = ("not concluded", "never concluded", "not yet concluded")
EXCLUSION_FORMS = ("{x} ruled out", "excluded: {x}", "{x} not the cause", "已排除{x}")


def _conclusion_negated(summary: str, rng: random.Random) -> Mutation | None:
    """The conclusion taken back: ``concluded`` written ``not concluded`` (or ``never``, ``not yet``)."""
    lines = summary.splitlines()
    concluded = _concluded_line(lines)
    if concluded is None:
        return None
    negation = rng.choice(NEGATIONS)
    lines[concluded] = re.sub(r"\bconcluded\b", negation, lines[concluded], count=1)
    return Mutation("conclusion_negated", "\n".join(lines), negation)


def _own_cause_excluded(summary: str, request: SummaryRequest, rng: random.Random) -> Mutation | None:
    """The session's own root cause stated as a hypothesis ruled out."""
    cause = request.decision.root_cause if request.decision else ""
    if not cause:
        return None
    form = rng.choice(EXCLUSION_FORMS)
    return Mutation("own_cause_excluded", f"{summary}\n{form.format(x=cause)}", form)


def invented_cause(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return rng.choice(INVENTED_ZH)
    return f"{rng.choice(INVENTED_MODES)} {rng.choice(INVENTED_PARTS)}"


def mutate(
    summary: str, request: SummaryRequest, kind: str, rng: random.Random, other_causes: list[str]
) -> Mutation | None:
    """``summary`` broken one way of ``kind``; None when it has nothing of that kind to break."""
    if kind == "digit":
        return _digit(summary, rng)
    if kind == "drop_reading":
        return _drop_reading(summary, rng)
    if kind == "unit_swap":
        return _unit_swap(summary, rng)
    if kind == "cause_invented":
        return _state_cause(summary, invented_cause(rng), rng, kind)
    if kind == "cause_swapped":
        own = request.decision.root_cause if request.decision else ""
        others = [c for c in other_causes if c and c != own]
        return _state_cause(summary, rng.choice(others), rng, kind) if others else None
    if kind == "void_as_valid":
        return _void_as_valid(summary, request, rng)
    if kind == "excluded_dropped":
        return _excluded_dropped(summary, request, rng)
    if kind == "code_added":
        return _code_added(summary, request, rng)
    if kind == "conclusion_negated":
        return _conclusion_negated(summary, rng)
    if kind == "own_cause_excluded":
        return _own_cause_excluded(summary, request, rng)
    raise ValueError(f"unknown mutation kind {kind!r}; valid: {', '.join(KINDS)}")


# -- rewrites that keep the meaning: the check must accept them (false-alarm controls) ----------

BENIGN_KINDS = ("reorder_lines", "true_cause_stated", "wordier_confidence", "opening_line_dropped")


def rewrite(summary: str, request: SummaryRequest, kind: str, rng: random.Random) -> Mutation | None:
    """``summary`` rewritten without changing what it says; None when the rewrite does not apply.

    - ``reorder_lines``: the lines in another order;
    - ``true_cause_stated``: the session's own root cause added as ``cause: ...`` (when it fits);
    - ``wordier_confidence``: ``conf 0.80`` written ``confidence 0.80``;
    - ``opening_line_dropped``: an alert line dropped whose codes and readings the summary states elsewhere.
    """
    lines = summary.splitlines()
    if kind == "reorder_lines":
        if len(lines) < 2:
            return None
        shuffled = lines[:]
        while shuffled == lines:
            rng.shuffle(shuffled)
        return Mutation(kind, "\n".join(shuffled), "lines reordered")
    if kind == "true_cause_stated":
        cause = request.decision.root_cause if request.decision else ""
        text = f"{summary}\ncause: {cause}"
        return Mutation(kind, text, "own cause stated") if cause and len(text) <= request.max_chars else None
    if kind == "wordier_confidence":
        text = re.sub(r"\bconf (\d\.\d+)", r"confidence \1", summary, count=1)
        fits = text != summary and len(text) <= request.max_chars
        return Mutation(kind, text, "conf -> confidence") if fits else None
    if kind == "opening_line_dropped":
        alerts = [i for i, line in enumerate(lines) if re.search(r"\| alert\b", line)]
        if not alerts:
            return None
        del lines[alerts[0]]
        return Mutation(kind, "\n".join(lines), "alert line dropped")
    raise ValueError(f"unknown rewrite kind {kind!r}; valid: {', '.join(BENIGN_KINDS)}")

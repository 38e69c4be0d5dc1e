"""Key facts: the never-compressed part of the working context (seed 003).

Every tool result and every model turn passes through an extraction step that
pulls out what a later step must not lose, as one typed ``KeyFact`` per fact
(rendered and parsed in ``vdoctor.lines``):

    code P0A7F: Hybrid/EV battery pack deterioration   a DTC with its definition
    reading cell_voltage_diff_mv=187 @2026-11-01T...   a numeric reading with unit and time
    reading 46.5℃ @2026-11-01T...                      a number with a unit from free text
    decision: cell imbalance (confidence 0.8) @...      a decision with its confidence
    void: conclusion of step 4 voided @...              an overturned conclusion (kept!)
    excluded: suspected the harness, ruled out          an excluded hypothesis
    id WO-12345                                         ticket / work-order ids
    id X12                                              part, connector and board ids
    id cell 37                                          a numbered item (cell 37, module 4)
    count 96 sense lines                                a count of things
    evidence signal://<vin>/<signal>@<ts>               evidence URIs

A reading's trend (all its values in time order) is kept by working memory
from the readings (``working.py``); "from 62 to 187 mV" gives both readings.

Tool results and final answers are JSON, so they are read structurally (by
key); free text (alert texts, notes, model prose) is read with patterns that
work on Chinese and English alike.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from vdoctor.lines import (
    CODE_FACT,
    COUNT_FACT,
    DECISION_FACT,
    EVIDENCE_FACT,
    EXCLUDED_FACT,
    ID_FACT,
    READING_FACT,
    VOID_FACT,
    KeyFact,
    fmt_num,
)
from vdoctor.units import HAS_LETTER

# re.ASCII throughout: CJK characters count as \w in Python, so a plain \b or
# (?<!\w) would miss 压差187mV, 报P0A7F or 证据signal://... in Chinese text.
# A pattern run over every text starts with its first character and looks
# behind that character after it: ``[PCBU](?<!\w[PCBU])`` is ``\b[PCBU]``. The
# scan skips fast to a leading character class; a leading \b or lookbehind is
# tried at every position (twice the time on a case's source).
# A J1939 code is written SPN<n>-FMI<n> (``events.trouble_code``): its S is one more leading character.
CODE_RE = re.compile(r"[PCBUS](?<!\w[PCBUS])(?:(?<=[PCBU])[0-9A-F]{4}|(?<=S)PN\d{1,6}-FMI\d{1,2})\b", re.ASCII)
# Evidence URIs use [A-Za-z0-9_-/@:.] only; a trailing full stop ends the sentence.
URI_RE = re.compile(r"\b(?:dtc|signal|case)://[\w\-/@:.]*[\w\-/@:]", re.ASCII)
# What a voltage rating names (after the V and a space, if any): "12 V battery", "48V system", "800V平台".
_RATED = (
    r"[ -]?(?:batter(?:y|ies)|systems?|rails?|bus(?:es)?|packs?|supply|supplies|architecture|platforms?|circuits?"
    r"|networks?|side|sockets?|outlets?)\b|蓄电池|电池|系统|平台|架构|电源|供电|母线"
)
# A number with a unit, Chinese or English style: 压差187mV, 46.5℃, 3.2 s, 12 %. The number is
# (?<![\w.])(-?\d+(?:\.\d+)?), written to start with its first character (see CODE_RE). A voltage that
# names what it is the voltage of (the 12 V battery, a 48 V system, an 800V平台) is its rating, no reading.
_READING_RE = re.compile(
    r"([-\d](?<![\w.][-\d])(?:(?<=-)\d+|(?<=\d)\d*)(?:\.\d+)?)\s?(mV|V|A|kPa|rpm|km|ms|s|%|℃|°C|kΩ|Ω)(?![A-Za-z])"
    rf"(?!(?<=V){_RATED})",
    re.ASCII,
)
# A signal assignment in free text: a snake_case name with at least one
# underscore (any unit, or none; ``vdoctor.units``), then = or : and a number.
_SIGNAL_RE = re.compile(rf"\b({HAS_LETTER}[a-z0-9]+(?:_[a-z0-9]+)+)\s*[=:]\s*(-?\d+(?:\.\d+)?)", re.ASCII)
# What every signal assignment contains: the scan above tries every word of a text
# (a lowercase first letter is too common to skip to), this one only each underscore.
_SIGNAL_GATE = re.compile(r"_[a-z0-9]+\s*[=:]\s*-?\d", re.ASCII)
# Sentence pieces: clauses end at . ; 。 ； or a line break (a comma does not
# end one: "suspected the harness, ruled out" is one fact).
_CLAUSE = r"[^.;。；\n]"
# A state word a negation stands right before says the opposite: "not ruled out", "cannot be excluded",
# "hasn't yet been ruled out", 未排除, 不排除, 未被排除, 没有作废 keep a hypothesis open and a conclusion valid.
# The text before the word, as written (one blank between words): "cannot be" ends in "not be", 尚未 in 未.
NEGATIONS_EN = (
    "not ", "not yet ", "not been ", "not yet been ", "not be ", "not yet be ", "not fully ", "not completely ",
    "not entirely ", "never ", "never been ", "n't ", "n't yet ", "n't been ", "n't yet been ", "n't be ",
    "n't fully ",
)  # fmt: skip
NEGATIONS_ZH = ("未", "不", "没", "没有", "无法", "不能", "不可", "难以", "未被", "没被", "没有被", "未能", "没能",
                "未完全", "不能完全", "无法完全")  # fmt: skip
# A lookbehind a form (each of fixed width, as Python's lookbehinds must be).
_NOT_NEGATED = "".join(f"(?<!{re.escape(form)})" for form in (*NEGATIONS_EN, *NEGATIONS_ZH))
EXCLUDED_WORDS = r"ruled out|excluded|not the cause|排除|已排除|不是原因"
VOID_WORDS = r"\bvoid(?:ed)?\b|\boverturned\b|\brevoked\b|\bwithdrawn\b|作废|推翻|撤销"
_EXCLUDED_KEY = rf"{_NOT_NEGATED}(?:{EXCLUDED_WORDS})"
_VOID_KEY = rf"{_NOT_NEGATED}(?:{VOID_WORDS})"
# The same words with a negation before them (``_NOT_NEGATED``'s forms): a state taken back.
NEGATED_STATE = (
    "(?:" + "|".join(rf"\b{re.escape(f)}" if f[0].isalpha() else re.escape(f) for f in NEGATIONS_EN) + ")"
    rf"(?:{EXCLUDED_WORDS}|{VOID_WORDS})"
    "|(?:" + "|".join(re.escape(f) for f in NEGATIONS_ZH) + ")(?:排除|作废|推翻|撤销)"
)
_DECISION_KEY = r"\bconfidence\s*[=:]?\s*(?:0(?:\.\d+)?|1(?:\.0+)?)\b"


def fold_case(text: str) -> str:
    """``text`` folded so that a substring test finds whatever an IGNORECASE pattern matches.

    casefold covers it, except the dotless i that IGNORECASE lets match "i"
    and the dot above that follows the i of a folded capital İ.
    """
    return text.casefold().replace("ı", "i").replace("\u0307", "")


# What a match of URI_RE has before its "://": the schemes' lengths (signal, case, dtc).
_SCHEME_LENGTHS = (6, 4, 3)


def split_uris(text: str) -> tuple[str, list[str]]:
    """``URI_RE.sub(" ", text)`` and ``URI_RE.findall(text)``, the URIs found from each "://" of ``text``.

    A match of URI_RE holds "://" right after its scheme, so it starts 6, 4 or 3
    characters before one (at most one of these: the schemes end in different
    letters), and the matches in order start before "://"s in order. The pattern
    is tried there only, after the end of the match before, as a scan of the
    whole text would find it: most of a case's source is no URI.
    """
    plain: list[str] = []
    uris: list[str] = []
    end = 0
    at = text.find("://")
    while at >= 0:
        for length in _SCHEME_LENGTHS:
            start = at - length
            if start >= end and (m := URI_RE.match(text, start)) is not None:
                plain.append(text[end:start])
                uris.append(m.group())
                end = m.end()
                break
        at = text.find("://", max(at + 1, end))
    plain.append(text[end:])
    return " ".join(plain), uris


class _ClausePattern:
    """A clause of up to ``reach`` characters that leads up to a keyword, plus what follows it.

    Same matches as ``re.findall`` of the whole pattern, but it tries only the
    start positions within ``reach`` of a keyword: the plain scan tries every
    position and backtracks over up to ``reach`` characters at each, which made
    these three patterns a fifth of a diagnosis run's CPU.
    """

    def __init__(self, keyword: str, words: tuple[str, ...], reach: int, tail: str = "", flags: int = 0) -> None:
        self.reach = reach
        self.pattern = re.compile(rf"({_CLAUSE}{{0,{reach}}}{keyword}{tail})", flags)
        # Lookahead: every start of a keyword, overlapping ones included.
        self._keyword = re.compile(rf"(?=(?:{keyword}))", flags)
        # A substring test first (most texts have no keyword at all): every
        # keyword contains one of ``words``, in the same folding as the pattern.
        self._words = words
        self._fold = bool(flags & re.IGNORECASE)

    def findall(self, text: str, folded: str | None = None) -> list[str]:
        """``folded`` is ``fold_case(text)`` when the caller has it already."""
        haystack = (fold_case(text) if folded is None else folded) if self._fold else text
        if not any(word in haystack for word in self._words):
            return []
        found: list[str] = []
        pos = 0
        for key in self._keyword.finditer(text):
            if key.start() < pos:
                continue
            # Every start before `key.start() - reach` would need a keyword
            # between `pos` and `key`; there is none, so the scan starts here.
            match = self.pattern.search(text, max(pos, key.start() - self.reach))
            if match is None:
                break
            found.append(match.group(1))
            pos = match.end()
        return found


# A word of every exclusion and void keyword, in ``fold_case`` form: a text without one holds neither.
EXCLUDED_GATE = ("ruled out", "excluded", "not the cause", "排除", "不是原因")
VOID_GATE = ("void", "overturned", "revoked", "withdrawn", "作废", "推翻", "撤销")
_EXCLUDED_RE = _ClausePattern(_EXCLUDED_KEY, EXCLUDED_GATE, 80, rf"{_CLAUSE}{{0,40}}", re.I)
# An overturned conclusion: the conclusion itself must stay known as void.
_VOID_RE = _ClausePattern(_VOID_KEY, VOID_GATE, 80, rf"{_CLAUSE}{{0,60}}", re.I)
_DECISION_RE = _ClausePattern(_DECISION_KEY, ("confidence",), 120)
# What every decision keyword contains: JSON's "confidence": 0.8 has the word, not the keyword.
_DECISION_GATE = re.compile(r"confidence\s*[=:]?\s*[01]")
_ID_RE = re.compile(r"(?<![A-Za-z0-9_])(?:WO|TK|RO|TICK|ORD|工单)[-#: ]?\d{3,}(?:-\d+)*(?![A-Za-z0-9_])")
# What every ticket id starts with: a scan for it skips fast to the first letters.
_ID_GATE = re.compile(r"WO|TK|RO|TICK|ORD|工单")
# A part, connector, board or pin id: capitals and digits (X12, CSC3, K2-4); not
# a trouble code, not a VIN (17 characters), not a priority (P2). Written to start
# with its first character (see CODE_RE): (?<![A-Za-z0-9_\-./:@])[A-Z]...
_PART_RE = re.compile(r"[A-Z](?<![A-Za-z0-9_\-./:@][A-Z])[A-Z0-9]*\d[A-Z0-9]*(?:-[A-Z0-9]+)*(?![A-Za-z0-9_])", re.ASCII)
MIN_PART_ID = 3
VIN_LENGTH = 17
# A numbered item: a word and a number (cell 37, module 4, step-4, pin #3), the number whole.
_ITEM_RE = re.compile(r"\b([A-Za-z]{3,})(?: #?|[#-])(\d{1,4})(?![\d.]?\d)(?![A-Za-z_])", re.ASCII)
# What every numbered item contains, a letter, a separator and a digit, found from the digit:
# the scan above tries every word of a text, this one only each digit.
_ITEM_GATE = re.compile(r"\d(?:(?<=[A-Za-z][ #-]\d)|(?<=[A-Za-z] #\d))", re.ASCII)
# Words before a number that name no item (the number is a quantity or a time).
_NOT_ITEMS = frozenset(
    "the and for from with about than into over under after before within around all per via are was were has had "
    "have its our this that these those top last next first only each every lost reached took gave over at about "
    "confidence conf".split()
)
# A count of things: a number and a plural noun phrase (96 sense lines, 3 cells), or 96根采样线.
# Both written to start with their first digit (see CODE_RE): (?<![\w.])(\d{1,6}) ...
_COUNT_RE = re.compile(r"(\d(?<![\w.]\d)\d{0,5}) ((?:[a-z]{2,} )?[a-z]{2,}s)\b", re.ASCII)
_COUNT_ZH_RE = re.compile(r"(\d(?<![A-Za-z0-9_.]\d)\d{0,5}) ?([个条根节次处颗路块片组][\u4e00-\u9fff]{0,4})")
_COUNT_ZH_GATE = re.compile(r"[个条根节次处颗路块片组]")
# A change stated in text: from 62 to 187 mV, 从62升至187mV (both values are readings).
# f(?<!\wf)rom is \bfrom, written to start with its first character (see CODE_RE).
_UNIT = r"(?:mV|V|A|kPa|rpm|km|ms|s|%|℃|°C)"
_FROM_TO_RE = re.compile(
    rf"f(?<!\wf)rom (-?\d+(?:\.\d+)?) ?{_UNIT}? to (-?\d+(?:\.\d+)?) ?({_UNIT})"
    rf"|从(-?\d+(?:\.\d+)?)\S{{0,3}}?(?:升至|降至|升到|降到|增至|减至|到|至)(-?\d+(?:\.\d+)?) ?({_UNIT})"
)


def _num(value: Any) -> str:
    """A JSON number as written by people: 187, not 187.0."""
    return fmt_num(value) if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def extract_text_facts(text: str, when: str = "") -> list[KeyFact]:
    """Facts in free text (alert texts, notes, model prose), Chinese or English."""
    facts: list[KeyFact] = []
    for code in CODE_RE.findall(text):
        facts.append(KeyFact.code(code))
    for name, value in _SIGNAL_RE.findall(text) if _SIGNAL_GATE.search(text) else ():
        facts.append(KeyFact(READING_FACT, f"{name}={value}", at=when))
    for value, unit in _READING_RE.findall(text):
        facts.append(KeyFact(READING_FACT, f"{value}{unit}", at=when))
    plain, uris = split_uris(text)
    for uri in uris:
        facts.append(KeyFact(EVIDENCE_FACT, uri))
    folded = fold_case(text)  # for both case-blind patterns
    for match in _EXCLUDED_RE.findall(text, folded):
        facts.append(KeyFact(EXCLUDED_FACT, match.strip(), at=when))
    for match in _VOID_RE.findall(text, folded):
        facts.append(KeyFact(VOID_FACT, match.strip(), at=when))
    for match in _DECISION_RE.findall(text) if _DECISION_GATE.search(text) else ():
        facts.append(KeyFact(DECISION_FACT, match.strip(), at=when))
    for ident in _ID_RE.findall(text) if _ID_GATE.search(text) else ():
        facts.append(KeyFact(ID_FACT, ident))
    facts += _items_and_counts(plain, when)
    return facts


def is_ticket_id(text: str) -> bool:
    """Whether an id fact is a work order or ticket (``WO-12345``, ``工单 88231``): an id a record must carry."""
    return _ID_RE.fullmatch(text) is not None


def _items_and_counts(plain: str, when: str) -> list[KeyFact]:
    """Part ids, numbered items, counts, and the two readings of a stated change, in ``plain``: a text
    without its URIs (``split_uris``)."""
    facts: list[KeyFact] = []
    for ident in _PART_RE.findall(plain):
        if len(ident) >= MIN_PART_ID and len(ident) != VIN_LENGTH and not CODE_RE.fullmatch(ident):
            facts.append(KeyFact(ID_FACT, ident))
    numbered: set[int] = set()  # where an item's number starts: "cell 37 keeps" is no count of keeps
    for m in _ITEM_RE.finditer(plain) if _ITEM_GATE.search(plain) else ():
        if m.group(1).lower() not in _NOT_ITEMS:
            facts.append(KeyFact(ID_FACT, m.group(0).lower()))
            numbered.add(m.start(2))
    # A Chinese count needs its measure word: an ASCII text (isascii is a flag of
    # the string, no scan) has none, and a search for it skips fast to one.
    chinese = not plain.isascii() and _COUNT_ZH_GATE.search(plain)
    for m in [*_COUNT_RE.finditer(plain), *(_COUNT_ZH_RE.finditer(plain) if chinese else ())]:
        if m.start(1) not in numbered:
            facts.append(KeyFact(COUNT_FACT, m.group(0)))
    # Every stated change contains "from " or 从: a substring test skips the scan of most texts.
    for m in _FROM_TO_RE.finditer(plain) if "from " in plain or "从" in plain else ():
        low, high, unit = (m.group(1), m.group(2), m.group(3)) if m.group(1) else (m.group(4), m.group(5), m.group(6))
        facts += [KeyFact(READING_FACT, f"{value}{unit}", at=when) for value in (low, high)]
    return facts


def extract_tool_facts(result: str, when: str = "") -> list[KeyFact]:
    """Facts in a tool result, read by key when it is JSON (our tools' shape)."""
    try:
        data = json.loads(result)
    except ValueError:
        return extract_text_facts(result, when)
    if not isinstance(data, dict):
        return extract_text_facts(result, when)
    facts: list[KeyFact] = []
    for item in data.get("codes", []) if isinstance(data.get("codes"), list) else []:
        if isinstance(item, dict) and item.get("code"):
            definition = str(item.get("definition_en") or item.get("definition") or "")
            # What confirms the fault, and its priority: a later step needs the threshold.
            rule = "; ".join(f"{k} {item[k]}" for k in ("confirm", "priority") if item.get(k))
            facts.append(KeyFact.code(str(item["code"]), f"{definition}; {rule}" if rule else definition))
    signal = data.get("signal")
    for reading in data.get("readings", []) if isinstance(data.get("readings"), list) else []:
        if isinstance(reading, dict) and "value" in reading:
            # The reading's URI is signal://<vin>/<signal>@<ts>: the fact names
            # both, so the URI itself becomes a key fact only when it is cited.
            at = str(reading.get("ts", ""))
            facts.append(KeyFact(READING_FACT, f"{signal}={_num(reading['value'])}", at=at))
    # A J1939 code the pack holds no entry for, with what its SPN and FMI mean (``lookup_dtc``'s "meanings").
    meanings = data.get("meanings")
    if isinstance(meanings, dict):
        facts += [KeyFact.code(str(code), str(text)) for code, text in meanings.items()]
    # Whatever else the tool said in prose (notes, ticket ids) is read as text.
    skipped = ("codes", "readings", "signal", "unknown", "not_looked_up", "meanings")
    rest = {k: v for k, v in data.items() if k not in skipped}
    if rest:
        facts += extract_text_facts(json.dumps(rest, ensure_ascii=False), when)
    return facts


# A reply's JSON answer is looked for from its first few "{": an answer stands at or near its start, and
# trying every "{" of a reply that holds many would cost a decode each.
_ANSWER_STARTS = 8
_DECODER = json.JSONDecoder()


@lru_cache(maxsize=256)
def answer_prose(text: str) -> str:
    """``text`` with the model's JSON answer in it replaced by the answer's own prose (its root cause and fix),
    for the key-fact reader and the fold's check: what ``extract_answer_facts`` reads from the answer's lists.

    Read as text, the answer's keys are the very words the reader looks for: ``"excluded": [], "voided": []``
    became an excluded and a void fact of JSON fragments on every answer of a model that writes the keys the
    prompt asks for. The answer is the first JSON object with a ``phase`` that decodes from one of the first
    few "{" (a round's text has the reply first, then its tools' lines); a text without one is as it is.

    Kept by text: a round's reply is read when the round is added and again when the rounds are folded.
    """
    at = text.find("{")
    for _ in range(_ANSWER_STARTS):
        if at < 0:
            break
        try:
            data, end = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):
            at = text.find("{", at + 1)
            continue
        if not isinstance(data, dict) or "phase" not in data:  # another JSON object (a tool's), not the answer
            at = text.find("{", end)
            continue
        prose = [data[key] for key in ("root_cause", "fix_action") if isinstance(data.get(key), str)]
        return "\n".join(part for part in (text[:at].strip(), *prose, text[end:].strip()) if part)
    return text


def extract_answer_facts(answer: dict[str, Any], when: str = "") -> list[KeyFact]:
    """Facts in a model's final answer (the JSON of ``react.FinalAnswer``)."""
    facts: list[KeyFact] = []
    codes = [str(c) for c in answer.get("codes", []) if isinstance(c, str)]
    facts += [KeyFact.code(c) for c in codes]
    conf = answer.get("confidence")
    phase = answer.get("phase")
    # The confidence as the answer wrote it (0.8, not 0.80): numbers stay verbatim.
    if answer.get("root_cause") and isinstance(conf, int | float):
        facts.append(KeyFact(DECISION_FACT, f"{phase} {answer['root_cause']} (confidence {_num(conf)})", at=when))
    elif phase == "INVESTIGATING" and codes and isinstance(conf, int | float):
        facts.append(KeyFact(DECISION_FACT, f"INVESTIGATING {' '.join(codes)} (confidence {_num(conf)})", at=when))
    for uri in answer.get("evidence", []) if isinstance(answer.get("evidence"), list) else []:
        facts.append(KeyFact(EVIDENCE_FACT, str(uri)))
    for hypothesis in answer.get("excluded", []) if isinstance(answer.get("excluded"), list) else []:
        facts.append(KeyFact(EXCLUDED_FACT, str(hypothesis), at=when))
    for voided in answer.get("voided", []) if isinstance(answer.get("voided"), list) else []:
        facts.append(KeyFact(VOID_FACT, str(voided), at=when))
    return facts


def dedupe(facts: list[KeyFact]) -> list[KeyFact]:
    """Facts in first-seen order, each once; a code's fact gives way to one that says more of it
    (``code X`` to ``code X: definition``, that to ``code X: definition; confirm ...; priority P2``)."""
    richest: dict[str, str] = {}
    for f in facts:
        if f.kind is CODE_FACT and len(f.note) > len(richest.get(f.text, "")):
            richest[f.text] = f.note
    # dict.fromkeys keeps the first of equal facts, in order, hashing each fact once.
    return list(dict.fromkeys(f for f in facts if f.kind is not CODE_FACT or f.note == richest.get(f.text, "")))

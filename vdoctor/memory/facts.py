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
    evidence signal://<vin>/<signal>@<ts>               evidence URIs

Tool results and final answers are JSON, so they are read structurally (by
key); free text (alert texts, notes, model prose) is read with patterns that
work on Chinese and English alike.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vdoctor.lines import FactKind, KeyFact, fmt_num

# re.ASCII throughout: CJK characters count as \w in Python, so a plain \b or
# (?<!\w) would miss 压差187mV, 报P0A7F or 证据signal://... in Chinese text.
CODE_RE = re.compile(r"\b[PCBU][0-9A-F]{4}\b", re.ASCII)
# Evidence URIs use [A-Za-z0-9_-/@:.] only; a trailing full stop ends the sentence.
URI_RE = re.compile(r"\b(?:dtc|signal|case)://[\w\-/@:.]*[\w\-/@:]", re.ASCII)
# A number with a unit, Chinese or English style: 压差187mV, 46.5℃, 3.2 s, 12 %.
_READING_RE = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s?(mV|V|A|kPa|rpm|km|ms|s|%|℃|°C|kΩ|Ω)(?![A-Za-z])", re.ASCII)
# A signal assignment in free text: a snake_case name with at least one
# underscore (any unit, or none; ``vdoctor.units``), then = or : and a number.
_SIGNAL_RE = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\s*[=:]\s*(-?\d+(?:\.\d+)?)", re.ASCII)
# Sentence pieces: clauses end at . ; 。 ； or a line break (a comma does not
# end one: "suspected the harness, ruled out" is one fact).
_CLAUSE = r"[^.;。；\n]"
_EXCLUDED_KEY = r"(?:ruled out|excluded|not the cause|排除|已排除|不是原因)"
_VOID_KEY = r"(?:\bvoid(?:ed)?\b|\boverturned\b|\brevoked\b|\bwithdrawn\b|作废|推翻|撤销)"
_DECISION_KEY = r"\bconfidence\s*[=:]?\s*(?:0(?:\.\d+)?|1(?:\.0+)?)\b"


def fold_case(text: str) -> str:
    """``text`` folded so that a substring test finds whatever an IGNORECASE pattern matches.

    casefold covers it, except the dotless i that IGNORECASE lets match "i"
    and the dot above that follows the i of a folded capital İ.
    """
    return text.casefold().replace("ı", "i").replace("\u0307", "")


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


_EXCLUDED_RE = _ClausePattern(
    _EXCLUDED_KEY, ("ruled out", "excluded", "not the cause", "排除", "不是原因"), 80, rf"{_CLAUSE}{{0,40}}", re.I
)
# An overturned conclusion: the conclusion itself must stay known as void.
_VOID_RE = _ClausePattern(
    _VOID_KEY, ("void", "overturned", "revoked", "withdrawn", "作废", "推翻", "撤销"), 80, rf"{_CLAUSE}{{0,60}}", re.I
)
_DECISION_RE = _ClausePattern(_DECISION_KEY, ("confidence",), 120)
_ID_RE = re.compile(r"(?<![A-Za-z0-9_])(?:WO|TK|RO|TICK|ORD|工单)[-#: ]?\d{3,}(?:-\d+)*(?![A-Za-z0-9_])")


def _num(value: Any) -> str:
    """A JSON number as written by people: 187, not 187.0."""
    return fmt_num(value) if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def extract_text_facts(text: str, when: str = "") -> list[KeyFact]:
    """Facts in free text (alert texts, notes, model prose), Chinese or English."""
    facts: list[KeyFact] = []
    for code in CODE_RE.findall(text):
        facts.append(KeyFact.code(code))
    for name, value in _SIGNAL_RE.findall(text):
        facts.append(KeyFact(FactKind.READING, f"{name}={value}", at=when))
    for value, unit in _READING_RE.findall(text):
        facts.append(KeyFact(FactKind.READING, f"{value}{unit}", at=when))
    for uri in URI_RE.findall(text):
        facts.append(KeyFact(FactKind.EVIDENCE, uri))
    folded = fold_case(text)  # for both case-blind patterns
    for match in _EXCLUDED_RE.findall(text, folded):
        facts.append(KeyFact(FactKind.EXCLUDED, match.strip(), at=when))
    for match in _VOID_RE.findall(text, folded):
        facts.append(KeyFact(FactKind.VOID, match.strip(), at=when))
    for match in _DECISION_RE.findall(text):
        facts.append(KeyFact(FactKind.DECISION, match.strip(), at=when))
    for ident in _ID_RE.findall(text):
        facts.append(KeyFact(FactKind.ID, ident))
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
            definition = item.get("definition_en") or item.get("definition") or ""
            facts.append(KeyFact.code(str(item["code"]), str(definition)))
    signal = data.get("signal")
    for reading in data.get("readings", []) if isinstance(data.get("readings"), list) else []:
        if isinstance(reading, dict) and "value" in reading:
            # The reading's URI is signal://<vin>/<signal>@<ts>: the fact names
            # both, so the URI itself becomes a key fact only when it is cited.
            at = str(reading.get("ts", ""))
            facts.append(KeyFact(FactKind.READING, f"{signal}={_num(reading['value'])}", at=at))
    # Whatever else the tool said in prose (notes, ticket ids) is read as text.
    rest = {k: v for k, v in data.items() if k not in ("codes", "readings", "signal", "unknown")}
    if rest:
        facts += extract_text_facts(json.dumps(rest, ensure_ascii=False), when)
    return facts


def extract_answer_facts(answer: dict[str, Any], when: str = "") -> list[KeyFact]:
    """Facts in a model's final answer (the JSON of ``react.FinalAnswer``)."""
    facts: list[KeyFact] = []
    codes = [str(c) for c in answer.get("codes", []) if isinstance(c, str)]
    facts += [KeyFact.code(c) for c in codes]
    conf = answer.get("confidence")
    phase = answer.get("phase")
    if answer.get("root_cause") and isinstance(conf, int | float):
        facts.append(KeyFact(FactKind.DECISION, f"{phase} {answer['root_cause']} (confidence {conf:.2f})", at=when))
    elif phase == "INVESTIGATING" and codes and isinstance(conf, int | float):
        facts.append(KeyFact(FactKind.DECISION, f"INVESTIGATING {' '.join(codes)} (confidence {conf:.2f})", at=when))
    for uri in answer.get("evidence", []) if isinstance(answer.get("evidence"), list) else []:
        facts.append(KeyFact(FactKind.EVIDENCE, str(uri)))
    for hypothesis in answer.get("excluded", []) if isinstance(answer.get("excluded"), list) else []:
        facts.append(KeyFact(FactKind.EXCLUDED, str(hypothesis), at=when))
    for voided in answer.get("voided", []) if isinstance(answer.get("voided"), list) else []:
        facts.append(KeyFact(FactKind.VOID, str(voided), at=when))
    return facts


def dedupe(facts: list[KeyFact]) -> list[KeyFact]:
    """Facts in first-seen order, each once; a bare ``code X`` gives way to ``code X: definition``."""
    defined = {f.text for f in facts if f.kind is FactKind.CODE and f.note}
    out: list[KeyFact] = []
    seen: set[KeyFact] = set()
    for fact in facts:
        if fact.kind is FactKind.CODE and not fact.note and fact.text in defined:
            continue
        if fact not in seen:
            seen.add(fact)
            out.append(fact)
    return out

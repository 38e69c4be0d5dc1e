"""Case-summary fidelity beyond verbatim facts: readings, times, and meaning.

``check_case`` compares a case summary with its request: the session's
reading spans and its ``CaseDecision`` (DESIGN.md §4: "root cause, fix and
conclusion state agree with the session's own decision records"). A summary
may be written by a model in its own words, so "agrees" is defined here, for
text, as follows:

- Readings: every required span (``name=first→latest↓lowest↑highest unit``)
  is stated exactly; any span the summary writes (arrows or a unit) equals
  the session's span of that signal, unit included; a bare ``name=value``
  names a reading the session had. A span that gave way (``omitted``) may be
  absent; a missing one that did not is missing.
- Times: every ``YYYY-MM-DD HH:MM`` (or ISO) time in the summary is a time of
  the source.
- Conclusion state: a line says ``concluded`` (or 结论/确诊) and names every
  concluded code; every priority (P1-P3) and confidence on such a line is the
  decision's; every ``confirmed ...`` phrase is the decision's confirmation.
- Voided conclusions: every line that carries a voided conclusion's text also
  marks it void (its event is ``void``, or the line says void / overturned /
  作废 / 推翻 / 撤销 ...). Presented without such a mark it is a finding.
- Excluded hypotheses: every line that carries one marks it excluded (event
  ``excluded``, or ruled out / excluded / 排除 ...).
- Cause and fix: a clause (a part of a line between ``|``, ``;`` or ``。``)
  that states a cause (cause / caused by / due to / because / 原因 / 根因 /
  导致 / 由于) or a fix (fix / repair / remedy / 修复 / 维修 / 处置) and is not
  marked void or excluded must use only words of the decision's root cause
  and fix (function and format words aside): it may shorten them, never
  replace them. An excluded hypothesis or a voided conclusion stated as the
  cause fails this; a summary need not state the cause at all (the record
  keeps root cause and fix in their own fields, shown beside the summary).
- Words: every word of the summary occurs in the source, or is a word of the
  summary format or an English function word; every run of Chinese
  characters is made of character pairs of the source. A summary is an
  extract of its session; an invented cause, part or event fails here even
  without a cue word. (A model that paraphrases freely gets its findings and
  one retry; see ``summarizer.summarize_checked``.)
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from vdoctor.lines import NUM, ReadingSpan, SummaryLine
from vdoctor.memory.dates import without_source_dates
from vdoctor.memory.facts import (
    _EXCLUDED_KEY,
    _VOID_KEY,
    CODE_RE,
    EXCLUDED_GATE,
    NEGATED_STATE,
    VOID_GATE,
    fold_case,
    split_uris,
)
from vdoctor.memory.request import CaseDecision, SummaryRequest
from vdoctor.retrieval.tokens import CJK_RUN_RE
from vdoctor.units import HAS_LETTER, SIGNAL_NAME, unit_symbols

# (?<!\d)(\d{4}-\d{2}-\d{2}) ..., written to start with its first digit (see facts.CODE_RE).
_TIME_RE = re.compile(r"(\d(?<!\d\d)\d{3}-\d{2}-\d{2})[ T](\d{2}:\d{2})(?::\d{2}Z?)?(?!\d)")
_CONFIRM_RE = re.compile(rf"confirmed (?:{SIGNAL_NAME}={NUM}(?:>=|<=){NUM}|repeat \d+)")
_ASSIGN_RE = re.compile(rf"(?<![A-Za-z0-9_])({SIGNAL_NAME})=({NUM})")
_SNAKE_RE = re.compile(rf"(?<![A-Za-z0-9_]){HAS_LETTER}[a-z0-9]+(?:_[a-z0-9]+)+(?![A-Za-z0-9_])")
# [A-Za-z]+, written as one character then the rest: the re compiler skips ahead to a
# pattern's first character only when the pattern starts with a class (not with a repeat);
# otherwise a match is tried at every place of the text. Chinese runs: ``CJK_RUN_RE``.
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z]*")
_VOID_MARK = re.compile(_VOID_KEY, re.I)
_EXCLUDED_MARK = re.compile(_EXCLUDED_KEY, re.I)
_CONCLUDED_MARK = re.compile(r"\bconcluded\b|结论|确诊", re.I)
# A conclusion said not to be one: "not concluded", "never concluded", "not yet concluded", 未确诊, 无结论.
_NEGATED_CONCLUSION = re.compile(
    r"\b(?:not|never|un)[\s-]*(?:yet\s+|been\s+)?concluded\b|n't\s+(?:yet\s+|been\s+)?concluded\b"
    r"|(?:未|没有?|无法|不能|尚未)(?:下)?(?:确诊|结论)|(?:无|尚无|没有)结论",
    re.I,
)
# A void or excluded state said not to hold (the key facts' own negations, ``facts.NEGATED_STATE``).
_NEGATED_STATE = re.compile(NEGATED_STATE, re.I)
# \bP[123]\b, written to start with its first character (see facts.CODE_RE).
_PRIORITY_RE = re.compile(r"P(?<!\wP)[123]\b")
_CONF_RE = re.compile(r"\bconf(?:idence)?\s*[=:]?\s*(\d(?:\.\d+)?)\b", re.I)
_CAUSE_MARK = re.compile(r"\b(?:root cause|causes?|caused by|due to|because)\b|原因|根因|导致|由于", re.I)
_FIX_MARK = re.compile(r"\b(?:fix(?:ed)?|repair(?:ed)?|remedy)\b|修复|维修|处置", re.I)
# A word of every cause or fix mark, in fold_case form: a text without one has no mark.
_CLAIM_WORDS = ("cause", "due to", "原因", "根因", "导致", "由于", "fix", "repair", "remedy", "修复", "维修", "处置")
_CLAUSE_SPLIT = re.compile(r" \| |[;；。]\s*")

# Words the summary format itself uses (typed lines, the prompt's vocabulary).
FORMAT_WORDS = frozenset(
    "alert alerts investigating concluded conclusion conf confidence confirmed repeat readings reading void voided "
    "overturned revoked withdrawn excluded ruled out not the cause root caused due because fix fixed repair "
    "repaired remedy fact also seen hypothesis leading milestone priority none yet evidence signal dtc case "
    "omitted code codes rule first latest lowest highest".split()
)
# English function words: carry no claim of their own.
FUNCTION_WORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being am do does did "
    "have has had it its this that these those which who when where while so no nor than then there here into "
    "over after before up down out off again once all any both each few more most other some such only same "
    "very can will just about".split()
)
_UNIT_WORDS = frozenset(w.lower() for u in unit_symbols() for w in _WORD_RE.findall(u))
FORMAT_CJK = "原因根因导致由于修复维修处置结论确诊作废推翻撤销排除已排除不是原因"


@dataclass
class CaseFindings:
    missing: list[str] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    contradicted: list[str] = field(default_factory=list)
    readings_checked: int = 0
    readings_stated: int = 0
    readings_omitted: int = 0


def _words(text: str) -> set[str]:
    """Words of two letters or more, lower-cased (a lone letter is a unit or part of a code)."""
    return {w.lower() for w in _WORD_RE.findall(text) if len(w) > 1}


def _cjk_pairs(text: str) -> set[str]:
    pairs: set[str] = set()
    for run in CJK_RUN_RE.findall(text):
        pairs.update(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return pairs


def _times_not_in(text: str, source: str) -> set[str]:
    """The times of ``text`` (``YYYY-MM-DD HH:MM``, as ``_TIME_RE`` finds them) that are no time of ``source``.

    A match of ``_TIME_RE`` starts at none of the characters of another
    (after its first digit, no run of four digits), so the source's times are
    exactly the places where the pattern matches: found here from each place
    that holds a time's text, not by scanning the whole source.
    """
    out: set[str] = set()
    for d, hm in set(_TIME_RE.findall(text)):
        if not any(_time_at(source, f"{d}{sep}{hm}", d, hm) for sep in " T"):
            out.add(f"{d} {hm}")
    return out


def _time_at(source: str, needle: str, d: str, hm: str) -> bool:
    """Whether ``_TIME_RE`` matches ``d`` and ``hm`` at some place of ``source`` that holds ``needle``."""
    at = source.find(needle)
    while at >= 0:
        m = _TIME_RE.match(source, at)
        if m is not None and m.group(1) == d and m.group(2) == hm:
            return True
        at = source.find(needle, at + 1)
    return False


def _check_readings(stripped: str, request: SummaryRequest, decision: CaseDecision, out: CaseFindings) -> None:
    """``stripped``: the summary without URIs and confirmation phrases, which are checked whole."""
    expected = {s.name: s for span in decision.spans for s in ReadingSpan.find_all(span)}
    required = {s.name for span in request.readings for s in ReadingSpan.find_all(span)}
    omitted = {s.name for fact in request.omitted for s in ReadingSpan.find_all(fact)}
    written = ReadingSpan.find_all(stripped)
    stated = set(written)
    for name, span in expected.items():
        n = len(span.values())
        out.readings_checked += n
        if span in stated:
            out.readings_stated += n
        elif name in omitted and name not in required:
            out.readings_omitted += n
        else:
            out.missing.append(span.render())
    source_values: dict[str, set[str]] | None = None  # read from the source when first needed

    def in_source() -> dict[str, set[str]]:
        nonlocal source_values
        if source_values is None:
            source_values = {}
            for name, value in _ASSIGN_RE.findall(request.source):
                source_values.setdefault(name, set()).add(value)
        return source_values

    for span in written:
        known = expected.get(span.name)
        if known is None and span.name not in in_source():
            out.invented.append(f"reading of {span.name}, a signal the session never had")
        elif not span.bare and known is not None:
            # Arrows or a unit: a claim about the signal's key readings and unit.
            if span != known:
                out.contradicted.append(f"{span.render()} is not the session's {known.render()}")
        elif not (known and span.first in known.values()) and span.first not in in_source().get(span.name, ()):
            out.invented.append(f"{span.name}={span.first}")


def _concluding_lines(summary: str) -> list[str]:
    """The lines of ``summary`` that ``_CONCLUDED_MARK`` finds a mark in.

    No character but the ASCII letters matches a letter of "concluded" case-blind, so a
    line with the English mark holds "concluded" once lower-cased: the pattern is run
    only on those and on lines with a Chinese mark (most lines of a case have none).
    """
    return [
        line
        for line in summary.splitlines()
        if ("concluded" in line.lower() or "结论" in line or "确诊" in line) and _CONCLUDED_MARK.search(line)
    ]


@functools.lru_cache(maxsize=1024)
def _code_word(code: str) -> re.Pattern[str]:
    """``code`` as a whole word (a session concludes on one of a fleet's few hundred codes)."""
    return re.compile(rf"\b{re.escape(code)}\b")


def _confidences(text: str) -> list[str]:
    """``_CONF_RE.findall(text)``: for ASCII text, tried only where it holds "conf" (in any case).

    The pattern is case-blind, which rules out a quick scan to its first letter. No
    character but the ASCII letters matches a letter of "conf" case-blind, and an ASCII
    text lower-cases letter for letter, so the places a match can start are those of
    "conf" in the lower-cased text; each match ends before the next one can start.
    """
    if not text.isascii():
        return _CONF_RE.findall(text)
    lower = text.lower()
    found = []
    at = lower.find("conf")
    while at >= 0:
        m = _CONF_RE.match(text, at)
        if m is not None:
            found.append(m.group(1))
            at = lower.find("conf", m.end())
        else:
            at = lower.find("conf", at + 1)
    return found


def _check_conclusion(summary: str, decision: CaseDecision, out: CaseFindings) -> None:
    lines = _concluding_lines(summary)
    if not lines:
        out.missing.append(f"concluded {' '.join(decision.codes)} {decision.priority} conf {decision.confidence}")
        return
    joined = "\n".join(lines)
    for line in lines:
        # Taken back, unless the line also concludes ("初诊无结论，复检确诊": a first look did not conclude).
        if _NEGATED_CONCLUSION.search(line) and not _CONCLUDED_MARK.search(_NEGATED_CONCLUSION.sub(" ", line)):
            out.contradicted.append(f"the conclusion stated as not reached: '{line.strip()[:80]}'")
    for code in decision.codes:
        if not _code_word(code).search(joined):
            out.missing.append(f"concluded {code}")
    for prio in _PRIORITY_RE.findall(joined):
        if prio != decision.priority:
            out.contradicted.append(f"priority {prio} on the conclusion; the session's is {decision.priority}")
    for conf in _confidences(joined):
        if float(conf) != float(decision.confidence):
            out.contradicted.append(f"confidence {conf}; the session's is {decision.confidence}")
    for phrase in _CONFIRM_RE.findall(summary):
        if phrase != decision.confirmation:
            out.contradicted.append(f"'{phrase}' is not the session's confirmation '{decision.confirmation}'")


def _marked(line: str, event: str, mark: re.Pattern[str], text: str) -> bool:
    """Whether ``line`` states ``text`` in the state ``event``: a line of that type, or the state's word,
    and no negation of a state outside ``text`` itself ("void | X not void" takes it back; the fact
    "harness ruled out, pump not ruled out yet" holds its own)."""
    if _NEGATED_STATE.search(line.replace(text, " ")):
        return False
    parsed = SummaryLine.parse(line)
    return (parsed is not None and parsed.event.strip().lower() == event) or bool(mark.search(line))


# A word of every void or excluded mark, in ``fold_case`` form: a summary without one states no cause as
# excluded or void.
_STATE_WORDS = EXCLUDED_GATE + VOID_GATE


# Where a clause about a cause ends: a sentence mark, a comma, or a summary line's field separator.
_STATE_CLAUSE_SPLIT = re.compile(r"[,;，；。|]")


def _check_states(summary: str, folded: str, decision: CaseDecision, out: CaseFindings) -> None:
    """``folded``: ``fold_case(summary)``."""
    cause = decision.root_cause.strip()
    if cause and any(word in folded for word in _STATE_WORDS):
        # The session's own cause in a clause marked excluded or void (outside the cause's own words, which may
        # hold commas), on a line where no hypothesis the session excluded or voided stands for the mark:
        # "<cause> not the cause", "excluded: <cause>", "void | <cause>"; not "<cause> confirmed, others ruled out".
        others = [o for o in (*decision.void, *decision.excluded) if o]
        for line in summary.splitlines():
            if cause not in line or any(o in line for o in others):
                continue
            parsed = SummaryLine.parse(line)
            typed = parsed is not None and parsed.event.strip().lower() in ("void", "excluded")
            clauses = [c for c in _STATE_CLAUSE_SPLIT.split(line.replace(cause, "\x00")) if "\x00" in c]
            if typed or any(_VOID_MARK.search(c) or _EXCLUDED_MARK.search(c) for c in clauses):
                out.contradicted.append(f"the session's root cause stated as excluded or void: {cause[:60]}")
    if not (decision.void or decision.excluded):
        return  # most sessions void no conclusion and exclude no hypothesis: no line to read
    for line in summary.splitlines():
        for text in decision.void:
            if text in line and not _marked(line, "void", _VOID_MARK, text):
                out.contradicted.append(f"voided conclusion stated as valid: {text}")
        for text in decision.excluded:
            if text in line and not _marked(line, "excluded", _EXCLUDED_MARK, text):
                out.contradicted.append(f"excluded hypothesis stated without its exclusion: {text}")


def _content(text: str) -> set[str]:
    words = _words(CODE_RE.sub(" ", text)) - FUNCTION_WORDS - FORMAT_WORDS
    return words | set("".join(CJK_RUN_RE.findall(text))) - set(FORMAT_CJK)


def _check_claims(summary: str, folded: str, decision: CaseDecision, out: CaseFindings) -> None:
    # A clause is part of a line cut at non-word characters, so a mark found in
    # a clause is found in the whole summary too: without one, no clause states
    # a cause or fix (most summaries; their clauses need not be read). The
    # substring test (on ``folded``, ``fold_case(summary)``) is a tenth of the
    # time of the case-blind marks' scan.
    if not any(word in folded for word in _CLAIM_WORDS):
        return
    cause, fix = _content(decision.root_cause), _content(decision.fix_action)
    for line in summary.splitlines():
        for clause in _CLAUSE_SPLIT.split(line):
            if _VOID_MARK.search(clause) or _EXCLUDED_MARK.search(clause):
                continue
            states_cause, states_fix = bool(_CAUSE_MARK.search(clause)), bool(_FIX_MARK.search(clause))
            if not (states_cause or states_fix):
                continue
            # Cause and fix words both: a clause of a long cause may read like a fix, and
            # the other way round; a cause or fix from elsewhere has words of its own.
            allowed = cause | fix
            stray = _content(_CAUSE_MARK.sub(" ", _FIX_MARK.sub(" ", clause))) - allowed
            if stray:
                out.contradicted.append(f"cause or fix that is not the session's: '{clause.strip()[:80]}'")


def _check_words(summary: str, stripped: str, source: str, out: CaseFindings) -> None:
    """``stripped``: ``summary`` without URIs and confirmation phrases, which are checked whole.

    A date of the source written short or in words (11月1日, Nov 1) is neither words nor Chinese of its
    own: looked for only when some word would otherwise not be the source's (most summaries have none).
    """
    found = _word_findings(summary, stripped, source)
    if found and (dated := without_source_dates(summary, source)) != summary:
        found = _word_findings(dated, without_source_dates(stripped, source), source)
    out.invented += found


def _word_findings(summary: str, stripped: str, source: str) -> list[str]:
    """What ``_check_words`` finds. The source is read only for what the summary leaves to check: most
    summary words are format or function words, and most summaries have no snake_case name outside a
    reading and no Chinese."""
    found = []
    plain = _TIME_RE.sub(" ", stripped)
    plain = _SPAN_OR_ASSIGN.sub(" ", plain)
    # The names are found once: a summary without one has none to take out before its words are read.
    # Every name holds a "_", and most summaries have none left once their readings are out.
    names = set(_SNAKE_RE.findall(plain)) if "_" in plain else set()
    stray = _words(CODE_RE.sub(" ", _SNAKE_RE.sub(" ", plain) if names else plain)) - _FORMAT_UNIT_FUNCTION_WORDS
    if stray:
        stray -= _words(source)
    if stray:
        found.append("words not in the source: " + ", ".join(sorted(stray)[:8]))
    if names:
        names -= set(_SNAKE_RE.findall(source))
    found += [f"name {s}" for s in sorted(names)]
    pairs = _cjk_pairs(summary) - _FORMAT_CJK_PAIRS
    if pairs:
        pairs -= _cjk_pairs(source)
    if pairs:
        found.append("Chinese not in the source: " + ", ".join(sorted(pairs)[:8]))
    return found


_SPAN_OR_ASSIGN = re.compile(rf"(?<![A-Za-z0-9_]){SIGNAL_NAME}={NUM}\S*")
_FORMAT_UNIT_FUNCTION_WORDS = FORMAT_WORDS | FUNCTION_WORDS | _UNIT_WORDS
_FORMAT_CJK_PAIRS = frozenset(_cjk_pairs(FORMAT_CJK))


def check_case(summary: str, request: SummaryRequest, plain: str | None = None) -> CaseFindings:
    """Readings, times and meaning of a case summary against its request (see the module docstring).

    ``plain``: ``split_uris(summary)[0]`` when the caller has it already.
    """
    out = CaseFindings()
    plain = split_uris(summary)[0] if plain is None else plain
    out.invented += [f"time {t}" for t in sorted(_times_not_in(plain, request.source))]
    decision = request.decision
    if decision is None:
        return out
    stripped = _CONFIRM_RE.sub(" ", plain)  # confirmation phrases are checked whole
    _check_readings(stripped, request, decision, out)
    _check_conclusion(summary, decision, out)
    folded = fold_case(summary)  # for both substring gates
    _check_states(summary, folded, decision, out)
    _check_claims(summary, folded, decision, out)
    _check_words(summary, stripped, request.source, out)
    return out

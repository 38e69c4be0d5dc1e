"""L1 working memory: the model's context for one vehicle, held to a token budget.

Layout of the context (seed 000 §8.2, seed 003):

    [rolling summary of older rounds]   compressed, lossy except for key facts
    [newest rounds, verbatim]           at most ``KEEP_ROUNDS``
    [key facts]                         never compressed, always last

When the context passes ``COMPRESS_AT`` of the window, the oldest half of the
verbatim rounds is folded into the rolling summary. A stage end (the ReAct
run moves from investigation to a conclusion) also folds the rounds, and the
whole session is summarised when it concludes (see ``summary.py``). Every
fold is written by the summarizer and checked for fidelity (``summarizer.py``);
while a summary model is down, by the offline summarizer (``_summarize``).
Key facts come from ``facts.py``; they stay bounded by keeping, per signal,
the first, lowest, highest and latest reading as facts with their times, and
every reading's value in time order as the signal's trend (``trend
cell_voltage_diff_mv: 62 88 121 150 187``, at most ``MAX_TREND_POINTS``).
"""

from __future__ import annotations

import bisect
import functools
import logging
import re

from pydantic import BaseModel, Field

from vdoctor.errors import ModelError
from vdoctor.limits import WORKING_BUDGET_TOKENS
from vdoctor.lines import CLAUSE_KINDS, READING_FACT, FactKind, KeyFact, KeyFactField, SummaryLine
from vdoctor.memory.facts import URI_RE, dedupe, extract_text_facts
from vdoctor.memory.summarizer import (
    CheckedSummary,
    FidelityMetrics,
    OfflineSummarizer,
    Summarizer,
    SummaryRequest,
    summarize_checked,
)
from vdoctor.records import MAX_SUMMARY_CHARS
from vdoctor.tokens import DEFAULT_COUNTER, TokenCounter

log = logging.getLogger(__name__)

# What writes a fold when the configured summarizer failed (it holds no state).
_OFFLINE = OfflineSummarizer()

# The newest rounds stay verbatim: the model reasons best over exact recent text.
KEEP_ROUNDS = 6
# Compress before the window is full, so the next round still fits.
COMPRESS_AT = 0.70
# Key facts are never dropped, but a pathological session must not own the
# state: beyond this many the oldest readings give way (codes, decisions,
# exclusions and ids are kept first).
MAX_KEY_FACTS = 200
# The rolling summary is itself bounded; its oldest lines give way first.
MAX_SUMMARY_LINES = 40
# A trend keeps every reading of a signal (or unit) in time order, up to this
# many: then its first one and the newest ones. A long task needs a reading's
# course later (seed 003); the first/lowest/highest/latest facts keep its times.
MAX_TREND_POINTS = 64
# Signals (or units) with a trend; beyond this many the oldest trend gives way.
MAX_TRENDS = 32
# A trend is shown once it holds more than the first and latest reading.
MIN_TREND_POINTS = 3
# One fold of rounds into the rolling summary follows the summary rules of
# the case record: at most 300 characters (seed 000 §8.2.2).
FOLD_MAX_CHARS = MAX_SUMMARY_CHARS
# How much of a round's free text a summary line quotes when the round has no
# structured event/conclusion (text from tools or scripted tests).
EVENT_CHARS = 60
CONCLUSION_CHARS = 80
# A clipped line must not end inside a number, code or URI: a cut 46.5 would
# read as an invented 46.
_TAIL_TOKEN_RE = re.compile(r"[A-Za-z0-9_.:/@%\-]+$")
# What separates the parts of the rendered context.
_BLANK_LINE = "\n\n"


class Round(BaseModel):
    """One alert's exchange: what arrived, and what the agent did and decided.

    ``event``, ``conclusion`` and ``evidence`` are the round's summary line in
    structured form (the engine fills them); without them a summary line
    quotes the start of ``user`` and ``assistant``.
    """

    ts: str
    user: str
    assistant: str
    event: str = ""
    conclusion: str = ""
    evidence: str = ""


class WorkingState(BaseModel):
    """The JSON-able snapshot of working memory kept in the L2 session state."""

    # Mutable defaults by factory: a literal [] or {} is deep-copied on every validation.
    summary_lines: list[str] = Field(default_factory=list)
    rounds: list[Round] = Field(default_factory=list)
    key_facts: list[KeyFactField] = Field(default_factory=list)
    # Every reading's (time, value as written), per signal or unit, in time order.
    trends: dict[str, list[tuple[str, str]]] = Field(default_factory=dict)
    compressions: int = 0
    # Trigger counts, for metrics and tests: threshold folds, stage ends, session ends.
    threshold_folds: int = 0
    stage_folds: int = 0
    session_folds: int = 0
    # Summaries that failed the fidelity check even after repair and retry;
    # the engine turns a change of this count into an output flag.
    fidelity_failures: int = 0


def extract_key_facts(text: str, when: str = "") -> list[KeyFact]:
    """Pull the never-compressed facts out of free text (see ``facts.py`` for JSON)."""
    return list(_text_facts(text, when))


# A round's texts are read when it is added and again when it is folded into
# the summary a few rounds later; the second reading comes from here.
@functools.lru_cache(maxsize=2048)
def _text_facts(text: str, when: str) -> tuple[KeyFact, ...]:
    # The facts of a text depend on ``when`` only by the time they carry: a text
    # seen before at another time (a model's usual answer, an empty tool result)
    # is read once, its facts given this time.
    return tuple(KeyFact(f.kind, f.text, f.note, when) if f.at == _WHEN else f for f in _facts_by_text(text))


# Stands for the time while a text is read: no real time is written so.
_WHEN = "\0when"


@functools.lru_cache(maxsize=2048)
def _facts_by_text(text: str) -> tuple[KeyFact, ...]:
    return tuple(extract_text_facts(text, _WHEN))


def _clip(text: str, limit: int) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    if len(first) <= limit:
        return first
    return _TAIL_TOKEN_RE.sub("", first[:limit]).rstrip(" ,，;；|") + "…"


def _condense(facts: list[KeyFact]) -> list[KeyFact]:
    """Keep the key facts bounded without losing a key number or a changed decision.

    - Readings: per signal (or per unit for readings from free text) the first,
      the lowest, the highest and the latest (by their time) are key facts with
      their times; every value stays in the signal's trend, and every reading in
      the session's readings (the ``signal_history`` tool returns them).
    - A decision, exclusion or void repeated at a later time is a repeated
      confirmation: only its first occurrence is kept.
    """
    groups: dict[str, list[tuple[int, float]]] = {}
    drop: set[int] = set()
    first_clause: set[tuple[FactKind, str]] = set()
    # Each fact's reading parsed once. First and latest by the reading's time (a
    # tool may return an old reading late), then by arrival.
    parsed = [(i, found) for i, fact in enumerate(facts) if (found := fact.reading()) is not None]
    parsed.sort(key=lambda r: (facts[r[0]].at, r[0]))
    for i, (group, value) in parsed:
        groups.setdefault(group, []).append((i, value))
    is_reading = {i for i, _ in parsed}
    for i, fact in enumerate(facts):
        if i in is_reading:
            continue
        if fact.kind in CLAUSE_KINDS:
            identity = (fact.kind, fact.text)
            if identity in first_clause:
                drop.add(i)
            first_clause.add(identity)
    for readings in groups.values():
        keep = {
            readings[0][0],
            readings[-1][0],
            min(readings, key=lambda r: r[1])[0],
            max(readings, key=lambda r: r[1])[0],
        }
        drop.update(i for i, _ in readings if i not in keep)
    return [f for i, f in enumerate(facts) if i not in drop]


def _fact_rank(fact: KeyFact) -> int:
    # Readings are the most numerous and the first to give way at the cap.
    return 1 if fact.kind is READING_FACT else 0


class WorkingMemory:
    """Token-budgeted working context over a ``WorkingState`` snapshot.

    Triggers (seed 000 §8.2.1): past ``COMPRESS_AT`` of the budget (or past
    ``keep_rounds`` rounds) the oldest half of the verbatim rounds is folded
    into the rolling summary; ``end_stage`` folds every round when the
    investigation is over; ``close_session`` replaces everything with the
    case summary when the session concludes (its rounds are not folded
    first: the case summary would replace that fold at once). Every fold
    goes through the summarizer and the fidelity check.
    """

    def __init__(
        self,
        state: WorkingState,
        budget_tokens: int = WORKING_BUDGET_TOKENS,
        counter: TokenCounter = DEFAULT_COUNTER,
        summarizer: Summarizer | None = None,
        metrics: FidelityMetrics | None = None,
        keep_rounds: int = KEEP_ROUNDS,
    ) -> None:
        if budget_tokens <= 0 or keep_rounds <= 0:
            raise ValueError(f"budget_tokens and keep_rounds must be positive, got {budget_tokens}, {keep_rounds}")
        self.state = state
        self.budget_tokens = budget_tokens
        self.counter = counter
        self.summarizer: Summarizer = summarizer or OfflineSummarizer()
        self.metrics = metrics if metrics is not None else FidelityMetrics()
        self.keep_rounds = keep_rounds
        # Folds of this run whose summarizer failed (a model outage): the engine flags the diagnosis.
        self.summary_model_failures = 0

    def add_facts(self, facts: list[KeyFact]) -> None:
        self._add_trends(facts)
        merged = _condense(dedupe([*self.state.key_facts, *facts]))
        if len(merged) > MAX_KEY_FACTS:
            # Stable: keep every non-reading fact, then the newest readings.
            ranked = sorted(enumerate(merged), key=lambda p: (_fact_rank(p[1]), -p[0]))
            keep = {i for i, _ in ranked[:MAX_KEY_FACTS]}
            merged = [f for i, f in enumerate(merged) if i in keep]
        self.state.key_facts = merged

    def _add_trends(self, facts: list[KeyFact]) -> None:
        trends = self.state.trends
        for fact in facts:
            found = fact.reading_text()
            if found is None:
                continue
            points = trends.setdefault(found[0], [])
            point = (fact.at, found[1])
            if point in points:
                continue  # the same reading again (a tool returns the whole history each time)
            at = bisect.bisect_right([p[0] for p in points], fact.at)
            points.insert(at, point)
            if len(points) > MAX_TREND_POINTS:
                del points[1 : len(points) - MAX_TREND_POINTS + 1]
        for group in list(trends)[: max(0, len(trends) - MAX_TRENDS)]:
            del trends[group]

    def trend_facts(self) -> list[KeyFact]:
        """Each signal's (or unit's) readings in time order, where there are more than two."""
        return [
            KeyFact.trend(group, [value for _, value in points])
            for group, points in self.state.trends.items()
            if len(points) >= MIN_TREND_POINTS
        ]

    def add_round(self, round_: Round, facts: list[KeyFact] | None = None) -> None:
        """Add a round and its key facts (``facts``: extracted structurally by the caller).

        The round's free text is always read for facts too.
        """
        self.state.rounds.append(round_)
        self.add_facts(
            [
                *(facts or []),
                *extract_key_facts(round_.user, round_.ts),
                *extract_key_facts(round_.assistant, round_.ts),
            ]
        )
        while len(self.state.rounds) > self.keep_rounds or self._past_trigger():
            if not self.compress_oldest_half():
                break

    def _past_trigger(self) -> bool:
        """True when the context passes ``COMPRESS_AT`` of the budget.

        With a counter that never gives more tokens than characters
        (``EstimatingCounter``), a context with fewer characters than the
        trigger is under it without being counted: most sessions, most rounds.
        """
        limit = COMPRESS_AT * self.budget_tokens
        parts = self._parts()
        if getattr(self.counter, "at_most_one_per_char", False):
            # The length of ``render()``: the parts and the blank lines between them.
            chars = sum(map(len, parts)) + len(_BLANK_LINE) * max(len(parts) - 1, 0)
            if chars <= limit:
                return False
        return self._count(parts) > limit

    def compress_oldest_half(self) -> bool:
        """Fold the oldest half of the verbatim rounds into the rolling summary.

        With no verbatim round left, the oldest half of the rolling summary's
        own lines gives way instead (their key facts stay in the key facts).
        """
        n = len(self.state.rounds)
        if n == 0:
            lines = len(self.state.summary_lines)
            if lines <= 1:
                return False
            del self.state.summary_lines[: lines // 2]
            self.state.compressions += 1
            self.state.threshold_folds += 1
            return True
        half = max(1, n // 2)
        self._fold(self.state.rounds[:half])
        self.state.rounds = self.state.rounds[half:]
        self.state.threshold_folds += 1
        return True

    def end_stage(self) -> None:
        """A ReAct stage ended (investigation done, conclusion starts): fold every verbatim round."""
        if self.state.rounds:
            self._fold(self.state.rounds)
            self.state.rounds = []
            self.state.stage_folds += 1

    def close_session(self, case_summary: str) -> None:
        """The session concluded: the whole session is compressed into its case summary.

        The verbatim rounds go with the rest, unfolded: a summary of them would be replaced at once by the
        case summary, which is made from the whole session. (Their key facts were taken when they were
        added, and stay.)
        """
        self.state.rounds = []
        self.state.summary_lines = case_summary.splitlines()
        self.state.session_folds += 1
        self.state.compressions += 1

    def _fold(self, rounds: list[Round]) -> None:
        events = [
            SummaryLine(
                ts=r.ts,
                event=r.event or _clip(r.user, EVENT_CHARS),
                conclusion=r.conclusion or _clip(r.assistant, CONCLUSION_CHARS),
                evidence=r.evidence or next(iter(URI_RE.findall(f"{r.assistant}\n{r.user}")), "-"),
            )
            for r in rounds
        ]
        source = "\n\n".join(f"{r.ts}\n{r.user}\n{r.assistant}\n{r.event} {r.conclusion} {r.evidence}" for r in rounds)
        # Every key fact of the folded rounds must survive, in the summary or in
        # the key facts; readings that the key facts let go (neither first,
        # lowest, highest nor latest of their signal) are not key numbers.
        # (Facts read from text carry no code definition, so no dedupe is needed:
        # it would drop only equal facts, whose payloads dict.fromkeys drops below.)
        kept = set(self.state.key_facts)
        required = [
            fact.payload
            for r in rounds
            for text in (r.user, r.assistant)
            for fact in _text_facts(text, r.ts)
            if fact.kind is not READING_FACT or fact in kept
        ]
        request = SummaryRequest(
            kind="rolling",
            source=source,
            required=list(dict.fromkeys(required)),
            events=events,
            max_chars=FOLD_MAX_CHARS,
            keep_first=(0,),
            carried="\n".join(f.render() for f in [*self.state.key_facts, *self.trend_facts()]),
        )
        checked = self._summarize(request)
        if not checked.ok:
            self.state.fidelity_failures += 1
        self.state.summary_lines += checked.text.splitlines()
        del self.state.summary_lines[:-MAX_SUMMARY_LINES]
        self.state.compressions += 1

    def _summarize(self, request: SummaryRequest) -> CheckedSummary:
        """``summarize_checked`` by the summarizer; by the offline one once the summarizer failed in this run.

        A summary model that is down (``ModelError``, after its own retries) must not fail the vehicle's
        run, nor leave its context unfolded and growing: the fold is written by ``OfflineSummarizer`` and
        checked as any other, and the engine flags the diagnosis (``summary_model_failed``). Later folds of
        the same run go to the offline summarizer at once rather than wait through the model's retries again.
        """
        if not self.summary_model_failures:
            try:
                return summarize_checked(self.summarizer, request, self.metrics)
            except ModelError as e:
                self.summary_model_failures += 1
                log.warning("summary model failed; %s summary written by the offline summarizer: %s", request.kind, e)
        return summarize_checked(_OFFLINE, request, self.metrics)

    def render(self, current: str = "") -> str:
        """The working context as text: summary, recent rounds, ``current``, key facts last."""
        return _BLANK_LINE.join(self._parts(current))

    def _parts(self, current: str = "") -> list[str]:
        parts = []
        if self.state.summary_lines:
            parts.append("## Earlier in this session (summary)\n" + "\n".join(self.state.summary_lines))
        for r in self.state.rounds:
            parts.append(f"## Alert at {r.ts}\n{r.user}\n## Agent\n{r.assistant}")
        if current:
            parts.append(current)
        facts = [*self.state.key_facts, *self.trend_facts()]
        if facts:
            parts.append("## Key facts (never compressed)\n" + "\n".join(f.render() for f in facts))
        return parts

    def tokens(self) -> int:
        """Tokens of ``render()``. With an additive counter (``EstimatingCounter``: parts joined by blank
        lines count as the sum of their counts) each part is counted on its own, so the parts that did not
        change since the last count (earlier rounds, the summary) come from the counter's cache."""
        return self._count(self._parts())

    def _count(self, parts: list[str]) -> int:
        """Tokens of ``parts`` joined as ``render()`` joins them."""
        if getattr(self.counter, "additive", False):
            return sum(self.counter.count(part) for part in parts)
        return self.counter.count(_BLANK_LINE.join(parts))

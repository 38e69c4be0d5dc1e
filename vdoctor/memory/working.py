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
``fit`` holds what a model call gets (the current alert included) to the
token budget; only key facts other than readings never give way there.
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
from collections.abc import Callable

from pydantic import BaseModel, Field

from vdoctor.errors import ModelError
from vdoctor.limits import WORKING_BUDGET_TOKENS
from vdoctor.lines import (
    CLAUSE_KINDS,
    COUNT_FACT,
    EVIDENCE_FACT,
    ID_FACT,
    READING_FACT,
    FactKind,
    KeyFact,
    KeyFactField,
    SummaryLine,
)
from vdoctor.memory.facts import URI_RE, answer_prose, dedupe, extract_text_facts
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
# Readings are the numerous key facts (every signal's first, lowest, highest
# and latest): beyond this many the oldest give way, each recorded in
# ``WorkingState.dropped_facts`` (an alert's readings also stay in the
# session's readings, which the ``signal_history`` tool returns).
MAX_KEY_FACTS = 200
# Codes, decisions, exclusions, void conclusions and ids are few per session
# and never give way to readings. This bound only keeps a pathological session
# from owning the state: far above any real session, and what gives way beyond
# it (evidence URIs and counts first, then ids, the oldest first) is recorded.
MAX_PINNED_FACTS = 2000
# Facts that gave way are recorded verbatim, the newest this many, and counted in full.
MAX_DROPPED_RECORDED = 200
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
# A folded event's line keeps at least this much of its event part (``alert`` and a code or two).
MIN_EVENT_CHARS = 24
# What ends a clipped text.
CLIP_MARK = "…"
# What ends a text clipped to fit the working budget (the current alert's text).
CLIPPED_TEXT = "…[{} more characters clipped to fit the working context]"
# What stands in the rendered context for lines left out to fit the budget.
_TRENDS_NOT_SHOWN = "({} trend lines not shown to fit the working context; the readings stay key facts)"
_SUMMARY_NOT_SHOWN = "({} earlier summary lines not shown to fit the working context)"
_READINGS_NOT_SHOWN = (
    "({} older readings not shown to fit the working context; "
    "the signal_history tool returns a signal's newest readings)"
)
_SUMMARY_HEAD = "## Earlier in this session (summary)\n"
_FACTS_HEAD = "## Key facts (never compressed)\n"
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
    # How many characters at the head of ``assistant`` are the model's reply; the rest, its tool calls and their
    # results, the engine reads for key facts by key (``extract_tool_facts``). None: all of it (a round given
    # without, or stored by a release before).
    reply_chars: int | None = None

    @property
    def reply(self) -> str:
        """The part of ``assistant`` read for key facts as free text (``reply_chars``)."""
        return self.assistant if self.reply_chars is None else self.assistant[: self.reply_chars]


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
    # Key facts that gave way to the bounds above (``MAX_KEY_FACTS`` readings,
    # ``MAX_PINNED_FACTS`` others): the newest ``MAX_DROPPED_RECORDED`` as
    # rendered lines, and how many in all. A case summary lists them as omitted.
    dropped_facts: list[str] = Field(default_factory=list)
    dropped_fact_count: int = 0


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


def clip_line(text: str, limit: int) -> str:
    """The first line of ``text``: itself within ``limit`` characters, else its first ``limit`` and ``CLIP_MARK``
    (the callers leave room for the mark), never ending inside a number, code or URI (``_TAIL_TOKEN_RE``)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else _cut(first, limit)


def clip_text(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, ``CLIP_MARK`` included when it is cut (``clip_line``'s cut)."""
    return text if len(text) <= limit else _cut(text, max(limit - len(CLIP_MARK), 0))


def _cut(text: str, keep: int) -> str:
    return _TAIL_TOKEN_RE.sub("", text[:keep]).rstrip(" ,，;；|") + CLIP_MARK


def _readings_to_give_way(facts: list[KeyFact], readings: list[int]) -> list[int]:
    """The readings (indices into ``facts``) in the order they give way: the oldest first, each signal's
    latest reading last (a signal seen once stays until the readings of signals seen again have gone)."""
    latest = {found[0]: i for i in readings if (found := facts[i].reading()) is not None}
    last = set(latest.values())
    return [i for i in readings if i not in last] + [i for i in readings if i in last]


def clip_to_tokens(text: str, tokens: int, counter: TokenCounter) -> str:
    """``text`` within ``tokens`` by ``counter``: itself when it fits, else its start and a marker saying
    how many characters were clipped (``""`` when not even the marker fits)."""
    if counter.count(text) <= tokens:
        return text

    def clipped(keep: int) -> str:
        return text[:keep].rstrip() + CLIPPED_TEXT.format(len(text) - keep)

    if counter.count(clipped(0)) > tokens:
        return ""
    low, high = 0, len(text)  # clipped(low) fits, clipped(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        if counter.count(clipped(mid)) <= tokens:
            low = mid
        else:
            high = mid
    return clipped(low)


def _fit_events(events: list[SummaryLine]) -> list[list[SummaryLine]]:
    """``events`` in folds of at most ``FOLD_MAX_CHARS``, every event kept as a line, its event part clipped.

    A summary line is at most ``FOLD_MAX_CHARS`` (an alert's event names every
    signal): a line too long would be left out of the fold whole. So the
    event parts of the longer lines are clipped to a fair share of the fold
    (``clip_line``: never inside a number, code or URI; shorter lines stay whole);
    time, conclusion and URI stay whole.
    Events that do not fit one fold with at least ``MIN_EVENT_CHARS`` each go
    to the next fold.
    """
    lengths = [len(e.render()) for e in events]
    if sum(lengths) + len(events) - 1 <= FOLD_MAX_CHARS:
        return [events]
    fixed = [n - len(e.event) for n, e in zip(lengths, events, strict=True)]
    chunks: list[list[int]] = [[]]
    used = 0
    for i, n in enumerate(lengths):
        least = min(n, fixed[i] + MIN_EVENT_CHARS) + (1 if chunks[-1] else 0)
        if chunks[-1] and used + least > FOLD_MAX_CHARS:
            chunks.append([])
            used = 0
            least -= 1
        chunks[-1].append(i)
        used += least
    return [_clip_events([events[i] for i in chunk], [fixed[i] for i in chunk]) for chunk in chunks]


def _clip_events(events: list[SummaryLine], fixed: list[int]) -> list[SummaryLine]:
    """``events`` with their event parts clipped to a fair share of ``FOLD_MAX_CHARS`` (short lines whole)."""
    room = FOLD_MAX_CHARS - (len(events) - 1)
    share: dict[int, int] = {}
    order = sorted(range(len(events)), key=lambda i: fixed[i] + len(events[i].event))
    for n, i in enumerate(order):
        limit = room // (len(order) - n)
        line = fixed[i] + len(events[i].event)
        share[i] = min(line, limit)
        room -= share[i]
    out = []
    for i, e in enumerate(events):
        limit = share[i] - fixed[i]
        if len(e.event) > limit:
            # A fixed part too long for the share (a long conclusion) still gives its line an event start.
            event = clip_line(e.event, max(limit, MIN_EVENT_CHARS) - len(CLIP_MARK))
            e = SummaryLine(e.ts, event, e.conclusion, e.evidence)
        out.append(e)
    return out


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


# Beyond ``MAX_PINNED_FACTS``, what gives way first (lowest rank); codes and clauses never do.
_PINNED_RANK = {EVIDENCE_FACT: 0, COUNT_FACT: 0, ID_FACT: 1}
_NEVER_DROPPED = 2


def _bound(facts: list[KeyFact]) -> tuple[list[KeyFact], list[KeyFact]]:
    """``facts`` within the bounds, in their order, and what gave way (oldest first).

    Readings beyond ``MAX_KEY_FACTS`` give way, the oldest first; other facts
    only beyond ``MAX_PINNED_FACTS``, by ``_PINNED_RANK`` and then the oldest
    first, and codes, decisions, exclusions and void conclusions never.
    """
    readings = [i for i, f in enumerate(facts) if f.kind is READING_FACT]
    drop: set[int] = set()
    excess = len(readings) - MAX_KEY_FACTS
    if excess > 0:
        drop.update(_readings_to_give_way(facts, readings)[:excess])
    pinned = len(facts) - len(readings)
    if pinned > MAX_PINNED_FACTS:
        ranked = sorted(
            (i for i, f in enumerate(facts) if f.kind is not READING_FACT),
            key=lambda i: (_PINNED_RANK.get(facts[i].kind, _NEVER_DROPPED), i),
        )
        drop.update(i for i in ranked[: pinned - MAX_PINNED_FACTS] if facts[i].kind in _PINNED_RANK)
    if not drop:
        return facts, []
    return [f for i, f in enumerate(facts) if i not in drop], [f for i, f in enumerate(facts) if i in drop]


class WorkingMemory:
    """Token-budgeted working context over a ``WorkingState`` snapshot.

    Triggers (seed 000 §8.2.1): past ``COMPRESS_AT`` of the budget the oldest
    half of the verbatim rounds is folded into the rolling summary, and past
    ``keep_rounds`` rounds those older than the newest ``keep_rounds``; ``end_stage`` folds every round when the
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
        # Tokens by which a ``fit`` of this alert was over the budget (the most) with only key facts left
        # to leave out (they never are): the engine flags the diagnosis.
        self.over_budget_tokens = 0

    def add_facts(self, facts: list[KeyFact]) -> None:
        self._add_trends(facts)
        merged, dropped = _bound(_condense(dedupe([*self.state.key_facts, *facts])))
        if dropped:
            state = self.state
            state.dropped_fact_count += len(dropped)
            state.dropped_facts += [f.render() for f in dropped]
            del state.dropped_facts[:-MAX_DROPPED_RECORDED]
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

    def add_round(self, round_: Round, facts: list[KeyFact] | None = None, user_text: str | None = None) -> None:
        """Add a round and its key facts (``facts``: extracted structurally by the caller).

        The round's free text is always read for facts too. ``user_text``: the part of the user's text
        whose facts ``facts`` do not hold already (default: all of it). The engine gives its alert's text:
        the codes and readings after it are in ``facts``, and reading them again as text found the same
        facts, at ~50 us a round (the readings' values make each round's text new to ``_text_facts``' cache,
        where a fleet's alert texts recur). Of the assistant's text, its ``reply``: the engine's rounds hold
        their tool results after the model's reply, and those are in ``facts`` by key. Read again as text,
        every reading's URI in a ``signal_history`` result became an evidence fact, which never gives way:
        one more each alert of a long session, whose key facts alone then passed the budget (found by an
        audit: from the 65th alert of a vehicle reporting every 10 minutes). The reply is read without its
        JSON answer (``answer_prose``): the answer's lists are facts by key (``extract_answer_facts``), its
        keys none.
        """
        self.state.rounds.append(round_)
        self.add_facts(
            [
                *(facts or []),
                *extract_key_facts(round_.user if user_text is None else user_text, round_.ts),
                *extract_key_facts(answer_prose(round_.reply), round_.ts),
            ]
        )
        if len(self.state.rounds) > self.keep_rounds:
            self._fold_beyond_kept()
        while self._past_trigger():
            if not self.compress_oldest_half():
                break

    def _past_trigger(self) -> bool:
        """True when the context passes ``COMPRESS_AT`` of the budget.

        With a counter that gives at most k tokens a character (``EstimatingCounter``: 2), a context
        with fewer than 1/k as many characters as the trigger is under it without being counted.
        """
        limit = COMPRESS_AT * self.budget_tokens
        parts = self._parts()
        most = getattr(self.counter, "most_tokens_per_char", None)
        if most is not None:
            # The length of ``render()``: the parts and the blank lines between them.
            chars = sum(map(len, parts)) + len(_BLANK_LINE) * max(len(parts) - 1, 0)
            if chars * most <= limit:
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

    def _fold_beyond_kept(self) -> None:
        """Fold the rounds older than the newest ``keep_rounds``: those stay verbatim (DESIGN: the newest 6
        rounds are kept verbatim). Folding the oldest half here, as the budget trigger does, left 4 of 7."""
        excess = len(self.state.rounds) - self.keep_rounds
        self._fold(self.state.rounds[:excess])
        self.state.rounds = self.state.rounds[excess:]
        self.state.threshold_folds += 1

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
                event=r.event or clip_line(r.user, EVENT_CHARS),
                conclusion=r.conclusion or clip_line(r.assistant, CONCLUSION_CHARS),
                evidence=r.evidence or next(iter(URI_RE.findall(f"{r.assistant}\n{r.user}")), "-"),
            )
            for r in rounds
        ]
        start = 0
        for chunk in _fit_events(events):
            self._fold_lines(rounds[start : start + len(chunk)], chunk)
            start += len(chunk)

    def _fold_lines(self, rounds: list[Round], events: list[SummaryLine]) -> None:
        source = "\n\n".join(f"{r.ts}\n{r.user}\n{r.assistant}\n{r.event} {r.conclusion} {r.evidence}" for r in rounds)
        # Every key fact of the folded rounds must survive, in the summary or in
        # the key facts; readings that the key facts let go (neither first,
        # lowest, highest nor latest of their signal) are not key numbers. The
        # facts are read as ``add_round`` read them: a round's tool results by
        # key when it was added (so in the key facts), its reply as text.
        # (Facts read from text carry no code definition, so no dedupe is needed:
        # it would drop only equal facts, whose payloads dict.fromkeys drops below.)
        kept = set(self.state.key_facts)
        required = [
            fact.payload
            for r in rounds
            for text in (r.user, answer_prose(r.reply))
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

    def fit(self, current: str = "", clip_current: Callable[[int], str] | None = None, reserve: int = 0) -> str:
        """The working context of a model call, ``current`` included, within ``budget_tokens`` less ``reserve``
        (DESIGN.md §4): ``reserve`` is what the alert's ReAct steps so far take (``agent.window``).

        While it does not fit, by ``counter``, parts give way in this order:

        1. the verbatim rounds, folded into the rolling summary (as the 70% trigger folds them);
        2. trend lines, the oldest signal first (each value stays in the session's readings);
        3. the rolling summary's oldest lines;
        4. the current alert's long text, then its signal families (``agent.prompt.summarise_signals``):
           ``clip_current(room)`` gives ``current`` in at most ``room`` tokens where it can (see
           ``clip_to_tokens``; without it, ``current`` is clipped as a whole);
        5. readings of the key facts, the oldest first, each signal's latest last.

        Only 1 changes the state; 2-5 leave out of this text only, each with a line saying what and how
        many. Codes, decisions, exclusions, void conclusions and ids are never left out: a context that
        still does not fit is sent whole, and ``over_budget_tokens`` says by how much, the most of any fit
        of this alert's calls (the engine flags it).
        """
        budget = self.budget_tokens - max(reserve, 0)
        parts = self._parts(current)
        if self._fits(parts, budget):
            return _BLANK_LINE.join(parts)
        while self.state.rounds:
            self.compress_oldest_half()
            parts = self._parts(current)
            if self._fits(parts, budget):
                return _BLANK_LINE.join(parts)
        count = self.counter.count
        excess = self._count(parts) - budget
        trends, trend_note, excess = self._shed([f.render() for f in self.trend_facts()], excess, _TRENDS_NOT_SHOWN)
        summary, summary_note, excess = self._shed(self.state.summary_lines, excess, _SUMMARY_NOT_SHOWN)
        if excess > 0 and current:
            room = count(current) - excess
            clipped = clip_current(room) if clip_current is not None else clip_to_tokens(current, room, self.counter)
            if clipped and count(clipped) < count(current):
                excess -= count(current) - count(clipped)
                current = clipped
        facts = self.state.key_facts
        shown = [f.render() for f in facts]
        reading_note = ""
        if excess > 0:
            order = _readings_to_give_way(facts, [i for i, f in enumerate(facts) if f.kind is READING_FACT])
            kept, reading_note, excess = self._shed([shown[i] for i in order], excess, _READINGS_NOT_SHOWN)
            gone = set(order[: len(order) - len(kept)])
            shown = [line for i, line in enumerate(shown) if i not in gone]
        parts = []
        if summary or summary_note:
            parts.append(_SUMMARY_HEAD + "\n".join([*([summary_note] if summary_note else []), *summary]))
        if current:
            parts.append(current)
        lines = [*shown, *([reading_note] if reading_note else []), *trends, *([trend_note] if trend_note else [])]
        if lines:
            parts.append(_FACTS_HEAD + "\n".join(lines))
        over = max(0, self._count(parts) - budget)
        if over:
            log.warning("working context over its budget by %d tokens: key facts are kept", over)
        self.over_budget_tokens = max(self.over_budget_tokens, over)
        return _BLANK_LINE.join(parts)

    def _fits(self, parts: list[str], budget: int) -> bool:
        """True when ``parts`` joined fit ``budget`` tokens (by their length alone, where the counter allows)."""
        most = getattr(self.counter, "most_tokens_per_char", None)
        if most is not None:
            chars = sum(map(len, parts)) + len(_BLANK_LINE) * max(len(parts) - 1, 0)
            if chars * most <= budget:
                return True
        return self._count(parts) <= budget

    def _shed(self, lines: list[str], excess: int, note: str) -> tuple[list[str], str, int]:
        """``lines`` less the first ones until ``excess`` tokens are saved, the note that stands for them
        (``note`` with their number; empty when none is left out), and the excess left."""
        if excess <= 0 or not lines:
            return lines, "", excess
        count = self.counter.count
        n = saved = cost = 0
        while n < len(lines):
            saved += count(lines[n])
            n += 1
            cost = count(note.format(n))
            if saved - cost >= excess:
                break
        return lines[n:], note.format(n), excess - saved + cost

    def _parts(self, current: str = "") -> list[str]:
        parts = []
        if self.state.summary_lines:
            parts.append(_SUMMARY_HEAD + "\n".join(self.state.summary_lines))
        for r in self.state.rounds:
            parts.append(f"## Alert at {r.ts}\n{r.user}\n## Agent\n{r.assistant}")
        if current:
            parts.append(current)
        facts = [*self.state.key_facts, *self.trend_facts()]
        if facts:
            parts.append(_FACTS_HEAD + "\n".join(f.render() for f in facts))
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

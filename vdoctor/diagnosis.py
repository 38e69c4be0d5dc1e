"""The per-vehicle diagnosis logic, free of Flink.

``DiagnosisEngine.on_event`` takes one vehicle's session and dedup snapshots
and one event, and returns the new snapshots plus what to emit. The Flink
operator only loads and stores the snapshots; tests drive this class directly.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from vdoctor.agent.evidence import EVIDENCE_DROPPED, check_evidence
from vdoctor.agent.prompt import build_window
from vdoctor.agent.react import AgentRun, run_react
from vdoctor.agent.tools import Toolbox
from vdoctor.agent.window import MODEL_STEP_CLIPPED, TOOL_RESULT_CLIPPED
from vdoctor.embedders import Embedder, embedder_id
from vdoctor.embedders.base import Vectors
from vdoctor.errors import EventError, ModelError, StoreError, VDoctorError
from vdoctor.events import (
    AlertEvent,
    Event,
    LifecycleEvent,
    RecheckEvent,
    content_mark,
    describe_validation_error,
    following_session_id,
    session_id_for,
)
from vdoctor.knowledge import KnowledgePack
from vdoctor.knowledge.search import KnowledgeBase
from vdoctor.limits import INJECTION_BUDGET_TOKENS, WORKING_BUDGET_TOKENS
from vdoctor.lines import KeyFact, alert_event, conclusion_text, fmt_num, iso, parse_codes_seen
from vdoctor.memory.facts import extract_answer_facts, extract_tool_facts
from vdoctor.memory.recall import SessionRecall
from vdoctor.memory.session import (
    Conclusion,
    DedupState,
    Reading,
    SessionState,
    StoredDedup,
    StoredSession,
    TimelineEntry,
    UnreadableState,
    opening_text,
    split_seen,
)
from vdoctor.memory.summarizer import FidelityMetrics, OfflineSummarizer, Summarizer, request_to_json
from vdoctor.memory.summary import SUMMARY_PROMPT_VERSION, CaseSummary, milestone_summary, summarize_case
from vdoctor.memory.working import KEEP_ROUNDS, Round, WorkingMemory
from vdoctor.memory.write_policy import (
    RECHECK_REACH,
    StaleRecheck,
    WriteFinal,
    WriteStatus,
    is_milestone_id,
    latest_case,
    merged_record,
    milestone_id,
    milestones_due,
    set_recheck,
    supersede_milestones,
    write_final,
)
from vdoctor.models.base import ChatModel
from vdoctor.records import (
    MAX_SOURCE_CHARS,
    DeadLetter,
    Diagnosis,
    MemoryRecord,
    MemoryUse,
    PackedVector,
    Phase,
    RecordKind,
)
from vdoctor.retrieval.text import dense_text
from vdoctor.stores import MemoryStore
from vdoctor.stores.base import read_at_once
from vdoctor.stores.retry import RetryingStore
from vdoctor.tokens import DEFAULT_COUNTER, TokenCounter

log = logging.getLogger(__name__)

# How many signals an alert's timeline line names: the summary line is short.
TIMELINE_SIGNALS = 3
# Output flags: a concluded case or a milestone that did not reach long-term memory (the store, the
# embedder or the summary model stayed down); the summary model failed (a fold was written by the
# offline summarizer instead; a case summary could not be written).
L3_WRITE_FAILED = "l3_write_failed"
# The previous session's case, whose write had failed, written (or failed again) at this alert.
L3_WRITTEN_LATE = "l3_written_late"
L3_LATE_WRITE_FAILED = "l3_late_write_failed"
# The alert was diagnosed without readings it set aside (names in another script that the fleet's signal map
# lacks, text that is no number or that the job cannot read in its name's unit: ``AlertEvent.signals_set_aside``;
# its line is a dead letter as well).
SIGNALS_SET_ASIDE = "signals_set_aside"
# The alert was diagnosed without trouble codes the job cannot read (``AlertEvent.codes_set_aside``; its line is
# a dead letter as well).
CODES_SET_ASIDE = "codes_set_aside"
SUMMARY_MODEL_FAILED = "summary_model_failed"
# The working context a model call got was over its token budget with only key facts left to leave out
# (they never are: ``WorkingMemory.fit``).
WORKING_OVER_BUDGET = "working_over_budget"
# This alert made working memory let key facts go (readings beyond its bound: ``working.MAX_KEY_FACTS``).
KEY_FACTS_DROPPED = "key_facts_dropped"
# A dead letter's reason quotes at most this much of an unexpected error's message: enough to name the
# fault, never a whole input echoed back (a validation error repeats the value it refused).
MAX_FAILURE_CHARS = 500
# After a retry of a waiting case found long-term memory not answering, the other vehicles' retries wait for their next
# turn without asking it for this long (``DiagnosisEngine.store_down_pause_s``; the operator makes it at most
# half of its retry interval).
STORE_DOWN_PAUSE_S = 60.0
# A try's read of the store that failed after this long: the store does not answer (a connect timeout).
SLOW_STORE_S = 1.0


@dataclass
class RunStats:
    """Plain numbers about one event's run, for whoever reports them (the operator's metrics)."""

    recall_ms: float | None = None  # None: this run opened no session with recall
    recalled_own: int = 0
    recalled_similar: int = 0
    write_ms: float | None = None  # None: this run wrote nothing to long-term memory (else its last write's time)
    # Its writes to long-term memory (``l3_writes``): two when an alert writes the case its vehicle's last session
    # left waiting and then its own case or milestone.
    writes: int = 0
    # Embedding what it wrote (a concluded case or a milestone), the wait for a shared model call included.
    embed_ms: float | None = None
    write_failed: bool = False
    # A case whose first write failed was written: by a retry, or before the vehicle's next alert opened its session
    # (or a lifecycle event ended it).
    late_write: bool = False
    # A case whose first write failed, tried once more as its session ended (the vehicle's next alert or a lifecycle
    # event replaced it), failed again: lost. (Its first failure was counted by ``write_failed``, at its conclusion.)
    case_lost: bool = False
    # The vehicle's stored states this event found unreadable and set aside (``set_aside_letter``): 0, 1 or 2.
    set_aside: int = 0


@dataclass
class StepResult:
    # A stored session the event did not read comes back as it was given (``StoredSession``).
    session: SessionState | StoredSession | None
    dedup: DedupState | StoredDedup  # the stored ids, as the state's text (``StoredDedup``) or parsed
    diagnoses: list[Diagnosis] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # The event's id is one an event already processed has: the same event sent again (dropped), or, with a
    # dead letter, another event under a taken id.
    duplicate: bool = False
    stats: RunStats = field(default_factory=RunStats)
    # The session as the event found it (every result has it): a live one, which an alert's run may have changed
    # in place, as its text from before the run. What the operator keeps when writing the run's state or outputs
    # fails.
    given: SessionState | StoredSession | None = None


def set_aside_letter(vin: str, unreadable: UnreadableState, instead: str) -> DeadLetter:
    """The dead letter of a vehicle's stored state that cannot be read: its text as ``raw`` (to mend and restore by
    hand), and what was wrong with it and what the vehicle has ``instead``."""
    why = describe_validation_error(unreadable.error)
    if len(why) > MAX_FAILURE_CHARS:  # (one line per problem: thousands for a state of thousands of entries)
        why = why[:MAX_FAILURE_CHARS] + "…"
    reason = f"the stored {unreadable.what} of {vin} cannot be read by this release ({why})"
    log.error("%s: set aside to the dead letters; %s", reason, instead)
    return DeadLetter(
        raw=unreadable.text, error=f"{reason}: set aside here, its text as raw; {instead}", stage="process"
    )


def reused_id_text(event: Event, first: int) -> str:
    """A dead letter's reason for an event whose id another event was processed under (of time ``first``)."""
    taken = iso(datetime.fromtimestamp(first, UTC))
    if first == int(event.ts.timestamp()):
        other = f"an event of {taken} too, but this one says something else"
    else:
        other = f"an event of {taken}; this event is of {iso(event.ts)}"
    return (
        f"event id {event.event_id!r} of {event.vin} was processed with {other}, so it is not that event sent "
        "again: not diagnosed under an id already taken (event ids are unique per vehicle: send it with an id of "
        "its own)"
    )


def failure_text(error: Exception) -> str:
    """A dead letter's reason for an unexpected error of one event's run: its type, and its message when ours.

    Our own errors' messages are written to be shown (``VDoctorError``: no secrets), bounded; a foreign
    error that no boundary wrapped is named by its type only (its message may hold anything a library put
    there, and a dead letter goes to a topic): its message and traceback are in the job's log.
    """
    name = type(error).__name__
    if not isinstance(error, VDoctorError):
        return f"processing failed: {name} (its message and traceback are in the job's log)"
    message = str(error)
    if len(message) > MAX_FAILURE_CHARS:
        message = message[:MAX_FAILURE_CHARS] + "…"
    return f"processing failed: {name}" + (f": {message}" if message else "")


def signal_uri(vin: str, name: str, when: str) -> str:
    """The evidence URI of a reading of signal ``name`` at ``when`` (``iso`` of the alert's time)."""
    return f"signal://{vin}/{name}@{when}"


def opened_alike(case: MemoryRecord, text: str, codes: list[str]) -> bool:
    """Whether ``case``'s session may have been opened by an alert of this opening ``text`` and these ``codes``.

    Its opening alert said ``case.alert_text``, and the session saw every code of it, so they are in the
    ``codes seen`` line of the text its summary was written from (the stored request's ``source``). Text
    alone told alerts without text (codes alone) apart from none: a late codes-only alert took the id of an
    older codes-only session of its second, whatever its codes. A case without that line (its request not
    kept: too long, or written by a release before the line) cannot tell, and the text decides as before.
    A case that later sessions merged into (``merged_sessions``) holds the newest merged session's request,
    whose codes need not be all of the opening alert's: merged for the same cause, the two share one at
    least, while another fault's alert shares none. So one code in common is enough there (a replay of the
    session that opened it took the next id, merged into its own case as another session and reset its
    verdict; taken by text alone, a late codes-only alert of another fault replaced the verified case:
    both found by diff reviews).
    """
    if case.alert_text != text:
        return False
    try:
        request = json.loads(case.source) if case.source else None
    except ValueError:
        request = None
    written_from = request.get("source") if isinstance(request, dict) else None
    seen = parse_codes_seen(written_from) if isinstance(written_from, str) else {}
    if not seen or not codes:
        return True
    if case.merged_sessions:
        return any(code in seen for code in codes)
    return all(code in seen for code in codes)


def holds_case(record: MemoryRecord, session: SessionState) -> bool:
    """Whether ``record`` holds the concluded ``session``'s case: merged into it, or under its id when its
    session may have opened as this one did (``opened_alike``).

    A session opens under no id the store holds for another session's case (``_unclaimed_session_id``), unless
    the store could not be asked then: a record under its id of another alert is another session's, which the
    case is written over, as before. The job's tries (``DiagnosisEngine._case_held``) and ``vdoctor memory
    write-waiting`` both ask this.
    """
    if record.kind is not RecordKind.FINAL:
        return False
    if session.session_id in record.merged_sessions:
        return True
    return record.session_id == session.session_id and opened_alike(record, session.alert_text, list(session.codes))


class DiagnosisEngine:
    """Runs the agent with L1/L2/L3 memory for one event of one vehicle at a time."""

    def __init__(
        self,
        store: MemoryStore,
        model: ChatModel,
        embedder: Embedder,
        pack: KnowledgePack,
        counter: TokenCounter = DEFAULT_COUNTER,
        working_budget_tokens: int = WORKING_BUDGET_TOKENS,
        injection_budget_tokens: int = INJECTION_BUDGET_TOKENS,
        summarizer: Summarizer | None = None,
        working_keep_rounds: int = KEEP_ROUNDS,
        knowledge: KnowledgeBase | None = None,
        memory_enabled: bool = True,
    ) -> None:
        self.store = store
        self.model = model
        self.embedder = embedder
        self.pack = pack
        self.counter = counter
        self.working_budget_tokens = working_budget_tokens
        self.injection_budget_tokens = injection_budget_tokens
        # Summaries may come from a separate, cheaper model (seed 000 §8.2);
        # the offline summarizer is the default.
        self.summarizer: Summarizer = summarizer or OfflineSummarizer()
        # Every summary's fidelity outcome, for the operator to expose.
        self.summary_metrics = FidelityMetrics()
        self._told_skipped = False
        # Until when (by ``clock``) the retries of waiting cases take long-term memory for down without asking it
        # (``retry_case``), after a try found it down: a store that does not answer held every vehicle's try for
        # its connect timeout, a worker each (or the operator's thread at concurrency 1), 10 s a try for MySQL.
        self.store_down_pause_s = STORE_DOWN_PAUSE_S
        self.clock: Callable[[], float] = time.monotonic
        self._store_down_until = 0.0
        self.working_keep_rounds = working_keep_rounds
        self.knowledge = knowledge
        self.memory_enabled = memory_enabled
        # Session-open recall; ``vdoctor memory recall`` uses the same object.
        self.recall = SessionRecall(store, embedder, pack, injection_budget_tokens, counter)

    def close(self) -> None:
        self.store.close()
        self.model.close()
        # The process's embedder outlives an engine (one per model per process); the query vectors it has not
        # written to the shared file yet are written now.
        flush = getattr(self.embedder, "flush", None)
        if callable(flush):
            flush()
        if self.knowledge is not None:
            self.knowledge.close()

    # -- events ---------------------------------------------------------------

    def on_event(
        self,
        session: SessionState | StoredSession | None,
        dedup: DedupState | StoredDedup,
        event: Event,
        raw: str,
    ) -> StepResult:
        """The event's run. A ``StoredSession`` (the job's state) is parsed only for an alert that continues it.

        One event's failure is never the job's: an event that cannot be processed (``EventError``), a
        long-term memory that stays down (``StoreError``) and any other error of its run (an ``Exception``:
        a bug, a foreign error no boundary wrapped) make it a ``process`` dead letter with the reason, and
        the job goes on (``KeyboardInterrupt``, ``SystemExit`` and the like still propagate). A dead
        letter's session is the one given, as it was (a live one, which the failed run may have changed
        half-way, is given back as its text from before the run), and its dedup ids do not hold the event's:
        the same event sent again is processed, and counted once. (But for a lifecycle event that wrote its
        vehicle's waiting case before its soft delete failed: its session comes back with the case written.)

        A stored state this release cannot read (``UnreadableState``: a state written by a release whose
        format this one does not read, or damaged) is set aside: its text goes to a ``process`` dead letter
        (``set_aside_letter``) and the event runs without it, as the vehicle's first event (the session) or
        its first id (the dedup ids). Kept, it failed every later event of the vehicle or, for the dedup
        ids, the job.
        """
        aside: list[DeadLetter] = []
        mark = content_mark(raw)
        try:
            fresh = dedup.check_and_add(event.event_id, event.ts, mark)
            first = None if fresh else dedup.seen_at(event.event_id)
        except UnreadableState as e:
            # Kept, it failed the job at this event at every restart. Set aside, the vehicle's events go on; an
            # event processed before is processed again if it is sent again.
            aside.append(set_aside_letter(event.vin, e, "the vehicle's event ids start again from this event"))
            dedup = DedupState()
            fresh = dedup.check_and_add(event.event_id, event.ts, mark)
        if not fresh:
            # The id is taken: by the same event sent again (dropped, counted), or by another event, which a
            # producer that reuses its ids sends (a counter started again, ids made of the time), whose time or
            # content differs. That one was dropped without a word; it is a dead letter, and the id stays the
            # processed event's. (An id taken before the content marks: by its time alone.)
            at = int(event.ts.timestamp())
            second, first_mark = split_seen(first) if first is not None else (at, None)
            if second == at and first_mark in (None, mark):
                return StepResult(session=session, dedup=dedup, duplicate=True, given=session)
            letter = DeadLetter(raw=raw, error=reused_id_text(event, second), stage="process")
            return StepResult(session=session, dedup=dedup, dead_letters=[letter], duplicate=True, given=session)
        try:
            result = self._run_event(session, dedup, event, raw)
        except UnreadableState as e:
            # The stored session (every read of it comes before the run changes anything but an idempotent
            # soft delete): kept, it failed every later event of the vehicle. Set aside, the event runs as the
            # vehicle's first; a case it held waiting for its write is in the letter's text.
            aside.append(set_aside_letter(event.vin, e, f"event {event.event_id} ran without it"))
            result = self._run_event(None, dedup, event, raw)
        if aside:
            result.dead_letters[:0] = aside
            result.stats.set_aside = len(aside)
        return result

    def _run_event(
        self, session: SessionState | StoredSession | None, dedup: DedupState | StoredDedup, event: Event, raw: str
    ) -> StepResult:
        """``on_event``'s run of an event whose id is new; raises ``UnreadableState`` for a stored session
        that cannot be read."""
        # A stored session is never changed in place; a live one (a vehicle's chain of runs) is, by an alert or by a
        # lifecycle event's write of its waiting case.
        given: SessionState | StoredSession | None = session
        if isinstance(session, SessionState) and isinstance(event, AlertEvent | LifecycleEvent):
            given = StoredSession(session.model_dump_json())
        try:
            if isinstance(event, AlertEvent):
                if session is not None and (left := session.left_care_at) is not None and event.ts < left:
                    raise EventError(
                        "process",
                        f"alert of {iso(event.ts)} is from before {event.vin} left the fleet's care (a lifecycle "
                        f"event of {iso(left)}): the vehicle's cases of then are set aside, and a case of this "
                        "alert would be recalled by the sessions of its care now; not diagnosed",
                    )
                if isinstance(session, StoredSession) and session.accepts_alert_at(event.ts):
                    session = session.load()
                stats = RunStats()
                session, diagnosis = self._on_alert(session, event, stats)
                return StepResult(session=session, dedup=dedup, diagnoses=[diagnosis], stats=stats, given=given)
            if isinstance(event, RecheckEvent):
                self._on_recheck(event)
                return StepResult(session=session, dedup=dedup, given=given)
            if isinstance(event, LifecycleEvent):
                stats = RunStats()
                # (Reads the stored session's id: before any write, so that a session set aside, which raises
                # here, is set aside before the soft delete, run once.)
                ended = self._left_care(session, event)
                waiting = None
                if session is not None and session.l3_pending:
                    # A case waiting for its second write (``l3_pending``) is of the vehicle's care before this
                    # event: written now, it is set invalid with the vehicle's other cases below, kept for audit
                    # like them, where it was dropped with the session without a word (found by an audit).
                    waiting = session.load() if isinstance(session, StoredSession) else session
                    self._write_pending_case(waiting, stats)
                try:
                    self.store.soft_delete(event.vin, event.ts)
                except StoreError as e:
                    if waiting is None or not waiting.l3_written:
                        raise
                    # The case is written (by this try, counted, or found in long-term memory already): its session
                    # stays so (the event sent again does not write it again); the event is a dead letter, as any
                    # whose soft delete failed.
                    log.warning("long-term memory failed for %s: %s", event.vin, e)
                    dedup.discard(event.event_id)
                    letter = DeadLetter(raw=raw, error=f"long-term memory unavailable: {e}", stage="process")
                    return StepResult(session=waiting, dedup=dedup, dead_letters=[letter], stats=stats, given=given)
                # The vehicle left the fleet's care: its open session ends too. Its state keeps when (and the
                # session's id, which the next session's id follows), so that an alert from before the event,
                # delivered after it, is told apart (``SessionState.left_care_at``).
                return StepResult(session=ended, dedup=dedup, given=given, stats=stats)
        except EventError as e:
            error = str(e)
        except StoreError as e:
            log.warning("long-term memory failed for %s: %s", event.vin, e)
            error = f"long-term memory unavailable: {e}"
        except (MemoryError, UnreadableState):
            raise  # (the worker's, not the event's; ``on_event`` sets the state aside)
        except Exception as e:  # noqa: BLE001 - one event's failure is its dead letter, not the job's
            log.warning("event %s of %s failed; it goes to the dead letters", event.event_id, event.vin, exc_info=True)
            error = failure_text(e)
        else:
            raise TypeError(f"unhandled event type {type(event).__name__}")
        # Not processed: the same event sent again (a recheck that came before its case) must not be a duplicate.
        dedup.discard(event.event_id)
        letters = [DeadLetter(raw=raw, error=error, stage="process")]
        return StepResult(session=given, dedup=dedup, dead_letters=letters, given=given)

    @staticmethod
    def _left_care(session: SessionState | StoredSession | None, event: LifecycleEvent) -> SessionState:
        """What the vehicle's state keeps after a lifecycle event: no open session, only the event's time and
        the id of the session it ended, if any. The time of the lifecycle event delivered last, whatever its
        time: a fleet system that sent one misdated (years ahead: every later alert of the vehicle would be
        from before it) corrects it by sending it again (with an event id of its own)."""
        return SessionState(
            vin=event.vin,
            series="",
            session_id="" if session is None else session.session_id,
            phase=Phase.CONCLUDED,
            opened_at=event.ts,
            last_event_at=event.ts,
            left_care_at=event.ts,
        )

    def _on_recheck(self, event: RecheckEvent) -> None:
        session_id = event.session_id
        if not session_id:  # a workshop's system that knows the vehicle, not the session: its newest case
            found = latest_case(self.store, event.vin, event.ts)
            if found is None:
                raise EventError(
                    "process",
                    f"recheck without a session_id: {event.vin} has no valid concluded case in the "
                    f"{RECHECK_REACH.days} days before it",
                )
            session_id = found
        elif not session_id.startswith(event.vin + "-"):
            raise EventError("process", f"session_id {session_id!r} does not belong to vin {event.vin}")
        elif is_milestone_id(session_id):
            raise EventError(
                "process",
                f"session_id {session_id!r} names a milestone, what a session not yet concluded guessed: a "
                "recheck verifies a concluded case (its session's id, without the milestone's -m<n>)",
            )
        try:
            applied = set_recheck(self.store, event.vin, session_id, event.recheck_ok, event.ts)
        except StaleRecheck as e:
            raise EventError("process", str(e)) from None
        if not applied:
            raise EventError(
                "process", f"recheck for unknown session {session_id!r}: no concluded case in long-term memory"
            )

    def _open_session(self, alert: AlertEvent, stats: RunStats, previous: str | None) -> SessionState:
        """A new session of the alert's vehicle; ``previous``: the id of the session it follows, if any."""
        opening, text = session_id_for(alert.vin, alert.ts), opening_text(alert.alert_text)
        session_id = following_session_id(opening, previous)
        if self.memory_enabled and (previous is None or opening <= previous):
            session_id = self._unclaimed_session_id(alert.vin, opening, session_id, text, alert.dtc_codes)
        session = SessionState(
            vin=alert.vin,
            series=alert.series,
            session_id=session_id,
            opened_at=alert.ts,
            last_event_at=alert.ts,
            alert_text=text,
        )
        if not self.memory_enabled:
            return session
        started = time.perf_counter()
        try:
            found = self.recall.for_alert(
                alert.vin, alert.series, alert.alert_text, alert.dtc_codes, alert.ts, session_id=session.session_id
            )
        except (StoreError, ModelError) as e:
            # Long-term memory or the embedder (the query's vector) is down: diagnose without memory
            # rather than not at all; the output says so.
            log.warning("recall failed for %s: %s", alert.vin, e)
            session.memory = MemoryUse(degraded=True)
            return session
        stats.recall_ms = (time.perf_counter() - started) * 1000.0
        stats.recalled_own, stats.recalled_similar = len(found.own), len(found.similar)
        session.memory_text = found.text
        if found.similar_skipped and not self._told_skipped:
            # Once per engine: every session of such a store would say the same.
            self._told_skipped = True
            log.warning("similar cases left out (said once; memory.degraded marks each): %s", found.similar_skipped)
        session.memory = MemoryUse(
            injected=bool(found.text),
            tokens=found.tokens,
            own=found.own_refs,
            similar=found.similar_refs,
            degraded=bool(found.similar_skipped),
        )
        return session

    def _unclaimed_session_id(self, vin: str, opening: str, session_id: str, text: str, codes: list[str]) -> str:
        """``session_id``, or the next id of its second (``following_session_id``) while long-term memory holds
        another session's case under it: one whose opening alert was not this one (``opened_alike``).

        Asked only when the vehicle's state cannot tell: an alert no later than its previous session's opening
        second (a late one), or a vehicle without a previous session in state (its first alert, or one after
        the state expired; after a lifecycle event the state keeps the id of the session it ended). A late
        alert in the second of an older session took that session's id, and its case then replaced the older
        one in long-term memory, its verdict with it. A case this alert may have opened is this session's own,
        written before a restore or in an earlier run of a replay, and keeps its id (a write is idempotent by
        id). When the store cannot say, the id stays.
        """
        try:
            while (held := read_at_once(self.store, vin, session_id)) is not None:
                if opened_alike(held, text, codes):
                    break
                session_id = following_session_id(opening, session_id)
        except StoreError as e:
            log.warning("could not check whether %s is taken in long-term memory: %s", session_id, e)
        return session_id

    def _definition(self, code: str) -> str:
        entry = self.pack.get(code)
        return entry.definition_en if entry else ""

    def _on_alert(
        self, session: SessionState | StoredSession | None, alert: AlertEvent, stats: RunStats
    ) -> tuple[SessionState, Diagnosis]:
        started = time.perf_counter()
        # A stored session here is one the alert does not continue (``on_event`` parsed any other).
        late: list[str] = []
        if not isinstance(session, SessionState) or not session.accepts_alert_at(alert.ts):
            if session is not None and session.l3_pending:
                late = self._write_pending_case(session, stats)
            left = None if session is None else session.left_care_at
            session = self._open_session(alert, stats, None if session is None else session.session_id or None)
            session.left_care_at = left
        session.alerts += 1
        session.last_event_at = max(session.last_event_at, alert.ts)
        for code in alert.dtc_codes:
            session.codes[code] = session.codes.get(code, 0) + 1
        when, at = iso(alert.ts), int(alert.ts.timestamp())
        for name, value in alert.signals.items():
            session.add_reading(Reading(name=name, value=value, ts=alert.ts, uri=signal_uri(alert.vin, name, when)), at)

        working = WorkingMemory(
            session.working,
            self.working_budget_tokens,
            self.counter,
            self.summarizer,
            self.summary_metrics,
            self.working_keep_rounds,
        )
        failures_before = session.working.fidelity_failures
        dropped_before = session.working.dropped_fact_count
        messages, window = build_window(session, alert, working)
        run = run_react(self.model, Toolbox(self.pack, session, self.knowledge), messages, window=window)
        if run.error is not None:
            log.warning("diagnosis of %s %s without a model answer: %s", alert.vin, alert.event_id, run.error)
        # The answer's evidence goes to the output, the timeline, the key facts and the case summary: only
        # what this session can vouch for (``agent.evidence``).
        evidence = check_evidence(run.answer.evidence, session)
        if evidence.dropped or evidence.kept != run.answer.evidence:
            run.answer = run.answer.model_copy(update={"evidence": evidence.kept})
        answer = run.answer
        # The alert's event line, every signal named: the round's; the timeline's too when it names few enough.
        event = alert_event(alert.dtc_codes, alert.signals)
        self._remember_round(working, alert, when, run, event)
        session.note_answer(answer.priority, answer.root_cause, answer.codes, answer.confidence)

        flags = [*late, *run.flags]
        if evidence.dropped:
            flags.append(EVIDENCE_DROPPED)
        concluded = answer.phase is Phase.CONCLUDED and answer.root_cause and answer.fix_action and answer.priority
        if concluded:
            # Stage trigger: the investigation is over, its rounds become summary lines. A case not written
            # yet is written below, where the whole session is compressed into its case summary
            # (``close_session``): that replaces what a fold of these rounds would write, so the fold (a call
            # of the summary model, and its check) is left to ``close_session``, which does not make it.
            if session.l3_written:
                working.end_stage()
            session.conclude(
                Conclusion(
                    root_cause=answer.root_cause,
                    fix_action=answer.fix_action,
                    priority=answer.priority,
                    confidence=answer.confidence,
                    evidence=answer.evidence,
                    codes=answer.codes or list(session.codes),
                )
            )
        self._add_timeline(session, alert, answer.phase, answer.priority, answer.confidence, answer.evidence, event)
        if session.phase is Phase.CONCLUDED:
            flags += self._write_case(session, working, stats)
        else:
            flags += self._write_milestone(session, alert, stats)
        if session.working.fidelity_failures > failures_before and "summary_fidelity_failed" not in flags:
            flags.append("summary_fidelity_failed")
        if working.summary_model_failures and SUMMARY_MODEL_FAILED not in flags:
            flags.append(SUMMARY_MODEL_FAILED)
        if working.over_budget_tokens:
            flags.append(WORKING_OVER_BUDGET)
        if session.working.dropped_fact_count > dropped_before:
            flags.append(KEY_FACTS_DROPPED)
        if window.clipped_results:
            flags.append(TOOL_RESULT_CLIPPED)
        if window.clipped_steps or run.clipped_calls:
            flags.append(MODEL_STEP_CLIPPED)
        if alert.signals_set_aside:
            flags.append(SIGNALS_SET_ASIDE)
        if alert.codes_set_aside:
            flags.append(CODES_SET_ASIDE)

        diagnosis = Diagnosis(
            vin=alert.vin,
            series=alert.series,
            event_id=alert.event_id,
            session_id=session.session_id,
            phase=session.phase,
            priority=answer.priority,
            root_cause=answer.root_cause if session.phase is Phase.CONCLUDED else None,
            fix_action=answer.fix_action if session.phase is Phase.CONCLUDED else None,
            confidence=answer.confidence,
            evidence=answer.evidence,
            llm_calls=run.llm_calls,
            tool_calls=run.tool_calls,
            prompt_tokens=run.prompt_tokens,
            completion_tokens=run.completion_tokens,
            latency_ms=round((time.perf_counter() - started) * 1000.0, 1),
            model_latency_ms=round(run.latency_ms, 1),
            memory=session.memory,
            flags=flags,
        )
        return session, diagnosis

    def _remember_round(self, working: WorkingMemory, alert: AlertEvent, when: str, run: AgentRun, event: str) -> None:
        # The alert's own text on its first line: a clause read from it (an
        # exclusion, a void conclusion) must not run on into the codes.
        user = alert.alert_text + "\n" + " ".join(alert.dtc_codes)
        user += "".join(f" {k}={fmt_num(v)}" for k, v in alert.signals.items())
        tool_lines = run.tool_results
        # The model's reply: the transcript's last message when it is the model's. A run that ended otherwise
        # (the model down, at its first call or after a tool call; the iteration cap) ends in the alert's
        # prompt or a tool result: taken as the reply, its rendered key facts were read back as new ones
        # ("decision: decision: ...", every reading's URI), one more each such alert (found by a diff review).
        last = run.transcript[-1] if run.transcript else None
        final = last.content if last is not None and last.role == "assistant" else ""
        steps = "; ".join(run.tools_used)
        assistant = f"{final}\n" + (f"tools: {steps}\n" if steps else "") + "\n".join(tool_lines)
        # Key facts, read structurally: codes with their definitions, the
        # alert's readings with their times, tool results, the decision.
        facts = [KeyFact.code(c, self._definition(c)) for c in alert.dtc_codes]
        facts += [KeyFact.signal(k, v, when) for k, v in alert.signals.items()]
        for content in tool_lines:
            facts += extract_tool_facts(content, when)
        facts += extract_answer_facts(run.answer.json_dict(), when)
        answer = run.answer
        conclusion = conclusion_text(answer.phase is Phase.CONCLUDED, answer.priority, answer.confidence)
        evidence = answer.evidence[0] if answer.evidence else "-"
        # The codes and readings after the alert's text are read above, from the alert itself, and the tool
        # results by key: the free text read is the alert's text and the model's reply.
        working.add_round(
            Round(
                ts=when,
                user=user,
                assistant=assistant,
                event=event,
                conclusion=conclusion,
                evidence=evidence,
                reply_chars=len(final),
            ),
            facts,
            user_text=alert.alert_text,
        )

    def _add_timeline(
        self,
        session: SessionState,
        alert: AlertEvent,
        phase: Phase,
        priority: str | None,
        confidence: float,
        evidence: list[str],
        full_event: str,
    ) -> None:
        # ``full_event`` is ``alert_event`` with every signal: the same line when there are no more than shown.
        if len(alert.signals) <= TIMELINE_SIGNALS:
            event = full_event
        else:
            event = alert_event(alert.dtc_codes, alert.signals, TIMELINE_SIGNALS)
        conclusion = conclusion_text(phase is Phase.CONCLUDED, priority, confidence, with_confidence=False)
        uri = evidence[0] if evidence else (f"dtc://{alert.dtc_codes[0]}" if alert.dtc_codes else "-")
        session.add_timeline(TimelineEntry(ts=alert.ts, event=event, conclusion=conclusion, evidence=uri))

    def _embed_record(self, text: str, stats: RunStats) -> Vectors:
        """The vector of a record to write, its time added to the run's ``embed_ms``."""
        started = time.perf_counter()
        try:
            row: Vectors = self.embedder.embed([text])[0]
            return row
        finally:
            stats.embed_ms = (stats.embed_ms or 0.0) + (time.perf_counter() - started) * 1000.0

    def _write_pending_case(self, previous: SessionState | StoredSession, stats: RunStats) -> list[str]:
        """The previous session's case, whose write failed (``l3_pending``), tried once more, as the vehicle's
        next alert replaces that session in its state: a store or model that was down for a while loses no
        case. The alert's flags: ``l3_written_late``, or ``l3_late_write_failed`` when it failed again."""
        session = previous.load() if isinstance(previous, StoredSession) else previous
        once = self.store_once
        try:
            held = self._case_held(once, session, read_at_once(once, session.vin, session.session_id))
        except StoreError as e:
            # (The write below asks the store again, through its retries, and says how it went.)
            log.info("could not tell whether %s is in long-term memory: %s", session.session_id, e)
            held = False
        if held:
            try:
                self.found_held(self.store, session)
            except StoreError as e:
                # Written again, the case would be reported lost should this fail too; it is in long-term memory.
                log.warning("%s is in long-term memory; its milestones could not be set invalid: %s", session.vin, e)
                session.l3_written, session.l3_pending = True, False
            return [L3_WRITTEN_LATE]
        working = WorkingMemory(
            session.working, self.working_budget_tokens, self.counter, self.summarizer, self.summary_metrics
        )
        writes = stats.writes
        self._write_case(session, working, stats)
        if session.l3_written:
            log.info("wrote %s to long-term memory at the vehicle's next alert", session.session_id)
            stats.late_write = True
            return [L3_WRITTEN_LATE]
        log.warning("%s did not reach long-term memory at a second try either: the case is lost", session.session_id)
        stats.write_failed, stats.write_ms, stats.case_lost, stats.writes = False, None, True, writes
        return [L3_LATE_WRITE_FAILED]

    def retry_case(
        self,
        session: SessionState | StoredSession | None,
        dedup: DedupState | StoredDedup,
        vin: str = "a vehicle",
        write: WriteFinal = write_final,
        pause: bool = True,
        check_held: bool = True,
    ) -> StepResult:
        """The vehicle's concluded case whose write failed (``l3_pending``), tried again while the session waits
        for the vehicle's next alert (the operator's retry timer): a store or model down for longer than its own
        retries, and a vehicle silent for longer than its session state's TTL, lost the case.

        One try, straight to the store (not through its retries: the job's workers must not wait out an outage
        for cases that can wait), and only when the store answers a read: a store still down costs the try no
        summary and no embedding (when it answers, the case is summarised, checked and embedded again, as the
        summary model or the embedder may be what failed). The session comes back with the case written, still
        pending (the store or a model still down: the operator tries again later), or no longer pending when its
        summary failed the fidelity check, which no retry changes (such a summary never reaches long-term memory:
        counted as lost). A try works on a copy of the session's working memory, which a failed try would fold
        again; the session, concluded, takes no more rounds. Never raises but ``MemoryError``: a failure leaves
        the session as it was.

        A read that fails slowly (a store host that does not answer) turns the other vehicles' tries away for
        ``store_down_pause_s``; ``pause=False`` for a one-off run (``vdoctor memory write-waiting``), which
        stops at such a store itself: every call then tries, and none turns later calls away. ``check_held=False``
        for a caller that has just found the case not held (``holds_case``) itself: the try then writes it without
        reading the store for it again.
        """
        if session is None or not session.l3_pending:
            return StepResult(session=session, dedup=dedup, given=session)
        given: SessionState | StoredSession = (
            StoredSession(session.model_dump_json()) if isinstance(session, SessionState) else session
        )
        if pause and self.clock() < self._store_down_until:
            log.debug("a waiting case waits for its next try: long-term memory was down a moment ago")
            return StepResult(session=session, dedup=dedup, given=given)
        stats = RunStats()
        once = self.store_once
        try:
            live = session.load() if isinstance(session, StoredSession) else session
        except UnreadableState as e:
            # (``l3_pending`` is read from the text.) Kept, it was tried for the retries' whole horizon in vain.
            letter = set_aside_letter(vin, e, "its case, if it holds one, is not written")
            return StepResult(
                session=None, dedup=dedup, dead_letters=[letter], stats=RunStats(set_aside=1), given=given
            )
        try:
            asked = self.clock()
            try:
                held = check_held and self._case_held(once, live, read_at_once(once, live.vin, live.session_id))
            except StoreError as e:
                if pause and self.clock() - asked >= SLOW_STORE_S:
                    # A store that does not answer (a refusal is quick, and so is an error of this case's own
                    # record, which must not hold back the other vehicles' tries).
                    self._store_down_until = self.clock() + self.store_down_pause_s
                log.info("%s still waits for long-term memory, which is down: %s", live.session_id, e)
                return StepResult(session=session, dedup=dedup, given=given)
            if held:
                # Written since by ``vdoctor memory write-waiting``, or by an earlier try whose answer was lost:
                # written again, it would come back valid after a lifecycle event, or over a later case merged in.
                self.found_held(once, live)
                return StepResult(session=live, dedup=dedup, given=given)
            working = WorkingMemory(
                live.working.model_copy(deep=True),
                self.working_budget_tokens,
                self.counter,
                self.summarizer,
                self.summary_metrics,
            )
            flags = self._write_case(live, working, stats, store=once, write=write)
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - a retry's failure keeps the case waiting, as a failed write does
            log.warning("retrying the write of the case of %s failed", session.session_id, exc_info=True)
            return StepResult(session=given, dedup=dedup, given=given)
        if live.l3_written:
            log.info("wrote %s to long-term memory on a retry", live.session_id)
            stats.late_write = True
        else:
            # Neither a write (``l3_writes``) nor one failed for good (``l3_write_failures``, counted once, at the run
            # that concluded): a try.
            stats.write_ms = None
            stats.writes = 0
            stats.write_failed = False
            if L3_WRITE_FAILED in flags:
                log.info("%s is still not in long-term memory; it is tried again later", live.session_id)
            else:
                live.l3_pending = False
                stats.case_lost = True
                log.warning("%s will not reach long-term memory: %s", live.session_id, ", ".join(flags))
        return StepResult(session=live, dedup=dedup, stats=stats, given=given)

    @property
    def store_once(self) -> MemoryStore:
        """The engine's store asked once: not through its retries, which wait out an outage for minutes (the tries
        of a waiting case, which can wait)."""
        return self.store.inner if isinstance(self.store, RetryingStore) else self.store

    @staticmethod
    def _case_held(store: MemoryStore, session: SessionState, own: MemoryRecord | None) -> bool:
        """Whether long-term memory holds the concluded session's case (``holds_case``): ``own``, the record under
        its id (read by the caller), or the record it was merged into (the vehicle's history, read only when
        ``own`` does not hold it)."""
        if own is not None and holds_case(own, session):
            return True
        return merged_record(store, session.vin, session.session_id) is not None

    @staticmethod
    def found_held(store: MemoryStore, session: SessionState) -> None:
        """A waiting case that long-term memory holds already (``_case_held``): no longer waiting, and not written
        again. Not counted as a write: this job did not write it. Its session's milestones are superseded from its
        conclusion, as its write does (a write whose upsert took and whose superseding failed left them valid).
        Raises ``StoreError`` when that fails: the case then still waits."""
        if session.milestones_written > 0:
            supersede_milestones(store, session.vin, session.session_id, session.last_event_at)
        log.info("%s is in long-term memory already: it is not written again", session.session_id)
        session.l3_written, session.l3_pending = True, False

    def _write_case(
        self,
        session: SessionState,
        working: WorkingMemory,
        stats: RunStats,
        store: MemoryStore | None = None,
        write: WriteFinal = write_final,
    ) -> list[str]:
        """Summarise, check, embed and upsert a concluded case through ``store`` (the engine's by default), by
        ``write`` (the write gates', by default). Returns output flags."""
        if session.l3_written or session.conclusion is None:
            return []
        try:
            case = summarize_case(session, self.pack, self.summarizer, self.summary_metrics)
        except ModelError as e:
            # The summary model is down (after its retries): the diagnosis still goes out, flagged; the
            # case is not written (no summary of another summarizer is put in long-term memory silently).
            log.warning("could not summarise %s for long-term memory: %s", session.session_id, e)
            stats.write_failed = session.l3_pending = True
            return [SUMMARY_MODEL_FAILED, L3_WRITE_FAILED]
        # Session trigger: the whole session is compressed into its case summary.
        working.close_session(case.text)
        flags = [] if case.report.ok else ["summary_fidelity_failed"]
        if not case.report.ok:
            # Flagged in the output and counted; a failing summary never reaches L3.
            log.warning("summary of %s failed fidelity: %s", session.session_id, case.report.describe())
            return flags
        c = session.conclusion
        # Before the embedding call: the request was just read by the fidelity check, and is still in the caches.
        source = self._bounded_source(case)
        # Embedded as what a later session finds it by: the symptom as reported, codes, cause, fix, the summary's words.
        text = dense_text(session.alert_text, c.codes, c.root_cause, c.fix_action, case.text)
        try:
            vector = self._embed_record(text, stats)
        except ModelError as e:
            # The embedder is down: as a store that stays down, the case is flagged, never silently dropped.
            log.warning("could not embed %s for long-term memory: %s", session.session_id, e)
            stats.write_failed = session.l3_pending = True
            return [*flags, L3_WRITE_FAILED]
        record = MemoryRecord(
            vin=session.vin,
            session_id=session.session_id,
            series=session.series,
            opened_ts=session.opened_at,
            concluded_at=session.last_event_at,
            summary=case.text,
            summary_vec=PackedVector.packed_row(vector),
            root_cause=c.root_cause,
            fix_action=c.fix_action,
            priority=c.priority,
            dtc_codes=c.codes,
            prompt_version=SUMMARY_PROMPT_VERSION,
            source=source,
            omitted=case.omitted,
            alert_text=session.alert_text,
            embedder=embedder_id(self.embedder),
        )
        started = time.perf_counter()
        try:
            status = write(store or self.store, record, session.milestones_written > 0)
        except StoreError as e:
            # The diagnosis still goes out; the case is flagged, never silently dropped.
            log.warning("could not write %s to long-term memory: %s", session.session_id, e)
            stats.write_failed = session.l3_pending = True
            return [*flags, L3_WRITE_FAILED]
        finally:
            stats.write_ms = (time.perf_counter() - started) * 1000.0
            stats.writes += 1
        if status is WriteStatus.MERGED:
            flags.append("l3_merged")
        session.l3_written, session.l3_pending = True, False
        if case.omitted:
            # The record says what its summary could not hold (record.omitted).
            flags.append("summary_omitted")
        return flags

    @staticmethod
    def _bounded_source(case: CaseSummary) -> str:
        """What the summary was written from, for re-extraction; empty when too large to keep."""
        if case.request is None:
            return ""
        text = request_to_json(case.request)
        if len(text) > MAX_SOURCE_CHARS:
            log.warning("summary source of %d characters not kept (limit %d)", len(text), MAX_SOURCE_CHARS)
            return ""
        return text

    def _write_milestone(self, session: SessionState, alert: AlertEvent, stats: RunStats) -> list[str]:
        """A session open for more than 24 h leaves a milestone record per 24 h.

        It carries what the session knew then: its current priority and leading
        hypothesis (or that it had none yet), never a conclusion.
        """
        due = milestones_due(session.opened_at, alert.ts, session.milestones_written)
        if due <= session.milestones_written:
            return []
        summary, omitted = milestone_summary(session, due, alert.ts)
        codes = list(session.codes)
        try:
            vector = self._embed_record(dense_text(session.alert_text, codes, "", "", summary), stats)
        except ModelError as e:
            # Not written, so not counted as written: the next alert of the session tries again.
            log.warning("could not embed the milestone of %s: %s", session.session_id, e)
            stats.write_failed = True
            return [L3_WRITE_FAILED]
        try:
            record = MemoryRecord(
                vin=session.vin,
                session_id=milestone_id(session.session_id, due),
                series=session.series,
                opened_ts=session.opened_at,
                concluded_at=alert.ts,
                summary=summary,
                summary_vec=PackedVector.packed_row(vector),
                root_cause="",
                fix_action="",
                priority=session.priority,
                dtc_codes=codes,
                prompt_version=SUMMARY_PROMPT_VERSION,
                kind=RecordKind.MILESTONE,
                omitted=omitted,
                alert_text=session.alert_text,
                embedder=embedder_id(self.embedder),
            )
        except ValueError as e:  # (pydantic's ValidationError) a record the store would refuse: the alert is
            # still diagnosed, flagged, rather than the session's every later alert failing on its milestone
            log.warning("milestone of %s is not a valid record: %s", session.session_id, e)
            stats.write_failed = True
            return [L3_WRITE_FAILED]
        started = time.perf_counter()
        try:
            self.store.upsert(record)
        except StoreError as e:
            log.warning("could not write milestone of %s: %s", session.session_id, e)
            stats.write_failed = True
            return [L3_WRITE_FAILED]
        finally:
            stats.write_ms = (time.perf_counter() - started) * 1000.0
            stats.writes += 1
        session.milestones_written = due
        return ["l3_milestone"]

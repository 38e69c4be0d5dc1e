"""DiagnosisFunction: the keyed operator that holds each vehicle's L2 session.

Many vehicles are diagnosed at once; one vehicle's events run one at a time,
in arrival order. The operator thread owns all Flink state:

- ``process_element`` appends the event to the vehicle's ``pending`` list in
  keyed state (arrival order) and hands it to a ``KeyedRunPool``; a vehicle
  the pool does not know yet starts from its stored session and dedup
  snapshots, read fresh from state (workers get their own copies; the
  session as its stored text, which the engine parses only for an alert
  that continues it: ``StoredSession``).
- Worker threads run ``DiagnosisEngine.on_event`` as a pure function of
  (snapshots, event) plus model/store calls, and chain a vehicle's next event
  onto the previous result themselves. They never touch Flink state and never
  read the current key. One event's failure is its result (a flagged
  diagnosis, or a dead letter: ``DiagnosisEngine.on_event``), so a vehicle's
  bad event never fails the task, nor fails it again at every restore from
  ``pending``; what still raises (``RunFailed``) is an interrupt or a fault
  of this operator, and fails the task.
- One processing-time timer per subtask ticks every ``TICK_MS`` while the
  pool has work. A tick drains what finished since the last one (the pool
  queues finished vehicles; nothing is polled per vehicle), and for each
  finished vehicle sets the keyed state backend's current key to it
  (``operators.keys``), stores the newest snapshots, drops the finished events
  from ``pending`` and emits their results in order; then it switches back.
  So the operator thread wakes ~50 times a second however many runs are in
  flight, and each wake applies everything that is ready in one go.
- ``pending`` holds every event whose result is not applied yet, so a
  checkpoint taken with runs in flight re-runs them after a restore (L3
  upserts are idempotent by (vin, session_id)). After a restore the first
  callback lists the vehicles with ``pending`` state and restarts their
  chains (thread mode); process mode cannot list keys, so there a restored
  vehicle restarts at its next event or at the end of a bounded input.
- ``concurrency`` 1 runs each event inline in ``process_element`` instead:
  one at a time in arrival order across all vehicles, so a replay where one
  vehicle's verified case should inform another's follows the file's order.
  With ``runtime.deterministic`` the pool gives the same results with runs in
  flight: it admits runs in the order ``vdoctor.replay_order`` sets.
- Bounded input: processing-time timers still pending at the end of input
  never fire (NOTES.md), so every vehicle with work also has an event-time
  timer at Long.MAX_VALUE (deleted when its work is done); the final
  watermark fires the first of them, and the operator applies every
  vehicle's remaining runs there as they finish.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pyflink.common import Time, Types
from pyflink.datastream import TimeDomain
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor

from operators import logs
from operators.code_identity import enter_job
from operators.keys import KeySwitch
from operators.metrics import DiagnosisMetrics
from operators.parse import DEAD_LETTER, DIAGNOSIS
from vdoctor.assembly import build_engine
from vdoctor.diagnosis import MAX_FAILURE_CHARS, DiagnosisEngine, RunStats, failure_text
from vdoctor.events import EVENT_ADAPTER, describe_validation_error
from vdoctor.malloc_trim import start_trimming
from vdoctor.memory.session import DedupState, SessionState, StoredDedup, StoredSession, UnreadableState
from vdoctor.records import DeadLetter, utf8_writable
from vdoctor.replay_order import replay_admission
from vdoctor.runs import KeyedRunPool, tune_gc_for_runs
from vdoctor.scrub import settings_secrets
from vdoctor.settings import worker_settings

# Flink's TTL runs on processing time and only bounds the state's size; the
# session's expiry proper is judged on event time inside SessionState. The
# session state's TTL is a setting (``runtime.state_ttl_s``, 48 h by default).
# Dedup ids must outlive a session so that a late replay is still caught.
DEDUP_TTL_S = 30 * 24 * 3600
# The completion tick: finished runs wait at most this long to be stored and
# emitted (small against 0.3-5 s model calls); one timer callback per tick
# per subtask, however many runs are in flight.
TICK_MS = 20
# At the end of a bounded input the operator waits for finished runs in
# slices of this length (it wakes at once when one finishes).
END_WAIT_S = 1.0
# The final watermark of a bounded input; an event-time timer here fires only at end of input.
END_OF_INPUT = 2**63 - 1
# A vehicle's case whose write failed (``SessionState.l3_pending``) is tried again ``runtime.case_retry_s``
# after, and again after each failed try, while its session waits for the vehicle's next alert, for at most
# ``CASE_RETRY_HORIZON_MS`` from its first try's schedule. One retry timer per vehicle: its time (and the
# schedule's start) is in the ``case_retry`` state, and a timer of another time is an old one, ignored. The
# next try's timer is registered as a try starts (a checkpoint taken while it runs holds it), and a retry
# timer is off the tick's grid by ``RETRY_MARK``, which tells the two apart.
RETRY_MARK = 1
CASE_RETRY_HORIZON_MS = 7 * 24 * 3600 * 1000
# The item of such a try in a vehicle's chain and its pending list, in place of an event's JSON (which the
# parse stage always writes as an object, ``{...}``).
RETRY_CASE = "retry-case"
RETRY_ITEM = (RETRY_CASE, "")
# Its entry in the pending list's JSON: outside any string (where a quote is escaped), so no event's text holds it.
RETRY_ENTRY = json.dumps(list(RETRY_ITEM))

Item = tuple[str, str]  # (event json, raw line)
# A vehicle's session: as stored (parsed by the engine only if its event continues it), live, or none.
Carry = tuple[SessionState | StoredSession | None, DedupState | StoredDedup]

log = logging.getLogger(__name__)


@dataclass
class Applied:
    """A finished run, ready to be stored and emitted on the operator thread."""

    session_json: str | None
    dedup_json: str
    outputs: list[tuple[str, str]] = field(default_factory=list)
    llm_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_failures: int = 0
    run_latency_ms: float | None = None
    model_latency_ms: float | None = None
    dead_letters: int = 0
    duplicates: int = 0  # the same event sent again, dropped
    stats: RunStats = field(default_factory=RunStats)
    # False for a try of a waiting case's write (``RETRY_ITEM``): no event, no run counted.
    event: bool = True
    # The vehicle's case waits for its write after this run (``SessionState.l3_pending``): its retry is due.
    case_pending: bool = False


def _refused(carry: Carry, raw: str, error: str) -> Applied:
    """An event not processed: its dead letter, and the vehicle's state as it was before it."""
    session, dedup = carry
    letter = DeadLetter(raw=raw, error=error, stage="process")
    return Applied(
        session_json=session.model_dump_json() if session is not None else None,
        dedup_json=dedup.model_dump_json(),
        dead_letters=1,
        outputs=[(DEAD_LETTER, letter.model_dump_json())],
    )


_JSON_KINDS = {dict: "an object", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def _state_json(value: object) -> str:
    """``value``'s JSON for keyed state, read back from state: a lone surrogate (half an emoji, from a JSON escape in
    a state a release before or damage wrote) stays an escape, as the state's string coder cannot write it (it
    failed the job at every restart); the rest as written."""
    text = json.dumps(value, ensure_ascii=False)
    return text if utf8_writable(text) else json.dumps(value)


@dataclass
class PendingRead:
    """A vehicle's pending list as this release reads it: the items it can read, and what it cannot as one text
    (None: every entry read) with what is wrong with it. ``whole``: the text is no JSON list, and all of it is
    that; else the entries that are no pair of texts (an event's JSON and its line), as a JSON list."""

    items: list[Item]
    unreadable: str | None = None
    why: str = ""
    whole: bool = False


def read_pending(text: str) -> PendingRead:
    """A vehicle's pending list as its state holds it (a JSON list of [event JSON, line] pairs)."""
    try:
        entries = json.loads(text)
    except (ValueError, RecursionError) as e:
        return PendingRead([], text, f"not JSON: {e}", whole=True)
    if not isinstance(entries, list):
        return PendingRead([], text, f"JSON {_JSON_KINDS.get(type(entries), 'null')}, not a list", whole=True)
    items: list[Item] = []
    unreadable: list[object] = []
    for entry in entries:
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], str):
            items.append((entry[0], entry[1]))
        else:
            unreadable.append(entry)
    if not unreadable:
        return PendingRead(items)
    n = len(unreadable)
    why = (
        f"{n} of its {len(entries)} entries {'is' if n == 1 else 'are'} no pair of texts, an event's JSON and its line"
    )
    return PendingRead(items, json.dumps(unreadable, ensure_ascii=False), why)


_RETRY_SCHEDULE = re.compile(r"(-?[0-9]+) (-?[0-9]+)")


def read_retry_schedule(text: str) -> tuple[int, int] | None:
    """A vehicle's retry schedule as its state holds it, "<next try's timer (ms)> <when the tries began (ms)>";
    None when it is not that."""
    found = _RETRY_SCHEDULE.fullmatch(text)
    return None if found is None else (int(found[1]), int(found[2]))


def _ttl(seconds: float) -> StateTtlConfig:
    return (
        StateTtlConfig.new_builder(Time.milliseconds(int(seconds * 1000)))
        .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
        .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
        # The default background cleanup includes a RocksDB compaction-filter
        # strategy whose Python side builds a java Duration over the py4j
        # gateway; a standalone cluster's TaskManager has none in thread mode
        # and the operator fails to open. Name the strategies explicitly instead.
        .disable_cleanup_in_background()
        .cleanup_incrementally(10, False)
        .cleanup_full_snapshot()
        .build()
    )


def next_tick_ms(now_ms: int) -> int:
    """The first point of the ``TICK_MS`` grid at least one tick after ``now_ms``."""
    return int(math.ceil((now_ms + TICK_MS) / TICK_MS) * TICK_MS)


class DiagnosisFunction(KeyedProcessFunction):  # type: ignore[misc]
    """Keyed by VIN: (vin, event json, raw) -> (kind, json) diagnoses and dead letters."""

    def __init__(self, settings: dict[str, Any], code: str | None = None) -> None:
        # ``Settings.for_workers()``: no API key (nor, for a cluster, any URL's password). The operator is
        # pickled and shipped to the workers; what was left out is read in open() on the worker.
        self._settings = settings
        # The identity of the code the job was built from (``code_identity.code_id``), checked in open().
        self._code = code
        self.engine: DiagnosisEngine | None = None
        self.pool: KeyedRunPool[Item, Applied] | None = None
        self.inline = False
        self.keys: KeySwitch | None = None
        # Key handles of the vehicles with work in the pool (thread mode: the
        # backend's own key objects, so no key is built per apply).
        self._handles: dict[str, Any] = {}
        self._tick_at: int | None = None
        self._retry_ms = 0  # runtime.case_retry_s
        self._resumed = False
        # Thread mode at concurrency 1, once the restored vehicles' pending events have run: no key has any.
        self._none_pending = False
        # The pending list of each vehicle in the pool, as the JSON texts of its entries: the
        # state's value is their join, so an event is encoded once, not the whole list per change.
        self._pending_json: dict[str, list[str]] = {}
        self._leave_trimming: Callable[[], None] | None = None
        self._closed = False
        # The dead letters of the operator's own states found unreadable (``_set_aside``), emitted at the end of the
        # callback that found them.
        self._aside: list[tuple[str, str]] = []

    def open(self, runtime_context: RuntimeContext) -> None:
        if self._code is not None:
            enter_job(self._code)  # before any import: an earlier job's packages may point at deleted files
        settings = worker_settings(self._settings, os.environ)
        logs.configure(settings.runtime.log_level, settings_secrets(settings))
        self.engine = build_engine(settings)
        self._leave_trimming = start_trimming(settings.runtime.malloc_trim_s)
        self.inline = settings.runtime.concurrency == 1
        # At most half the state's TTL apart: each try writes the session's state, which keeps it.
        self._retry_ms = int(min(settings.runtime.case_retry_s, settings.runtime.state_ttl_s / 2) * 1000)
        self.engine.store_down_pause_s = min(self.engine.store_down_pause_s, self._retry_ms / 2000)
        if not self.inline:
            tune_gc_for_runs()
            admission = None
            if settings.runtime.deterministic:
                admission = replay_admission(store_was_empty=self.engine.store.count() == 0)
            # More runs than model slots: some do their memory work while the others keep every slot busy.
            runs = settings.runtime.runs_in_flight()
            self.pool = KeyedRunPool(runs, self._step, name="diagnosis", admission=admission)
        session = ValueStateDescriptor("session", Types.STRING())
        session.enable_time_to_live(_ttl(settings.runtime.state_ttl_s))
        dedup = ValueStateDescriptor("dedup", Types.STRING())
        dedup.enable_time_to_live(_ttl(DEDUP_TTL_S))
        # No TTL: events waiting for their run must never expire unseen.
        pending = ValueStateDescriptor("pending", Types.STRING())
        self.session_state = runtime_context.get_state(session)
        self.dedup_state = runtime_context.get_state(dedup)
        self.pending_state = runtime_context.get_state(pending)
        # "<next try's timer (ms)> <when the tries began (ms)>" while a waiting case has its retry scheduled. No TTL:
        # a retry timer is pending while it is set, and the timer clears it.
        self.retry_state = runtime_context.get_state(ValueStateDescriptor("case_retry", Types.STRING()))
        # Inline too: a checkpoint of a run at a concurrency above 1 may hold events waiting in the pool.
        self.keys = KeySwitch(runtime_context)
        self._metrics(runtime_context)

    def _metrics(self, runtime_context: RuntimeContext) -> None:
        pool, engine = self.pool, self.engine
        gate = getattr(engine.model, "gate", None) if engine else None  # build_engine's model is gated
        self.metrics = DiagnosisMetrics(
            runtime_context.get_metrics_group(),
            in_flight=lambda: pool.in_flight if pool else 0,
            queued=lambda: pool.queued if pool else 0,
            summary_counts=lambda: engine.summary_metrics.as_dict() if engine else {},
            waiting=lambda: gate.waiting if gate is not None else 0,
        )

    def close(self) -> None:
        self._closed = True
        if self.pool is not None:
            self.pool.close()
        if self.engine is not None:
            self.engine.close()
        if self._leave_trimming is not None:
            self._leave_trimming()

    # -- worker threads: pure functions of (snapshots, event) ---------------------

    def _step(self, vin: str, carry: Carry, item: Item) -> tuple[Carry, Applied]:
        if self.engine is None:
            raise RuntimeError("DiagnosisFunction.open() was not called")
        session, dedup = carry
        event_json, raw = item
        if event_json == RETRY_CASE:
            return self._retry_case(vin, carry)
        try:
            event = EVENT_ADAPTER.validate_json(event_json)
        except ValidationError as e:
            # An event the parse stage read, that this release's model refuses when it runs: one a checkpoint of
            # an earlier release held waiting, read by rules since made stricter. Raised, it failed the job at
            # every restart; it is a dead letter, and the vehicle's state stays as it was.
            return carry, _refused(carry, raw, f"no longer read as an event: {describe_validation_error(e)}")
        result = None
        try:
            result = self.engine.on_event(session, dedup, event, raw)
            applied = Applied(
                session_json=result.session.model_dump_json() if result.session is not None else None,
                dedup_json=result.dedup.model_dump_json(),
                dead_letters=len(result.dead_letters),
                duplicates=int(result.duplicate and not result.dead_letters),
                stats=result.stats,
                # A write that failed just now (another pending case has its retry due already).
                case_pending=isinstance(result.session, SessionState)
                and result.session.l3_pending
                and result.stats.write_failed,
            )
            for d in result.diagnoses:
                applied.outputs.append((DIAGNOSIS, d.model_dump_json()))
                applied.llm_calls += d.llm_calls
                applied.tool_calls += d.tool_calls
                applied.prompt_tokens += d.prompt_tokens
                applied.completion_tokens += d.completion_tokens
                applied.model_failures += "model_failed" in d.flags
                applied.run_latency_ms, applied.model_latency_ms = d.latency_ms, d.model_latency_ms
            applied.outputs += [(DEAD_LETTER, x.model_dump_json()) for x in result.dead_letters]
        except MemoryError:
            raise  # (the worker's, not the event's)
        except Exception as e:  # noqa: BLE001 - the last line: one event's failure is its dead letter
            # What the engine's own catch does not cover (writing the new state and outputs as JSON): raised, it
            # failed the job on the same event at every restart (an audit: a model's half emoji in a session).
            # The vehicle's state stays as it was before the event (a live session, which an alert's run changes
            # in place, as its text from before the run), and the event is no duplicate if it comes again.
            log.warning("event of %s failed after its run; it goes to the dead letters", vin, exc_info=True)
            # A run that set a state aside had its letter among the outputs that failed: the state is kept as it
            # was (the next event sets it aside again), not lost with them.
            as_given = result is None or result.stats.set_aside > 0
            before = session if as_given else result.given
            ids = dedup if as_given else result.dedup
            if result is None or not result.duplicate:  # (a duplicate's id is the processed event's)
                with contextlib.suppress(UnreadableState):  # (ids the run did not get to set aside: the next will)
                    ids.discard(event.event_id)
            kept: Carry = (before, ids)
            return kept, _refused(kept, raw, failure_text(e))
        return (result.session, result.dedup), applied

    def _retry_case(self, vin: str, carry: Carry) -> tuple[Carry, Applied]:
        """A try of the vehicle's waiting case (``DiagnosisEngine.retry_case``), on a worker thread."""
        if self.engine is None:
            raise RuntimeError("DiagnosisFunction.open() was not called")
        session, dedup = carry
        result = None
        try:
            result = self.engine.retry_case(session, dedup, vin)
            after = result.session
            applied = Applied(
                session_json=after.model_dump_json() if after is not None else None,
                dedup_json=dedup.model_dump_json(),
                outputs=[(DEAD_LETTER, x.model_dump_json()) for x in result.dead_letters],
                dead_letters=len(result.dead_letters),
                stats=result.stats,
                event=False,
                case_pending=after is not None and after.l3_pending,
            )
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - the session stays as it was before the try, its case waiting
            log.warning("a try of a waiting case failed after its run", exc_info=True)
            before = session if result is None else result.given
            kept = Applied(
                session_json=before.model_dump_json() if before is not None else None,
                dedup_json=dedup.model_dump_json(),
                event=False,
                case_pending=True,
            )
            return (before, dedup), kept
        return (after, dedup), applied

    # -- operator thread: the only one touching state ------------------------------

    def _pool(self) -> KeyedRunPool[Item, Applied]:
        if self.pool is None:
            raise RuntimeError("DiagnosisFunction.open() was not called before use")
        return self.pool

    def _pending(self, vin: str) -> list[Item]:
        """The current key's pending items. What of them this release cannot read (a release that wrote them
        otherwise, or damage) is set aside to the dead letters, and the rest is stored back: raised, it failed
        the job at the first callback that read it (after a restore in thread mode, the subtask's first, whichever
        vehicle's it was), again at every restart."""
        stored = self.pending_state.value()
        if not stored:
            return []
        read = read_pending(stored)
        if read.unreadable is not None:
            if read.whole:
                what, instead = (
                    f"the pending events of {vin}",
                    "the events it held, if any, do not run (send them again)",
                )
            else:
                what = f"entries of the pending events of {vin}"
                instead = "the vehicle's other pending events run" if read.items else "no other events were pending"
            self._set_aside(what, read.unreadable, read.why, instead)
            self._pending_json.pop(vin, None)
            if read.items:
                self.pending_state.update(_state_json(read.items))
            else:
                self.pending_state.clear()
        return read.items

    def _set_aside(self, what: str, text: str, why: str, instead: str) -> None:
        """A state of this operator's that it cannot read: its text to a dead letter, emitted at the end of the
        callback (``_aside``), counted as a state set aside (``set_aside_letter`` for the engine's)."""
        if len(why) > MAX_FAILURE_CHARS:
            why = why[:MAX_FAILURE_CHARS] + "…"
        reason = f"{what} in the diagnosis operator's state cannot be read by this release ({why})"
        log.error("%s: set aside to the dead letters; %s", reason, instead)
        self._aside.append(self._process_letter(text, f"{reason}: set aside here, its text as raw; {instead}"))
        self.metrics.states_set_aside.inc()

    def _process_letter(self, raw: str, error: str) -> tuple[str, str]:
        """A ``process`` dead letter of this operator's own (not an event's run), counted, as its output."""
        self.metrics.process_dead_letters.inc()
        return DEAD_LETTER, DeadLetter(raw=raw, error=error, stage="process").model_dump_json()

    def _take_aside(self) -> list[tuple[str, str]]:
        out, self._aside = self._aside, []
        return out

    def _pending_entries(self, vin: str) -> list[str]:
        """The current key's pending entries as JSON texts (kept while the vehicle is in the pool)."""
        entries = self._pending_json.get(vin)
        if entries is None:
            entries = [_state_json(p) for p in self._pending(vin)]
            self._pending_json[vin] = entries
        return entries

    def _store_pending(self, vin: str, entries: list[str]) -> None:
        if entries:
            self._pending_json[vin] = entries
            self.pending_state.update("[" + ",".join(entries) + "]")
        else:
            self._pending_json.pop(vin, None)
            self.pending_state.clear()

    def _carry_from_state(self) -> Carry:
        stored = self.session_state.value()
        session = StoredSession(stored) if stored else None
        dedup_raw = self.dedup_state.value()
        # Edited as text, not parsed: a busy vehicle's ids are ~90 KB of JSON (``StoredDedup``).
        dedup = StoredDedup(dedup_raw) if dedup_raw else DedupState()
        return session, dedup

    def _start_from_state(self, vin: str, items: list[Item], ctx: KeyedProcessFunction.Context) -> None:
        """Start the current vehicle's chain from its stored state, with its end-of-input timer."""
        self._pool().start(vin, self._carry_from_state(), items)
        ctx.timer_service().register_event_time_timer(END_OF_INPUT)

    def _switch(self) -> KeySwitch:
        if self.keys is None:
            raise RuntimeError("DiagnosisFunction.open() was not called before use")
        return self.keys

    def _restored_keys(self) -> Iterator[tuple[str, Any]]:
        """Once per start: each vehicle restored with events pending, its key current while the caller works on
        it (thread mode; process mode cannot list keys: nothing); back to the caller's key after."""
        if self._resumed:
            return
        self._resumed = True
        keys = self._switch()
        if not keys.can_list_keys:
            return
        home = keys.current()
        try:
            for vin, handle in keys.keys_with("pending"):
                keys.switch(handle)
                yield vin, handle
        finally:
            keys.switch(home)
        self._none_pending = self.inline  # (the pool writes pending; inline runs write none)

    def _resume(self, ctx: KeyedProcessFunction.Context) -> None:
        """Once per start: restart the chains of vehicles restored with events still pending (thread mode)."""
        if self._resumed:
            return
        for vin, handle in self._restored_keys():
            pending = self._pending(vin)
            if pending and not self._pool().knows(vin):
                self._handles[vin] = handle
                self._start_from_state(vin, pending, ctx)
        self._ensure_tick(ctx)

    def _run_inline(self, vin: str, items: list[Item], ctx: KeyedProcessFunction.Context) -> list[tuple[str, str]]:
        """Run the current vehicle's events here, one after the other (concurrency 1), after any it has pending.

        Events pending in state come from a checkpoint of a run at a concurrency above 1 that had them
        waiting in its pool: they run first, in their order, and leave pending once they are stored. Once every
        restored vehicle's have run (thread mode), none is left to look for: this mode writes none.
        """
        pending = [] if self._none_pending else self._pending(vin)
        todo = [*pending, *items]
        if not todo:
            return []
        carry, done = self._carry_from_state(), []
        for item in todo:
            carry, applied = self._step(vin, carry, item)
            done.append(applied)
        if pending:
            self.pending_state.clear()
            log.info("ran %d event(s) of %s restored waiting in the run pool", len(pending), vin)
        return self._apply(done, ctx, vin)

    def _resume_inline(self, ctx: KeyedProcessFunction.Context) -> list[tuple[str, str]]:
        """Once per start at concurrency 1: run the events every vehicle was restored with pending (thread mode;
        in process mode, which cannot list keys, a vehicle's run when its next event or the end of input comes).

        Without this a job resumed with ``--concurrency 1`` from a checkpoint of a run at a higher one failed at
        its first restored tick timer (no run pool to drain), again at every restart, until its restart strategy
        gave up; and a vehicle's later events ran ahead of the ones it had waiting.
        """
        if self._resumed:
            return []
        out: list[tuple[str, str]] = []
        for vin, _ in self._restored_keys():
            out += self._run_inline(vin, [], ctx)
        return out

    def _ensure_tick(self, ctx: KeyedProcessFunction.Context) -> None:
        """One tick timer pending while the pool has work (registered under whichever key is current)."""
        if self._tick_at is not None or self._pool().idle:
            return
        timers = ctx.timer_service()
        self._tick_at = next_tick_ms(timers.current_processing_time())
        timers.register_processing_time_timer(self._tick_at)

    def process_element(
        self, value: tuple[str, str, str, str], ctx: KeyedProcessFunction.Context
    ) -> Iterator[tuple[str, str]]:
        yield from self._element(value, ctx)
        if self._aside:
            yield from self._take_aside()

    def _element(
        self, value: tuple[str, str, str, str], ctx: KeyedProcessFunction.Context
    ) -> Iterator[tuple[str, str]]:
        _, vin, event_json, raw = value
        if self.inline:
            yield from self._resume_inline(ctx)
            yield from self._run_inline(vin, [(event_json, raw)], ctx)
            self.metrics.refresh()
            return
        self._resume(ctx)
        self._submit(vin, (event_json, raw), ctx)
        self._ensure_tick(ctx)
        self.metrics.refresh()

    def _submit(self, vin: str, item: Item | None, ctx: KeyedProcessFunction.Context) -> None:
        """Add an item to the current vehicle's chain in the pool, and to its pending list (None: no item, the
        chain of a vehicle restored with items pending started if it is not running)."""
        pool = self._pool()
        if item is None:
            if not pool.knows(vin) and (pending := self._pending(vin)):
                self._handles[vin] = self._switch().current()
                self._start_from_state(vin, pending, ctx)
            return
        entry = json.dumps(list(item), ensure_ascii=False)
        if pool.knows(vin):
            self._store_pending(vin, [*self._pending_entries(vin), entry])
            pool.add(vin, item)
        else:
            # New work, or a vehicle restored with runs still to do: all of pending, in order.
            pending = self._pending(vin)
            self._store_pending(vin, [*(_state_json(p) for p in pending), entry])
            self._handles[vin] = self._switch().current()
            self._start_from_state(vin, [*pending, item], ctx)

    def _retry_item(self) -> Item | None:
        """The try to add for the current vehicle: none when its pending list holds one (restored from a checkpoint
        taken while it ran, or still queued behind the vehicle's runs)."""
        return None if RETRY_ENTRY in (self.pending_state.value() or "") else RETRY_ITEM

    def _retry_due(
        self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext
    ) -> tuple[bool, list[tuple[str, str]]]:
        """Whether this timer is the current vehicle's retry timer and its case still waits (and its tries have
        not gone on for ``CASE_RETRY_HORIZON_MS``): then the next try's timer is registered now, before this try.
        With the outputs to emit: at the horizon, the waiting session's dead letter (``_horizon_letter``)."""
        if ctx.time_domain() != TimeDomain.PROCESSING_TIME or timestamp % TICK_MS != RETRY_MARK:
            return False, []
        scheduled = self._retry_schedule(ctx, ctx.get_current_key())
        if scheduled is None or scheduled[0] != timestamp:
            return False, []  # an old timer: the vehicle's retry is another, or none
        stored = self.session_state.value()
        if not stored or not StoredSession(stored).l3_pending:
            self.retry_state.clear()  # written meanwhile, or the session is gone
            return False, []
        began = scheduled[1]
        timers = ctx.timer_service()
        now = timers.current_processing_time()
        if now - began >= CASE_RETRY_HORIZON_MS:
            self.retry_state.clear()
            if self._retry_item() is None:
                return False, []  # a try still queued, or restored: its failure gives the letter (``_apply``)
            return False, [self._horizon_letter(ctx.get_current_key(), stored)]
        at = next_tick_ms(now + self._retry_ms) + RETRY_MARK
        timers.register_processing_time_timer(at)
        self.retry_state.update(f"{at} {began}")
        return True, []

    def _horizon_letter(self, vin: str, stored: str) -> tuple[str, str]:
        """A case tried for ``CASE_RETRY_HORIZON_MS`` in vain: no more tries, and its session's text (conclusion,
        key facts, working memory) to the dead letters, so that a vehicle silent past its state's TTL loses it to
        no one. The case still waits for the vehicle's next alert, which tries it once more."""
        days = CASE_RETRY_HORIZON_MS // 86_400_000
        log.warning(
            "the waiting case of %s was tried for %d days and is still not in long-term memory; no more tries: its "
            "session goes to the dead letters, and the case waits for the vehicle's next alert within its state's TTL",
            vin, days,
        )  # fmt: skip
        return self._process_letter(
            stored,
            f"the concluded case of {vin} was tried for {days} days and is still not in long-term memory: no more "
            "tries; its session's text is here as raw, and the vehicle's next alert, within its state's TTL, tries "
            "the case once more (vdoctor memory write-waiting writes it from this letter)",
        )

    def _retry_schedule(self, ctx: KeyedProcessFunction.Context, vin: str) -> tuple[int, int] | None:
        """The current vehicle's retry schedule (its next try's timer, when its tries began), None when it has none.

        One this release cannot read is set aside (``_set_aside``; raised, it failed the job at the vehicle's next
        retry timer or failed write, again at every restart): while the vehicle's case waits, a schedule begins
        now, as for a case whose write has just failed, and the timers of the one set aside are old ones."""
        text = self.retry_state.value()
        if text is None:
            return None
        if (scheduled := read_retry_schedule(text)) is not None:
            return scheduled
        what, why = f"the case retry schedule of {vin}", "not two whole numbers of milliseconds"
        stored = self.session_state.value()
        if not stored or not StoredSession(stored).l3_pending:
            self.retry_state.clear()
            self._set_aside(what, text, why, "the vehicle has no case waiting for its write, so no retry")
            return None
        timers = ctx.timer_service()
        now = timers.current_processing_time()
        at = next_tick_ms(now + self._retry_ms) + RETRY_MARK
        timers.register_processing_time_timer(at)
        self.retry_state.update(f"{at} {now}")
        self._set_aside(
            what,
            text,
            why,
            f"the vehicle's waiting case is tried again from now, for up to {CASE_RETRY_HORIZON_MS // 86_400_000} days",
        )
        return at, now

    def _schedule_retry(self, ctx: KeyedProcessFunction.Context, vin: str, failed_now: bool) -> None:
        """The current vehicle's retry of its waiting case, ``runtime.case_retry_s`` from now (off the tick's grid),
        unless one is scheduled. ``failed_now``: an event's run left a case waiting: the tries' horizon starts
        again, as that may be another case than the one tried so far. A try that failed schedules nothing: its
        timer registered the next as it began, unless the horizon had passed (a try queued, or restored from a
        checkpoint taken while it ran, finishing after that must not start the horizon again)."""
        scheduled = self._retry_schedule(ctx, vin)
        timers = ctx.timer_service()
        now = timers.current_processing_time()
        if scheduled is not None:
            if failed_now:
                self.retry_state.update(f"{scheduled[0]} {now}")
            return
        if not failed_now:
            return
        at = next_tick_ms(now + self._retry_ms) + RETRY_MARK
        timers.register_processing_time_timer(at)
        self.retry_state.update(f"{at} {now}")

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[tuple[str, str]]:
        yield from self._timer(timestamp, ctx)
        if self._aside:
            yield from self._take_aside()

    def _timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[tuple[str, str]]:
        if self._closed:
            # PyFlink fires a tick registered before the end of input after close(): the pool and the engine
            # are gone, and every run was drained at the final watermark. (Its metrics refresh read the
            # stopped malloc trimmer's figures as 0.)
            return
        if self.inline:
            # Timers of a run at a concurrency above 1, restored (this one registers none but retries): its tick
            # has no pool to drain, and a vehicle's end-of-input timer runs what it has pending.
            # (Whether a try is due, and whether pending holds one, asked before the restored items run.)
            due, out = self._retry_due(timestamp, ctx)
            yield from out
            item = self._retry_item() if due else None
            yield from self._resume_inline(ctx)
            yield from self._run_inline(ctx.get_current_key(), [] if item is None else [item], ctx)
            self.metrics.refresh()
            return
        pool = self._pool()
        self._resume(ctx)
        due, out = self._retry_due(timestamp, ctx)
        yield from out
        if due:
            self._submit(ctx.get_current_key(), self._retry_item(), ctx)
        if ctx.time_domain() == TimeDomain.EVENT_TIME:
            # The final watermark: nothing more will arrive. A vehicle restored
            # in process mode (which cannot list keys) starts here.
            vin = ctx.get_current_key()
            if not pool.knows(vin):
                pending = self._pending(vin)
                if pending:
                    self._handles[vin] = self._switch().current()
                    pool.start(vin, self._carry_from_state(), pending)
            while not pool.idle:
                pool.wait_finished(END_WAIT_S)
                yield from self._drain(ctx)
                self.metrics.refresh()
            return
        if timestamp == self._tick_at:
            self._tick_at = None
        yield from self._drain(ctx)
        self._ensure_tick(ctx)
        self.metrics.refresh()

    def _drain(self, ctx: KeyedProcessFunction.Context) -> list[tuple[str, str]]:
        """Store and emit every vehicle's finished runs, each under its own key; back to the timer's key after."""
        finished = self._pool().drain()
        if not finished:
            return []
        keys = self._switch()
        home = keys.current()
        out: list[tuple[str, str]] = []
        try:
            for vin, done in finished:
                handle = self._handles.get(vin)
                keys.switch(handle if handle is not None else keys.handle(vin))
                out += self._apply(done, ctx, vin, pooled=True)
                if not self._pool().knows(vin):
                    self._handles.pop(vin, None)
                    ctx.timer_service().delete_event_time_timer(END_OF_INPUT)
        finally:
            keys.switch(home)
        return out

    def _apply(
        self, done: list[Applied], ctx: KeyedProcessFunction.Context, vin: str, pooled: bool = False
    ) -> list[tuple[str, str]]:
        """Store the newest snapshots of the current key (``vin``: not always the context's, which is the key of the
        callback's element or timer), drop its finished events from pending (``pooled``: runs of the pool); the
        outputs. A case left waiting for its write has its retry scheduled."""
        if not done:
            return []
        last = done[-1]
        if last.session_json is None:
            self.session_state.clear()
        else:
            self.session_state.update(last.session_json)
        self.dedup_state.update(last.dedup_json)
        if pooled:  # the finished events leave pending
            self._store_pending(vin, self._pending_entries(vin)[len(done) :])
        out: list[tuple[str, str]] = []
        if any(applied.case_pending for applied in done):
            failed_now = any(a.case_pending and a.event for a in done)
            if not failed_now and last.case_pending and not last.event and self._retry_schedule(ctx, vin) is None:
                # A try that failed after the horizon passed (queued, or restored, when it did): the last one.
                out.append(self._horizon_letter(vin, last.session_json or ""))
            self._schedule_retry(ctx, vin, failed_now=failed_now)
        for applied in done:
            self.metrics.record(applied)
            out += applied.outputs
        return out

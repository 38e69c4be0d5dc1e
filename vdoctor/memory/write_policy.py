"""What may enter long-term memory, and how a case is merged, milestoned and verified.

Gates (DESIGN.md §4, seed 000 §8.4):
- only CONCLUDED sessions write a final record; a session that never concludes
  writes none, and no intermediate guess is ever stored;
- the same vehicle with the same root cause within 30 days updates the
  existing record instead of adding a near-copy: the newest case's summary
  and conclusion replace the old, the merged session ids are kept, and the
  recheck result is reset (a fault that came back is not verified any more);
  a case that concluded before the newest record of its cause (delivered out of
  order) merges into the newest of its cause within the 30 days before it, as it
  would have in order (keeping a verdict given since it concluded, as that
  recheck, in order, would have come after it), and a case run again leaves
  a record that has since taken in a later case as it is (README, *Write policy*:
  what is not yet as in order);
- a session open longer than 24 h also writes milestone records (kind
  ``milestone``: facts so far, no root cause), superseded (marked invalid,
  kept for audit) when the session's final record is written;
- a recheck names a session; when that session was merged into an earlier
  record, the recheck lands on that record.

Every write carries its event time: a case its conclusion's (``concluded_at``),
a recheck its own ``ts``, a superseded milestone the final record's
conclusion. The store keeps the version a merge replaces (``stores.base``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum

from vdoctor.records import MemoryRecord, RecordKind
from vdoctor.stores.base import MemoryStore, stale_recheck

# Same fault again within a month is the same case, not new experience.
DEDUP_WINDOW = timedelta(days=30)
# A session open this long leaves a milestone per period, so its progress
# survives in long-term memory even if it never concludes.
MILESTONE_INTERVAL = timedelta(hours=24)
MILESTONE_SEPARATOR = "-m"


class WriteStatus(StrEnum):
    WRITTEN = "written"
    MERGED = "merged"


def milestone_id(session_id: str, n: int) -> str:
    return f"{session_id}{MILESTONE_SEPARATOR}{n}"


def is_milestone_id(session_id: str) -> bool:
    """Whether ``session_id`` names a milestone (``milestone_id``): a session's id ends in its opening time."""
    head, sep, n = session_id.rpartition(MILESTONE_SEPARATOR)
    return bool(head and sep and n.isascii() and n.isdigit())


def milestones_due(opened_at: datetime, now: datetime, written: int) -> int:
    """How many milestones a session opened at ``opened_at`` should have written by ``now``."""
    return max(written, int((now - opened_at) / MILESTONE_INTERVAL))


def supersede_milestones(
    store: MemoryStore, vin: str, session_id: str, at: datetime, invalid_later: bool = False
) -> int:
    """Set the session's milestones invalid from ``at`` (its final record's conclusion): the valid ones, and with
    ``invalid_later`` those set invalid after ``at`` as well."""
    prefix = session_id + MILESTONE_SEPARATOR
    stale = [
        r
        for r in store.history(vin)
        if r.kind is RecordKind.MILESTONE
        and r.session_id.startswith(prefix)
        and (r.valid or (invalid_later and r.invalid_ts is not None and r.invalid_ts > at))
    ]
    if stale:
        store.upsert_many([r.model_copy(update={"valid": False, "invalid_ts": at}) for r in stale])
    return len(stale)


def write_final(store: MemoryStore, record: MemoryRecord, had_milestones: bool = True) -> WriteStatus:
    """Write a concluded case through the gates: merge into a recent same-cause record, or add it.

    ``had_milestones=False`` (a session shorter than 24 h, the usual case) skips
    looking for milestones to supersede: one store read less per concluded case.
    """
    if record.kind is not RecordKind.FINAL:
        raise ValueError(f"write_final takes a final record, got kind {record.kind}; allowed: final")
    since = record.concluded_at - DEDUP_WINDOW
    duplicate = store.find_duplicate(record.vin, record.root_cause, since)
    late = duplicate is not None and duplicate.concluded_at > record.concluded_at
    if duplicate is not None and late:
        # The newest of its cause concluded after this case: a run again of the case (a restore, a replay run
        # again), or a case delivered late. (Reads here only: a case written in order never gets here.)
        holding = holding_record(store, record.vin, record.session_id)
        if holding is not None and (holding.merged_sessions[-1:] or [holding.session_id]) != [record.session_id]:
            # The record holding it has taken in a later case of its cause since: written, the case would put its
            # older summary over that one's, and its verdict with it (or leave it out of the record).
            if had_milestones:
                supersede_milestones(store, record.vin, record.session_id, record.concluded_at)
            return WriteStatus.WRITTEN if holding.session_id == record.session_id else WriteStatus.MERGED
        # Written again where it is (a run again), or, late, merged as it would have been in order: into the newest
        # case of its cause within the window before it, or a record of its own. Merged into the newest, it
        # replaced the newer case's summary and verdict.
        duplicate = holding or store.find_duplicate(record.vin, record.root_cause, since, until=record.concluded_at)
    status = WriteStatus.WRITTEN
    if duplicate is not None and duplicate.kind is RecordKind.FINAL and duplicate.session_id != record.session_id:
        merged = list(dict.fromkeys([*duplicate.merged_sessions, record.session_id]))
        # The fault came back: the new version is not verified (its own recheck will say). Unless this is a
        # run again of a session already merged (a restore, an old duplicate): its recheck's verdict stays. So does,
        # for a case known late (a newer record of its cause), a verdict given no earlier than it concluded (its
        # recheck came first): in order, that recheck came after the merge and verified the record
        # (``stale_recheck``). Otherwise a recheck dated after the case may be misdated, and kept, would verify
        # every recurrence; reset, a true verdict waits for the next recheck (the safe side).
        keep = record.session_id in duplicate.merged_sessions or (
            late and duplicate.verified_ts is not None and duplicate.verified_ts >= record.concluded_at
        )
        record = record.model_copy(
            update={
                "session_id": duplicate.session_id,
                "merged_sessions": merged,
                "recheck_ok": duplicate.recheck_ok if keep else None,
                "verified_ts": duplicate.verified_ts if keep else None,
            }
        )
        status = WriteStatus.MERGED
    elif duplicate is not None and duplicate.session_id == record.session_id:
        # A re-run of the same session (restore, retry, a duplicate older than the dedup ids kept): keep what
        # was merged into it, and the verdict of its recheck (the same cause, so the same repair verified):
        # a re-run must not take a verified case out of similar-case recall.
        update: dict[str, object] = {"merged_sessions": duplicate.merged_sessions}
        if record.recheck_ok is None and duplicate.recheck_ok is not None:
            update |= {"recheck_ok": duplicate.recheck_ok, "verified_ts": duplicate.verified_ts}
        record = record.model_copy(update=update)
    if duplicate is not None and record.session_id == duplicate.session_id and not duplicate.valid:
        # A case run again into the record holding it, set invalid since (its vehicle left the fleet's care): it
        # stays invalid from then. (Only a record found holding the case can be invalid: the gates merge into
        # valid ones.)
        record = record.model_copy(update={"valid": False, "invalid_ts": duplicate.invalid_ts})
    store.upsert(record)
    if had_milestones:
        supersede_milestones(
            store,
            record.vin,
            record.merged_sessions[-1] if status is WriteStatus.MERGED else record.session_id,
            record.concluded_at,
        )
    return status


# How a concluded case is written: ``write_final`` (the write gates), or another that takes the same arguments.
WriteFinal = Callable[[MemoryStore, MemoryRecord, bool], WriteStatus]


def write_alone(
    store: MemoryStore, record: MemoryRecord, had_milestones: bool = True, invalid_from: datetime | None = None
) -> WriteStatus:
    """Write a concluded case as a record of its own, merged into none (``WriteFinal``), set invalid from
    ``invalid_from`` if given, in one upsert.

    For a case written long after it concluded (``vdoctor memory write-waiting``), whose vehicle has since
    concluded a case of its cause in the same second (which came first, a dead letter cannot tell: merged, the
    case could put its summary over a newer one's), or whose earlier case of its cause was verified since (merged,
    the verdict would be reset), or that left the fleet's care (the case missed the lifecycle event that set its
    other cases of then invalid).
    """
    if record.kind is not RecordKind.FINAL:
        raise ValueError(f"write_alone takes a final record, got kind {record.kind}; allowed: final")
    if invalid_from is not None:
        record = record.model_copy(update={"valid": False, "invalid_ts": invalid_from})
    store.upsert(record)
    if had_milestones:
        # Superseded from the conclusion, as the gates' write would have then; those a lifecycle event set invalid
        # later than that (the case missed it, its milestones did not) too.
        supersede_milestones(store, record.vin, record.session_id, record.concluded_at, invalid_later=True)
    return WriteStatus.WRITTEN


def holding_record(store: MemoryStore, vin: str, session_id: str) -> MemoryRecord | None:
    """The record holding this session's case: its own, or the one it was merged into; None when none does."""
    return store.get(vin, session_id) or merged_record(store, vin, session_id)


def record_key_for_session(store: MemoryStore, vin: str, session_id: str) -> str | None:
    """The session id of the record holding this session: itself, or the record it was merged into."""
    record = holding_record(store, vin, session_id)
    return record.session_id if record is not None else None


def merged_record(store: MemoryStore, vin: str, session_id: str) -> MemoryRecord | None:
    """The record this session was merged into, if any."""
    for record in store.history(vin):
        if session_id in record.merged_sessions:
            return record
    return None


class StaleRecheck(ValueError):
    """A recheck from before the fault came back: the record holding its session has since taken in a later
    session of the same fault (``stores.base.stale_recheck``). Not applied: it would verify a repair that
    did not hold."""

    def __init__(self, session_id: str, at: datetime, record: MemoryRecord) -> None:
        newest = record.merged_sessions[-1] if record.merged_sessions else record.session_id
        super().__init__(
            f"recheck of session {session_id!r} at {at.isoformat()} is from before the fault came back: "
            f"session {newest!r} of the same fault concluded at {record.concluded_at.isoformat()} and was merged "
            f"into record {record.session_id!r}, which waits for that session's recheck; this verdict is not "
            "applied"
        )


# How far back a recheck that names no session looks for the case it verifies (``latest_case``): a workshop
# rechecks a repair within weeks of the diagnosis; a case older than this is not the one it saw.
RECHECK_REACH = timedelta(days=90)


def latest_case(store: MemoryStore, vin: str, at: datetime) -> str | None:
    """The session id of this vehicle's newest valid case concluded at or before ``at`` and at most
    ``RECHECK_REACH`` before it: the case a recheck sent without a session id verifies (a workshop's
    system knows the vehicle and the time, not this job's session ids). None when there is none.

    A milestone is no case (what a session still open guessed): a verdict on the vehicle is never its.
    Milestones are valid only while their session is open, one a day, so the newest few records hold
    the case unless the session has been open for longer than they span; then more are read.
    """
    limit = 8
    while True:
        found = store.own_history(vin, at - RECHECK_REACH, limit, at)
        case = next((r for r in found if r.kind is RecordKind.FINAL), None)
        if case is not None or len(found) < limit:
            return None if case is None else case.session_id
        limit *= 4


def set_recheck(store: MemoryStore, vin: str, session_id: str, ok: bool, at: datetime) -> bool:
    """Store a recheck (event time ``at``) for a session, following merges. False when no record holds it;
    ``StaleRecheck`` when its record has since taken in a later session of the same fault that concluded
    after ``at`` (the fault came back after the verdict).

    The session's own record is tried first: a store's ``set_recheck`` is
    False only when no record has that key or the verdict is stale, so the
    usual recheck (of a session not merged away) is one write, not a read of
    the record and then the write. Only a recheck the store did not apply is
    looked into: its own record (then stale), else the record it was merged
    into.
    """
    if store.set_recheck(vin, session_id, ok, at):
        return True
    record = holding_record(store, vin, session_id)
    if record is None:
        return False
    if stale_recheck(bool(record.merged_sessions), record.concluded_at, at):
        raise StaleRecheck(session_id, at, record)
    return store.set_recheck(vin, record.session_id, ok, at)

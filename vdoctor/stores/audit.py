"""Read-only views of long-term memory for people: every version of a record, and fleet counts.

A session reads through ``MemoryStore`` as of its event time, and sees each
record in the one version current then. A person asking why a session was
given a case, or what the fleet's memory holds, needs what the store keeps
beneath that: every version of a record with the span of event time
``[version_from, version_to)`` in which it was current, counts over the
fleet, and the newest conclusions. These reads are never on a session's path
(the memory inspector, ``vdoctor serve``, and recall explanations use them).

A backend offers them by implementing ``StoreAudit`` beside ``MemoryStore``;
``audit_reads`` names the backend that does not. Records come back as stored
(not taken as of any time), without their summary source (``get`` has it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from vdoctor.errors import ConfigError
from vdoctor.records import MemoryRecord, RecordKind


@dataclass(frozen=True)
class RecordVersion:
    """One version of a record and the span of event time in which it was the record's current one."""

    record: MemoryRecord
    version_from: datetime
    # None: the record's current version (open-ended).
    version_to: datetime | None

    @property
    def current(self) -> bool:
        return self.version_to is None

    def holds_at(self, at: datetime) -> bool:
        """True when this was the record's version for a session opening at ``at``."""
        return self.version_from <= at and (self.version_to is None or at < self.version_to)


@dataclass(frozen=True)
class CountGroup:
    """Current records of one (series, kind, valid, recheck_ok) combination."""

    series: str
    kind: RecordKind
    valid: bool
    recheck_ok: bool | None
    records: int


@dataclass(frozen=True)
class FleetCounts:
    """What the fleet's long-term memory holds, counted over current versions."""

    groups: tuple[CountGroup, ...]
    vehicles: int
    archived_versions: int

    def _sum(self, kind: RecordKind | None = None, **match: object) -> int:
        return sum(
            g.records
            for g in self.groups
            if (kind is None or g.kind is kind) and all(getattr(g, k) == v for k, v in match.items())
        )

    @property
    def records(self) -> int:
        return self._sum()

    @property
    def final(self) -> int:
        return self._sum(RecordKind.FINAL)

    @property
    def milestones(self) -> int:
        return self._sum(RecordKind.MILESTONE)

    @property
    def invalid(self) -> int:
        return self._sum(valid=False)

    def final_with_recheck(self, recheck_ok: bool | None) -> int:
        """Final records whose recheck says ``recheck_ok`` (None: pending), valid or not."""
        return sum(g.records for g in self.groups if g.kind is RecordKind.FINAL and g.recheck_ok is recheck_ok)

    @property
    def verified_share(self) -> float:
        """Share of final records a recheck verified (recheck_ok = true): what similar-case recall may use."""
        return self.final_with_recheck(True) / self.final if self.final else 0.0

    def by_series(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for g in self.groups:
            out[g.series] = out.get(g.series, 0) + g.records
        return dict(sorted(out.items()))


@runtime_checkable
class StoreAudit(Protocol):
    """The read-only views; every backend that can serve the memory inspector implements them."""

    def versions(self, vin: str) -> list[RecordVersion]:
        """Every version of every record of the VIN, current and archived, by (session_id, version_from)."""
        ...

    def series_versions(self, series: str, limit: int) -> list[RecordVersion]:
        """Versions of the series' records (every vehicle), newest conclusion first, at most ``limit``."""
        ...

    def fleet_counts(self) -> FleetCounts: ...

    def recent(self, limit: int) -> list[MemoryRecord]:
        """The newest current records of the fleet by conclusion time, at most ``limit``."""
        ...


def audit_reads(store: object) -> StoreAudit:
    """The store's read-only views; a backend without them is a configuration error that says so."""
    if isinstance(store, StoreAudit):
        return store
    raise ConfigError(
        f"the {type(store).__name__} backend has no read-only views (vdoctor.stores.audit.StoreAudit): "
        "the memory inspector cannot show it"
    )


def sort_versions(versions: list[RecordVersion]) -> list[RecordVersion]:
    """The order ``versions`` returns: by record, then oldest version first."""
    return sorted(versions, key=lambda v: (v.record.session_id, v.version_from))


def count_groups(rows: list[tuple[object, object, object, object, object]]) -> tuple[CountGroup, ...]:
    """(series, kind, valid, recheck_ok, count) rows of a GROUP BY, as typed groups."""
    return tuple(
        CountGroup(
            series=str(series),
            kind=RecordKind(str(kind)),
            valid=bool(valid),
            recheck_ok=None if ok is None else bool(ok),
            records=int(str(n)),
        )
        for series, kind, valid, ok, n in rows
    )

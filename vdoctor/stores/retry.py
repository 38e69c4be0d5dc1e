"""Writes that survive a long-term-memory outage: retried with backoff, never dropped.

``RetryingStore`` wraps any backend. Recall reads pass straight through: a recall
that fails is degraded (the diagnosis goes on without memory and says so),
because waiting for memory would hold up a diagnosis. Writes (a concluded
case, a recheck, a soft delete, and the lookups a merge or a recheck needs) are retried with
exponential backoff and
jitter until the store answers or ``deadline_s`` has passed. They run on the
operator's worker threads, off the Flink operator thread, and the event that
caused them stays in the vehicle's keyed state until its run completes: a
crash during the outage re-runs it after restore, and the upsert by
(vin, session_id) is idempotent, so nothing is lost and nothing doubles.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import (
    ChannelHits,
    MemoryStore,
    Scored,
    SimilarQuery,
    StaleVersion,
    channel_hits,
    read_at_once,
)

log = logging.getLogger(__name__)

# An outage of a few minutes (a Doris FE failover, a MariaDB restart) is ridden out.
DEFAULT_DEADLINE_S = 300.0
BASE_DELAY_S = 0.5
MAX_DELAY_S = 15.0
T = TypeVar("T")


class RetryingStore:
    """A MemoryStore whose writes retry through outages; reads fail fast."""

    def __init__(
        self,
        inner: MemoryStore,
        deadline_s: float = DEFAULT_DEADLINE_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.inner = inner
        self.deadline_s = deadline_s
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self.write_retries = 0

    def _write(self, what: str, call: Callable[[], T]) -> T:
        started = self._clock()
        attempt = 0
        while True:
            try:
                return call()
            except StoreError as e:
                attempt += 1
                waited = self._clock() - started
                if waited >= self.deadline_s:
                    raise StoreError(f"{what}: long-term memory still failing after {waited:.0f} s: {e}") from e
                with self._lock:
                    self.write_retries += 1
                # Full jitter: retries of many vehicles do not hit the store in step.
                # (The exponent stops growing once the delay is at its cap: 2 ** 1024 is past a float.)
                delay = self._rng.uniform(0, min(MAX_DELAY_S, BASE_DELAY_S * 2 ** min(attempt - 1, 32)))
                delay = min(delay, max(0.0, self.deadline_s - waited))
                log.warning("%s failed (attempt %d), retrying in %.1f s: %s", what, attempt, delay, e)
                self._sleep(delay)

    # -- writes: retried ----------------------------------------------------------------

    def upsert(self, record: MemoryRecord) -> None:
        self._write(f"upsert {record.session_id}", lambda: self.inner.upsert(record))

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        self._write(f"upsert of {len(records)} records", lambda: self.inner.upsert_many(records))

    def set_recheck(self, vin: str, session_id: str, ok: bool, at: datetime) -> bool:
        return self._write(f"recheck {session_id}", lambda: self.inner.set_recheck(vin, session_id, ok, at))

    def soft_delete(self, vin: str, at: datetime) -> int:
        return self._write(f"soft delete {vin}", lambda: self.inner.soft_delete(vin, at))

    # -- reads a write depends on (merge lookup, recheck target): retried with it -------

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        return self._write(f"read {session_id}", lambda: self.inner.get(vin, session_id))

    def history(self, vin: str) -> list[MemoryRecord]:
        return self._write(f"history of {vin}", lambda: self.inner.history(vin))

    def find_duplicate(
        self, vin: str, root_cause: str, since: datetime, until: datetime | None = None
    ) -> MemoryRecord | None:
        return self._write(f"dedup lookup {vin}", lambda: self.inner.find_duplicate(vin, root_cause, since, until))

    # -- recall reads: straight through (a failed recall is degraded, not waited for) ---

    def get_at_once(self, vin: str, session_id: str) -> MemoryRecord | None:
        """``get`` straight through (``base.read_at_once``): whether a session id is taken, as a session opens."""
        return read_at_once(self.inner, vin, session_id)

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        return self.inner.own_history(vin, since, limit, as_of)

    def similar(self, query: SimilarQuery) -> list[Scored]:
        return self.inner.similar(query)

    def lexical(self, query: SimilarQuery) -> list[Scored]:
        return self.inner.lexical(query)

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        return self.inner.channels(query, dense_k, lexical_k)

    def channel_hits(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> ChannelHits | None:
        """The inner store's ``channel_hits``, None when it has none (``base.channel_hits``)."""
        return channel_hits(self.inner, query, dense_k, lexical_k)

    # -- maintenance (``memory reembed``): a CLI's, straight through ---------------------

    def count_stale(self, embedder: str) -> int:
        return self.inner.count_stale(embedder)

    def stale_versions(self, embedder: str, limit: int) -> list[StaleVersion]:
        return self.inner.stale_versions(embedder, limit)

    def set_vectors(self, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        return self.inner.set_vectors(rows, embedder)

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        return self.inner.by_prompt_version(prompt_version, limit)

    def prompt_versions(self) -> list[str]:
        return self.inner.prompt_versions()

    def count(self) -> int:
        return self.inner.count()

    def close(self) -> None:
        self.inner.close()

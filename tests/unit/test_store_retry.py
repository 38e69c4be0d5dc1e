"""Writes retry through a long-term-memory outage; recall reads fail fast."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import SimilarQuery
from vdoctor.stores.memory import InMemoryStore
from vdoctor.stores.retry import MAX_DELAY_S, RetryingStore

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


class Outage(InMemoryStore):
    """An in-memory store that is down until the fake clock reaches ``up_at``."""

    def __init__(self, clock: list[float], up_at: float) -> None:
        super().__init__()
        self.clock, self.up_at, self.calls = clock, up_at, 0

    def _check(self) -> None:
        self.calls += 1
        if self.clock[0] < self.up_at:
            raise StoreError("connection refused")

    def upsert(self, record: MemoryRecord) -> None:
        self._check()
        super().upsert(record)

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        self._check()
        return super().own_history(vin, since, limit, as_of)

    def similar(self, query: SimilarQuery) -> list:  # type: ignore[type-arg]
        self._check()
        return super().similar(query)


def record() -> MemoryRecord:
    at = datetime(2026, 11, 1, tzinfo=UTC)
    return MemoryRecord(
        vin=VIN,
        session_id=f"{VIN}-20261101T000000",
        series="EV-A",
        concluded_at=at,
        summary="s",
        summary_vec=[1.0],
        root_cause="c",
        fix_action="f",
        priority="P2",
        prompt_version="v",
    )


def make(up_at: float, deadline: float) -> tuple[Outage, RetryingStore, list[float], list[float]]:
    clock = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    inner = Outage(clock, up_at)
    return (
        inner,
        RetryingStore(inner, deadline, sleep=sleep, clock=lambda: clock[0], rng=random.Random(1)),
        clock,
        slept,
    )


def test_a_write_during_a_minute_long_outage_lands_once_when_the_store_is_back() -> None:
    inner, store, clock, slept = make(up_at=60.0, deadline=300.0)
    store.upsert(record())
    assert clock[0] >= 60.0  # it waited the outage out
    assert inner.count() == 1 and store.write_retries == inner.calls - 1 > 0
    assert all(0 <= s <= MAX_DELAY_S for s in slept)


def test_a_write_that_outlasts_the_deadline_raises_a_store_error() -> None:
    inner, store, clock, _ = make(up_at=1000.0, deadline=30.0)
    with pytest.raises(StoreError, match="still failing after 30 s"):
        store.upsert(record())
    assert inner.count() == 0 and clock[0] == pytest.approx(30.0)


def test_recall_reads_fail_fast_during_an_outage() -> None:
    inner, store, clock, slept = make(up_at=60.0, deadline=300.0)
    with pytest.raises(StoreError):
        store.own_history(VIN, datetime(2020, 1, 1, tzinfo=UTC), 10, as_of=datetime(2026, 12, 1, tzinfo=UTC))
    assert slept == [] and inner.calls == 1


def test_an_outage_longer_than_a_thousand_retries_ends_in_a_store_error_at_the_deadline() -> None:
    """The delay's exponent grew with every attempt: past ~1,024 attempts (over two hours of an outage, under a
    deadline of up to a day, ``VDOCTOR_STORE_RETRY_S``) it overflowed a float, and the write failed with an
    ``OverflowError`` instead of the store's error."""
    inner, store, clock, _ = make(up_at=float("inf"), deadline=24 * 3600.0)
    with pytest.raises(StoreError, match="still failing after 86400 s"):
        store.upsert(record())
    assert inner.calls > 1100 and clock[0] == 24 * 3600.0

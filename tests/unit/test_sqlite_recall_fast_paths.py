"""The embedded store's recall fast paths against the plain forms they replace."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from vdoctor.records import MemoryRecord
from vdoctor.stores.base import Scored, SimilarQuery, ranked_hits, scored
from vdoctor.stores.sqlite_rows import NEVER, DecodedRows, admission

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def record(vin: str, session: str) -> MemoryRecord:
    return MemoryRecord(
        vin=vin, session_id=session, series="EV-A", concluded_at=T0, summary="s", summary_vec=[1.0, 0.0],
        root_cause="pump", fix_action="fix", priority="P2", prompt_version="v1", updated_at=T0,
    )  # fmt: skip


def test_scored_is_the_dataclass_made_by_its_constructor() -> None:
    # A field added to Scored must be set by ``scored`` as well.
    assert [f.name for f in dataclasses.fields(Scored)] == ["record", "score", "parts"]
    r = record("V1", "V1-s")
    for score in (0.0, -0.0, 1.5, -2.25, float("inf")):
        made, plain = scored(r, score), Scored(r, score)
        assert type(made) is Scored and made == plain and repr(made) == repr(plain)
        assert vars(made) == vars(plain) and made.record is r and made.parts == {}
        assert dataclasses.replace(made, score=1.0) == Scored(r, 1.0)
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.score = 2.0  # type: ignore[misc]
    assert scored(r, 0.0).parts is not scored(r, 0.0).parts  # a dict of its own, as the default factory makes


def test_get_many_finds_and_refreshes_what_get_does_key_by_key() -> None:
    rng = random.Random(3)
    one, many = DecodedRows(40), DecodedRows(40)
    for step in range(2000):
        if rng.random() < 0.5:
            key, seq = rng.randint(-30, 30), rng.randint(0, 3)
            row = record(f"V{key}", f"S{seq}")
            for rows in (one, many):  # ``record`` decodes the row: both keep the same record object
                rows._records[(key, seq)] = row, admission(row)
                rows._records.move_to_end((key, seq))
                while len(rows._records) > rows._capacity:
                    rows._records.popitem(last=False)
        else:
            keys = sorted(rng.sample(range(-30, 31), rng.randint(0, 12)))
            seqs = {k: rng.choice([None, 0, 1, 2, 3]) for k in keys if rng.random() < 0.9}
            plain = [None if seqs.get(k) is None else one.get(k, seqs[k]) for k in keys]  # type: ignore[arg-type]
            assert [None if e is None else e[0] for e in many.entries(keys, seqs)] == plain, step
        assert list(many._records) == list(one._records), step  # the same least recently used order


def test_ranked_orders_the_hits_as_the_plain_sort_of_constructed_scores() -> None:
    rng = random.Random(9)
    records = {i: record(f"V{rng.randint(0, 5)}", f"S{rng.randint(0, 5)}") for i in range(-20, 40)}
    for _ in range(500):
        hits = [(rng.randint(-25, 45), rng.choice([0.5, 0.25, rng.random()])) for _ in range(rng.randint(0, 40))]
        k = rng.randint(0, 45)
        plain = [Scored(records[rowid], score) for rowid, score in hits if rowid in records]
        plain.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
        ranked = ranked_hits(hits, records, k)
        assert ranked == plain[:k]
        # The very records in the very order, tied ones too.
        assert all(a.record is b.record for a, b in zip(ranked, plain[:k], strict=True))


def test_admission_admits_what_admits_does_of_the_record_as_of_the_query() -> None:
    rng = random.Random(4)
    times = [T0 + timedelta(days=d) for d in range(-2, 3)]
    days: list[datetime | None] = [None, *times]
    for _ in range(4000):
        # Records as a row decodes them (not validated: a verdict without its time, an invalidation time on a
        # valid record), and queries of their vehicle or another, their series or another, before and after.
        valid = rng.random() < 0.7
        invalid = rng.choice(days) if rng.random() < 0.5 else None
        if not valid and invalid is None and rng.random() < 0.9:
            invalid = rng.choice(times)  # as ``MemoryRecord.from_store`` fills it
        row = MemoryRecord.model_construct(
            vin=rng.choice(["V1", "V2"]), session_id="s", series=rng.choice(["EV-A", "EV-B"]),
            concluded_at=rng.choice(times), summary="s", summary_vec=[1.0, 0.0], root_cause="pump",
            fix_action="fix", priority="P2", prompt_version="v1", updated_at=T0, valid=valid, invalid_ts=invalid,
            recheck_ok=rng.choice([True, True, False, None]), verified_ts=rng.choice(days),
        )  # fmt: skip
        at = rng.choice(times) + timedelta(hours=rng.choice([-1, 0, 1]))
        vector = np.zeros(2, dtype=np.float32)
        query = SimilarQuery(rng.choice(["V1", "V2"]), rng.choice(["EV-A", "EV-B"]), vector, 5, at)
        vin, series, since, until, invalid_ts = admission(row)
        admitted = vin != query.exclude_vin and series == query.series and since <= at and (until is None or at < until)
        assert admitted == query.admits(row.as_of(at)), (row, at)
        if admitted:  # taken as of ``at`` by a copy exactly when ``as_of`` copies it
            assert (invalid_ts is not None and invalid_ts > at) == (row.as_of(at) is not row)
    assert admission(record("V1", "s"))[2] == NEVER  # never verified: never admitted

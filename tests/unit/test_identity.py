"""What is kept by an object's identity is the plain computation, made once per object, never another's."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.unit.test_recall_render import VIN_A, record
from vdoctor.identity import KeptByIdentity
from vdoctor.memory.recall import recall_entry, render_record
from vdoctor.retrieval.cases import _ARRAYS

pytestmark = pytest.mark.unit


def test_a_value_is_made_once_per_object_and_never_given_to_another() -> None:
    made: list[list[float]] = []

    def make(vector: list[float]) -> float:
        made.append(vector)
        return sum(vector)

    kept: KeptByIdentity[list[float], float] = KeptByIdentity(make, capacity=4)
    rng = random.Random(5)
    lists = [[rng.uniform(-1, 1) for _ in range(8)] for _ in range(6)]
    assert [kept(v) for v in lists] == [sum(v) for v in lists]
    assert len(made) == 6 and len(kept) == 4  # the oldest two were let go
    last = lists[-1]
    assert kept(last) == sum(last) and len(made) == 6  # kept: not made again
    twin = list(last)  # equal values, another object: its own entry
    kept(twin)
    assert made[-1] is twin
    kept(lists[0])  # let go before: made again
    assert made[-1] is lists[0] and len(made) == 8


def test_a_kept_vector_array_is_the_conversion_and_read_only() -> None:
    vector = [random.Random(2).uniform(-1, 1) for _ in range(512)]
    array = _ARRAYS(vector)
    assert _ARRAYS(vector) is array
    assert np.array_equal(array, np.asarray(vector, dtype=np.float32)) and array.dtype == np.float32
    with pytest.raises(ValueError):
        array[0] = 1.0


def test_a_kept_rendering_is_the_records_own_for_either_kind() -> None:
    first, second = record(VIN_A, 1), record(VIN_A, 2, summary="2026-11-03 | other\nsecond line")
    for _ in range(2):  # the second round comes from what was kept
        for rec in (first, second):
            for kind in ("own", "similar"):
                assert render_record(kind, rec) == recall_entry(kind, rec).render()
    changed = first.model_copy(update={"recheck_ok": False})  # a new version is a new object
    assert render_record("similar", changed) == recall_entry("similar", changed).render()
    assert render_record("similar", changed) != render_record("similar", first)

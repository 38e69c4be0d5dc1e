"""The output and long-term records: what their validation accepts, and the JSON their defaults give."""

from __future__ import annotations

import math
import pickle
import sys
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from vdoctor.records import Diagnosis, MemoryRecord, PackedVector, Phase

pytestmark = pytest.mark.unit

AT = datetime(2026, 1, 1, tzinfo=UTC)


def record(**fields: Any) -> MemoryRecord:
    base: dict[str, Any] = dict(
        vin="V", session_id="s", series="S", concluded_at=AT, summary="x", summary_vec=[1.0],
        root_cause="c", fix_action="f", priority="P1", prompt_version="p", updated_at=datetime(2026, 1, 2, tzinfo=UTC),
    )  # fmt: skip
    return MemoryRecord(**(base | fields))


@pytest.mark.parametrize("vec", [[0.5, math.nan], [math.inf], [0.5, -math.inf], [math.inf, -math.inf], []])
def test_a_vector_with_a_value_that_is_not_finite_is_refused(vec: list[float]) -> None:
    with pytest.raises(ValidationError, match="finite floats"):
        record(summary_vec=vec)


def test_finite_values_whose_sum_overflows_are_still_a_valid_vector() -> None:
    """The check sums the vector first; a sum that overflowed is not taken for a value that is not finite."""
    assert record(summary_vec=[1e308, 1e308, -1.0]).summary_vec == [1e308, 1e308, -1.0]


def test_list_and_model_defaults_give_the_json_they_always_gave_and_are_never_shared() -> None:
    # The JSON of the release whose defaults were literals (state and output compatibility).
    diagnosis = Diagnosis(vin="V", series="S", event_id="e", session_id="s", phase=Phase.INVESTIGATING)
    assert diagnosis.model_dump_json() == (
        '{"vin":"V","series":"S","event_id":"e","session_id":"s","phase":"INVESTIGATING","priority":null,'
        '"root_cause":null,"fix_action":null,"confidence":0.0,"evidence":[],"llm_calls":0,"tool_calls":0,'
        '"prompt_tokens":0,"completion_tokens":0,"latency_ms":0.0,"model_latency_ms":0.0,'
        '"memory":{"injected":false,"tokens":0,"own":[],"similar":[],"degraded":false},"flags":[]}'
    )
    assert record().model_dump_json() == (
        '{"vin":"V","session_id":"s","series":"S","concluded_at":"2026-01-01T00:00:00Z","summary":"x",'
        '"summary_vec":[1.0],"root_cause":"c","fix_action":"f","priority":"P1","dtc_codes":[],"recheck_ok":null,'
        '"prompt_version":"p","valid":true,"updated_at":"2026-01-02T00:00:00Z","kind":"final","merged_sessions":[],'
        '"source":"","omitted":[],"opened_ts":null,"verified_ts":null,"invalid_ts":null,"alert_text":"",'
        '"embedder":""}'
    )
    other = Diagnosis(vin="W", series="S", event_id="f", session_id="t", phase=Phase.INVESTIGATING)
    diagnosis.flags.append("x")
    diagnosis.memory.own.append(record().ref())
    assert other.flags == [] and other.memory.own == []
    assert diagnosis.model_fields_set == {"vin", "series", "event_id", "session_id", "phase"}


def test_a_packed_vector_reads_as_the_list_of_its_float32_values() -> None:
    values = np.random.default_rng(3).standard_normal(512).astype(np.float32)
    packed, plain = PackedVector(values.tobytes()), values.tolist()
    assert len(packed) == 512 and list(packed) == plain and packed.tolist() == plain
    assert packed == plain and packed == tuple(plain) and packed == PackedVector(values.tobytes())
    assert packed != plain[:-1] and packed != PackedVector(values[:-1].tobytes())
    assert packed[7] == plain[7] and packed[-2:] == plain[-2:]
    array = np.asarray(packed)
    assert array.dtype == np.float32 and not array.flags.writeable and np.array_equal(array, values)
    assert np.asarray(packed, dtype=np.float64).tolist() == plain
    assert np.asarray([packed, plain], dtype=np.float32).shape == (2, 512)
    assert pickle.loads(pickle.dumps(packed)) == packed
    # A quarter of a list's size or less, whatever the Python build counts for a float.
    as_list = sys.getsizeof(plain) + sum(sys.getsizeof(x) for x in plain)
    assert sys.getsizeof(packed) + len(values.tobytes()) < as_list / 4
    with pytest.raises(ValueError, match="fours"):
        PackedVector(b"\x00" * 6)


def test_a_record_with_a_packed_vector_dumps_validates_and_compares_as_with_the_list() -> None:
    plain = record(summary_vec=[0.5, -0.25, 1.0])
    vector = PackedVector(np.float32([0.5, -0.25, 1.0]).tobytes())
    packed = MemoryRecord.from_store(**(dict(plain) | {"summary_vec": vector}))
    assert packed == plain
    assert packed.model_dump() == plain.model_dump() and packed.model_dump_json() == plain.model_dump_json()
    assert MemoryRecord.model_validate(packed.model_dump()) == plain
    assert MemoryRecord(**dict(packed)).summary_vec == [0.5, -0.25, 1.0]


def test_a_float32_model_vector_is_kept_packed_and_reads_as_its_list() -> None:
    # The engine's writes: the model's float32 row goes into the record as its bytes, never a list of floats.
    row = np.random.default_rng(5).standard_normal(512).astype(np.float32)
    packed = record(summary_vec=PackedVector.packed_row(row))
    assert isinstance(packed.summary_vec, PackedVector)
    assert packed == record(summary_vec=row.tolist())
    assert packed.model_dump_json() == record(summary_vec=row.tolist()).model_dump_json()
    assert np.asarray(packed.summary_vec, dtype=np.float32).tobytes() == row.tobytes()


def test_a_vector_of_another_type_is_not_rounded_to_float32() -> None:
    row = np.array([0.1, 0.2], dtype=np.float64)
    assert PackedVector.packed_row(row) == [0.1, 0.2] and isinstance(PackedVector.packed_row(row), list)


@pytest.mark.parametrize("values", [[0.5, math.nan], [math.inf], [-math.inf, 0.0], []])
def test_a_packed_vector_with_a_value_that_is_not_finite_is_refused(values: list[float]) -> None:
    with pytest.raises(ValidationError, match="finite floats"):
        record(summary_vec=PackedVector(np.asarray(values, dtype=np.float32).tobytes()))


@pytest.mark.parametrize(
    "given",
    [(0.5, 1), np.array([0.5, 1.0]), np.array([0.5, 1.0], dtype=np.float32), (x for x in (0.5, 1.0)), [0.5, 1]],
)
def test_a_vector_given_as_any_sequence_of_numbers_is_kept_as_a_list_of_floats(given: Any) -> None:
    # The field is typed Sequence[float] (it may hold a PackedVector) but reads what a list[float] field read:
    # an embedder's numpy row or a tuple becomes the list of its floats, never kept as given.
    vec = record(summary_vec=given).summary_vec
    assert type(vec) is list and vec == [0.5, 1.0] and all(type(x) is float for x in vec)


@pytest.mark.parametrize("given", ["0.5", b"\x00\x00\x00?", {"a": 0.5}, np.ones((2, 2)), [[0.5]]])
def test_a_vector_that_is_not_a_flat_sequence_of_numbers_is_refused(given: Any) -> None:
    with pytest.raises(ValidationError, match="summary_vec"):
        record(summary_vec=given)

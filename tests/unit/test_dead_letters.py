"""Dead letters are bounded: a line the broker took never makes a dead letter the producer refuses.

A Kafka producer refuses a record over its max.request.size (1,048,576 bytes by default); a sink that fails
fails the job, which reads the same line again after its restart. Every stage writes ``DeadLetter``'s JSON,
to the dead-letters topic as to ``dead_letters.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest

from jobs.kafka_job import record_key
from operators.parse import DEAD_LETTER, ParseEvents
from vdoctor.records import (
    MAX_DEAD_LETTER_BYTES,
    MAX_DEAD_LETTER_ERROR_CHARS,
    MAX_DEAD_LETTER_RAW_CHARS,
    DeadLetter,
)

pytestmark = pytest.mark.unit

KAFKA_MAX_REQUEST_BYTES = 1_048_576  # the producer's default max.request.size
VIN = "LSVAU2180N2183294"


def test_the_bounds_leave_room_for_the_longest_reason_at_six_bytes_a_character() -> None:
    # (900,000 - 2,000 * 6 - 1,000) // 6, worked out by hand.
    assert MAX_DEAD_LETTER_RAW_CHARS == 147_833
    assert MAX_DEAD_LETTER_BYTES < KAFKA_MAX_REQUEST_BYTES


def test_a_dead_letter_within_the_bound_is_the_contracts_three_fields() -> None:
    raw = "é" * MAX_DEAD_LETTER_RAW_CHARS
    letter = DeadLetter(raw=raw, error="not JSON", stage="parse")
    assert json.loads(letter.model_dump_json()) == {"raw": raw, "error": "not JSON", "stage": "parse"}


def test_a_raw_over_the_bound_is_cut_and_the_letter_says_what_the_whole_was() -> None:
    # Control characters are written as \u0001 (6 bytes each): the most a character can take in JSON.
    raw = "é" + "\x01" * MAX_DEAD_LETTER_RAW_CHARS  # one character over the bound; é is 2 bytes in UTF-8
    error = "\x02" * (MAX_DEAD_LETTER_ERROR_CHARS + 1)
    encoded = DeadLetter(raw=raw, error=error, stage="validate").model_dump_json().encode()
    assert len(encoded) <= MAX_DEAD_LETTER_BYTES
    written = json.loads(encoded)
    assert written == {
        "raw": raw[:MAX_DEAD_LETTER_RAW_CHARS],
        "error": error[: MAX_DEAD_LETTER_ERROR_CHARS - 1] + "…",
        "stage": "validate",
        "raw_truncated": True,
        "raw_chars": MAX_DEAD_LETTER_RAW_CHARS + 1,
        "raw_bytes": MAX_DEAD_LETTER_RAW_CHARS + 2,
        "raw_sha256": hashlib.sha256(raw.encode()).hexdigest(),
    }
    # Read back, it is the same letter (it is not cut again, nor its lengths taken from the cut raw).
    assert DeadLetter.model_validate_json(encoded).model_dump_json().encode() == encoded


def test_a_lone_surrogate_is_kept_as_its_escape_and_the_letter_is_written_within_its_bound() -> None:
    """Half an emoji decoded from a JSON escape (a stored state's text, an error's): the letter could not be written
    (a review: an unreadable pending entry failed the job again on its own letter)."""
    letter = DeadLetter(raw='["\ud83d"]', error="store down \udc00", stage="process")
    assert json.loads(letter.model_dump_json()) == {
        "raw": '["\\ud83d"]', "error": "store down \\udc00", "stage": "process"
    }  # fmt: skip
    # An escape is six characters: the bounds hold for what is written.
    raw = "\ud83d" * MAX_DEAD_LETTER_RAW_CHARS
    encoded = DeadLetter(raw=raw, error="\udc00" * MAX_DEAD_LETTER_ERROR_CHARS, stage="process").model_dump_json()
    assert len(encoded.encode()) <= MAX_DEAD_LETTER_BYTES
    written = json.loads(encoded)
    assert written["raw_truncated"] and written["raw_chars"] == len(raw)
    assert written["raw_sha256"] == hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    assert DeadLetter.model_validate_json(encoded).model_dump_json() == encoded


def test_a_line_the_broker_took_gives_a_dead_letter_the_producer_takes() -> None:
    """The audit's line: 22,000 readings as a list of objects, 968,118 bytes; its dead letter was 1,100,256."""
    signals = [{"name": f"cell_{i:05d}_voltage_v", "value": 3.3} for i in range(22_000)]
    event = {"type": "alert", "event_id": "e-big", "vin": VIN, "ts": "2026-11-01T08:15:30Z", "alert_text": "x",
             "signals": signals}  # fmt: skip
    line = json.dumps(event, separators=(",", ":"))
    assert len(line.encode()) == 968_118
    stage = ParseEvents()
    stage.open(None)
    [(kind, where, payload, _)] = list(stage.process_element(line, None))
    assert (kind, where) == (DEAD_LETTER, "validate")
    assert len(payload.encode()) <= MAX_DEAD_LETTER_BYTES
    letter = json.loads(payload)
    assert letter["raw"] == line[:MAX_DEAD_LETTER_RAW_CHARS] and letter["raw_truncated"] is True
    assert (letter["raw_chars"], letter["raw_bytes"]) == (968_118, 968_118)  # all ASCII
    assert letter["raw_sha256"] == hashlib.sha256(line.encode()).hexdigest()
    assert "signals" in letter["error"]
    # The cut raw is no JSON to read a VIN from: the record goes out without a key.
    assert record_key(DEAD_LETTER, payload) is None


@pytest.mark.parametrize(
    "signals",
    ['{"state": "ON\\ud83d"}', '{"pack_temp_c": "41 \\ud83d"}', '{"state": {"value": "ON\\ud83d", "unit": "V"}}',
     '{"temp\\ud83d": 1}', '[{"name": "t\\udc00", "value": 1}]'],
)  # fmt: skip
def test_a_lone_surrogate_in_a_reading_is_read_as_a_broken_character_not_a_failed_job(signals: str) -> None:
    """Half an emoji, as a JavaScript producer cuts one, in a signal's text passed the contract, and then the
    event's JSON failed: the parse operator raised, and the job failed on the same record at every restart
    (found by an audit). Now it is U+FFFD, as in an alert's text: the reading is set aside, the alert read."""
    from vdoctor.events import EVENT_ADAPTER

    line = f'{{"type": "alert", "event_id": "e-1", "vin": "{VIN}", "ts": "2026-11-01T08:15:30Z", "signals": {signals}}}'
    stage = ParseEvents()
    stage.open(None)
    out = list(stage.process_element(line, None))
    assert [kind for kind, *_ in out] == [DEAD_LETTER, "E"]
    assert "\ufffd" in out[1][2] and EVENT_ADAPTER.validate_json(out[1][2]).vin == VIN
    assert json.loads(out[0][2])["raw"] == line


def test_a_line_this_build_cannot_read_is_a_dead_letter_and_the_job_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The last line of defence: whatever reading a line raises, it is a dead letter that says so, logged
    with its traceback, and the operator reads the next line."""
    import operators.parse as parse

    def broken(*args: object) -> object:
        raise KeyError("a bug")

    line = f'{{"type": "alert", "event_id": "e-1", "vin": "{VIN}", "ts": "2026-11-01T08:15:30Z", "alert_text": "x"}}'
    stage = ParseEvents()
    stage.open(None)
    monkeypatch.setattr(parse, "parse_event", broken)
    [(kind, where, payload, _)] = list(stage.process_element(line, None))
    assert (kind, where) == (DEAD_LETTER, "validate")
    assert json.loads(payload) == {
        "raw": line, "stage": "validate",
        "error": "this build could not read the line (KeyError: 'a bug'); please report it",
    }  # fmt: skip
    assert "a line could not be read" in caplog.text and "KeyError" in caplog.text
    monkeypatch.undo()
    assert [kind for kind, *_ in stage.process_element(line, None)] == ["E"]


def test_a_code_the_job_cannot_read_is_set_aside_its_alert_diagnosed_with_the_others_and_flagged() -> None:
    """A GB/T 32960 fault code of four bytes, or a code in no form the job reads, beside codes it reads: the
    whole alert was a dead letter, its readable codes and text lost (found by an audit). Now the alert is
    diagnosed from the rest and flagged, and its line is a dead letter as well, naming the code."""
    from tests.unit.test_engine import Harness, alert
    from vdoctor.diagnosis import DiagnosisEngine
    from vdoctor.embedders.hashing import HashingEmbedder
    from vdoctor.knowledge import load_pack
    from vdoctor.models.offline import OfflineModel
    from vdoctor.stores.memory import InMemoryStore

    payload = alert("e-1", datetime(2026, 11, 1, 8, tzinfo=UTC), ["P0A7F", "XYZ", 305419896],  # type: ignore[list-item]
                    {"cell_voltage_diff_mv": 187}, vin=VIN)  # fmt: skip
    line = json.dumps(payload, ensure_ascii=False)
    stage = ParseEvents()
    stage.open(None)
    [(kind, where, letter, _), (event_kind, *_)] = list(stage.process_element(line, None))
    assert (kind, where, event_kind) == (DEAD_LETTER, "validate", "E")
    error = json.loads(letter)["error"]
    assert error.startswith("dtc_codes: 2 codes set aside: ") and "'XYZ' is not a trouble code" in error
    assert "305419896 is not a trouble code (a UDS DTC is a number of three bytes)" in error
    engine = DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    h = Harness(engine)
    diagnosis = h.diagnose(payload)
    assert diagnosis.phase == "CONCLUDED" and "codes_set_aside" in diagnosis.flags

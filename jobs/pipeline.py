"""The diagnosis job graph: raw lines -> parse -> key_by(vin) -> DiagnosisFunction -> tagged output."""

from __future__ import annotations

from pyflink.common import Types
from pyflink.datastream import DataStream

from operators.diagnosis import DiagnosisFunction
from operators.parse import DEAD_LETTER, EVENT, DeadLetters, ParseEvents, Throttle
from vdoctor.settings import Settings

OUTPUT_TYPE = Types.TUPLE([Types.STRING(), Types.STRING()])
PARSED_TYPE = Types.TUPLE([Types.STRING(), Types.STRING(), Types.STRING(), Types.STRING()])


def build(raw_lines: DataStream, settings: Settings, rate: float | None = None) -> DataStream:
    """Return a stream of ``(kind, json)``: kind "D" for diagnoses, "X" for dead letters.

    The one place the diagnosis settings are shipped to the workers (inside the operator).
    """
    if rate:
        raw_lines = raw_lines.map(Throttle(rate), output_type=Types.STRING()).name("throttle")
    # Stable uids: a job restored from a checkpoint maps its state by them.
    parsed = raw_lines.process(ParseEvents(), output_type=PARSED_TYPE).name("parse").uid("parse")
    events = parsed.filter(lambda t: t[0] == EVENT).name("valid events")
    bad = (
        parsed.filter(lambda t: t[0] == DEAD_LETTER)
        .map(DeadLetters(), output_type=OUTPUT_TYPE)
        .name("parse dead letters")
    )
    diagnosed = (
        events.key_by(lambda t: t[1], key_type=Types.STRING())
        .process(DiagnosisFunction(settings.for_workers()), output_type=OUTPUT_TYPE)
        .name("diagnosis")
        .uid("diagnosis")
    )
    return diagnosed.union(bad)

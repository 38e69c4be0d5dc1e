"""The diagnosis job graph: raw lines -> parse -> key_by(vin) -> DiagnosisFunction -> tagged output."""

from __future__ import annotations

from pyflink.common import Types
from pyflink.common.typeinfo import TypeInformation
from pyflink.datastream import DataStream

from operators.code_identity import code_id
from operators.diagnosis import DiagnosisFunction
from operators.parse import DEAD_LETTER, EVENT, DeadLetters, ParseEvents, Throttle
from vdoctor.settings import Settings

OUTPUT_TYPE = Types.TUPLE([Types.STRING(), Types.STRING()])
# What a replay collects: the tuple pickled by the Python operator, a byte array on the Java side. The
# client reads each one in two calls to the JVM (has next, next); a Java tuple took ~8 (the element's
# handle, a lookup of the bridge class, the conversion to pickled fields, each field, and releasing
# the handles), and that client with its JVM counterpart was ~0.4 cores at ~110 runs/s.
COLLECTED_TYPE = Types.PICKLED_BYTE_ARRAY()
PARSED_TYPE = Types.TUPLE([Types.STRING(), Types.STRING(), Types.STRING(), Types.STRING()])


def build(
    raw_lines: DataStream,
    settings: Settings,
    rate: float | None = None,
    output_type: TypeInformation = OUTPUT_TYPE,
    withhold_passwords: bool = False,
) -> DataStream:
    """Return a stream of ``(kind, json)``: kind "D" for diagnoses, "X" for dead letters.

    The one place the diagnosis settings are shipped to the workers (inside the operator; the parse
    stage gets the zone of event times written without one and the fleet's signal map).
    ``output_type``: the tuple as two Java strings (``OUTPUT_TYPE``, what the Kafka sinks read), or
    ``Types.PICKLED_BYTE_ARRAY()`` for a stream this client collects (``COLLECTED_TYPE``).
    ``withhold_passwords``: a job submitted to a cluster ships its URLs without their passwords, which
    its workers read from their environment (``Settings.for_workers``).
    """
    if rate:
        raw_lines = raw_lines.map(Throttle(rate), output_type=Types.STRING()).name("throttle")
    # Stable uids: a job restored from a checkpoint maps its state by them.
    runtime = settings.runtime
    parse = ParseEvents(runtime.naive_ts_zone, runtime.signal_names, runtime.number_comma, runtime.dtc_numbers)
    parsed = raw_lines.process(parse, output_type=PARSED_TYPE).name("parse").uid("parse")
    events = parsed.filter(lambda t: t[0] == EVENT).name("valid events")
    bad = (
        parsed.filter(lambda t: t[0] == DEAD_LETTER)
        .map(DeadLetters(), output_type=output_type)
        .name("parse dead letters")
    )
    diagnosed = (
        events.key_by(lambda t: t[1], key_type=Types.STRING())
        .process(DiagnosisFunction(settings.for_workers(withhold_passwords), code_id()), output_type=output_type)
        .name("diagnosis")
        .uid("diagnosis")
    )
    return diagnosed.union(bad)

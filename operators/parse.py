"""Parse and validate raw JSON lines; route bad ones to the dead letters."""

from __future__ import annotations

from collections.abc import Iterator

from pyflink.datastream.functions import ProcessFunction

from vdoctor.errors import EventError
from vdoctor.events import parse_event
from vdoctor.records import DeadLetter

# Tags on the operators' output tuples (kind, json).
DIAGNOSIS = "D"
DEAD_LETTER = "X"
EVENT = "E"


class ParseEvents(ProcessFunction):  # type: ignore[misc]
    """raw line -> (EVENT, vin, event json, raw) or (DEAD_LETTER, "", dead letter json, "")."""

    def process_element(self, value: str, ctx: ProcessFunction.Context) -> Iterator[tuple[str, str, str, str]]:
        raw = value.rstrip("\r\n")
        if not raw.strip():
            return  # blank lines carry nothing to lose
        try:
            event = parse_event(raw)
        except EventError as e:
            letter = DeadLetter(raw=raw, error=str(e), stage=e.stage)  # type: ignore[arg-type]
            yield DEAD_LETTER, "", letter.model_dump_json(), ""
            return
        yield EVENT, event.vin, event.model_dump_json(), raw

"""Parse and validate raw JSON lines; route bad ones to the dead letters."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import tzinfo

from pyflink.datastream.functions import MapFunction, ProcessFunction, RuntimeContext

from operators.metrics import dead_letter_counter
from vdoctor.errors import EventError
from vdoctor.events import DEFAULT_DTC_NUMBERS, AlertEvent, parse_event, set_aside_error, time_zone
from vdoctor.records import DeadLetter
from vdoctor.signal_map import SignalRenames

# Tags on the operators' output tuples (kind, json).
DIAGNOSIS = "D"
DEAD_LETTER = "X"
EVENT = "E"
log = logging.getLogger(__name__)
NO_VALUE = "a record with no value (a Kafka tombstone) is not an event"


class ParseEvents(ProcessFunction):  # type: ignore[misc]
    """raw line -> (EVENT, vin, event json, raw) or (DEAD_LETTER, stage, dead letter json, ""); both for an
    alert that set readings or codes aside (``AlertEvent.set_aside``): it is diagnosed without them.

    ``naive_ts_zone``: the zone of event times written without one (the setting's name, checked by the
    settings; ``events.parse_event``). ``signal_names``: the fleet's signal map (``vdoctor.signal_map``,
    checked by the settings), shipped with the function. ``number_comma``: how the fleet's numbers use a
    comma (``decimal`` or ``thousands``, checked by the settings; ``events.parse_event``). ``dtc_numbers``:
    how the fleet sends a trouble code as a number (``uds`` or ``obd``; ``events.parse_event``).
    """

    def __init__(
        self,
        naive_ts_zone: str | None = None,
        signal_names: dict[str, str] | None = None,
        number_comma: str | None = None,
        dtc_numbers: str = DEFAULT_DTC_NUMBERS,
    ) -> None:
        self.naive_ts_zone = naive_ts_zone
        self.signal_names = dict(signal_names or {})
        self.number_comma = number_comma
        self.dtc_numbers = dtc_numbers
        self._zone: tzinfo | None = None
        self._rename: SignalRenames | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self._zone = time_zone(self.naive_ts_zone) if self.naive_ts_zone is not None else None
        self._rename = SignalRenames(self.signal_names) if self.signal_names else None

    def process_element(self, value: str | None, ctx: ProcessFunction.Context) -> Iterator[tuple[str, str, str, str]]:
        if value is None:  # a Kafka record without a value (a tombstone: what a producer sends to delete a key)
            letter = DeadLetter(raw="", error=NO_VALUE, stage="parse")
            yield DEAD_LETTER, "parse", letter.model_dump_json(), ""
            return
        raw = value.rstrip("\r\n")
        if not raw.strip():
            return  # blank lines carry nothing to lose
        aside = None
        try:
            event = parse_event(raw, self._zone, self._rename, self.number_comma, self.dtc_numbers)
            if isinstance(event, AlertEvent) and event.set_aside:
                # Diagnosed without the readings or codes it could not read; the line is kept whole with the reason.
                aside = DeadLetter(raw=raw, error=set_aside_error(event), stage="validate").model_dump_json()
            read = event.model_dump_json()
        except EventError as e:
            letter = DeadLetter(raw=raw, error=str(e), stage=e.stage)  # type: ignore[arg-type]
            yield DEAD_LETTER, e.stage, letter.model_dump_json(), ""
            return
        except MemoryError:
            raise  # (the worker's, not the line's)
        except Exception as e:  # noqa: BLE001 - a line this build misreads must not fail the job at every restart
            log.exception("a line could not be read (kept as a dead letter)")
            error = f"this build could not read the line ({type(e).__name__}: {e}); please report it"
            yield DEAD_LETTER, "validate", DeadLetter(raw=raw, error=error, stage="validate").model_dump_json(), ""
            return
        if aside is not None:
            yield DEAD_LETTER, "validate", aside, ""
        yield EVENT, event.vin, read, raw


class DeadLetters(MapFunction):  # type: ignore[misc]
    """(DEAD_LETTER, stage, dead letter json, "") -> (DEAD_LETTER, json), counted by stage.

    Counted here, where the dead letters leave the parse stage. PyFlink fuses chained Python
    functions into one operator and reports a function's metrics under that operator's name and
    under its own, so one counter appears twice in a task: queries keep one series per task and
    subtask (docker/grafana/dashboards/vdoctor.json).
    """

    def open(self, runtime_context: RuntimeContext) -> None:
        self.metrics = runtime_context.get_metrics_group().add_group("vdoctor")
        # Registered up front so that both series exist (at 0) before the first bad line.
        self.counters = {stage: dead_letter_counter(self.metrics, stage) for stage in ("parse", "validate")}

    def map(self, value: tuple[str, str, str, str]) -> tuple[str, str]:
        _, stage, letter, _ = value
        if stage not in self.counters:
            self.counters[stage] = dead_letter_counter(self.metrics, stage)
        self.counters[stage].inc()
        return DEAD_LETTER, letter


class Throttle(MapFunction):  # type: ignore[misc]
    """Passes lines on at most ``rate`` per second: a replay file that arrives like a live stream.

    A bounded file otherwise ends at once, and the job then drains its runs in
    flight at end of input, where no checkpoint can be taken.
    """

    def __init__(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.interval_s = 1.0 / rate
        self._next = 0.0

    def map(self, value: str) -> str:
        now = time.monotonic()
        if self._next > now:
            time.sleep(self._next - now)
        self._next = max(now, self._next) + self.interval_s
        return value

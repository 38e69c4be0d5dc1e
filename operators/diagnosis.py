"""DiagnosisFunction: the keyed operator that holds each vehicle's L2 session.

A thin adapter: load the session and dedup snapshots from keyed state, call
``DiagnosisEngine.on_event``, store the snapshots back, emit the results.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyflink.common import Time, Types
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor

from operators.parse import DEAD_LETTER, DIAGNOSIS
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.events import EVENT_ADAPTER
from vdoctor.memory.session import SESSION_TTL, DedupState, SessionState
from vdoctor.settings import Settings

# Flink's TTL runs on processing time and only bounds the state's size; the
# session's expiry proper is judged on event time inside SessionState.
STATE_TTL_HOURS = int(SESSION_TTL.total_seconds() // 3600)
# Dedup ids must outlive a session so that a late replay is still caught.
DEDUP_TTL_HOURS = 24 * 30


def _ttl(hours: int) -> StateTtlConfig:
    return (
        StateTtlConfig.new_builder(Time.hours(hours))
        .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
        .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
        # The default background cleanup includes a RocksDB compaction-filter
        # strategy whose Python side builds a java Duration over the py4j
        # gateway; a standalone cluster's TaskManager has none in thread mode
        # and the operator fails to open. Name the strategies explicitly instead.
        .disable_cleanup_in_background()
        .cleanup_incrementally(10, False)
        .cleanup_full_snapshot()
        .build()
    )


class DiagnosisFunction(KeyedProcessFunction):  # type: ignore[misc]
    """Keyed by VIN: (vin, event json, raw) -> (kind, json) diagnoses and dead letters."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self._settings = settings
        self.engine: DiagnosisEngine | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self.engine = DiagnosisEngine.from_settings(Settings.model_validate(self._settings))
        session = ValueStateDescriptor("session", Types.STRING())
        session.enable_time_to_live(_ttl(STATE_TTL_HOURS))
        dedup = ValueStateDescriptor("dedup", Types.STRING())
        dedup.enable_time_to_live(_ttl(DEDUP_TTL_HOURS))
        self.session_state = runtime_context.get_state(session)
        self.dedup_state = runtime_context.get_state(dedup)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()

    def process_element(
        self, value: tuple[str, str, str, str], ctx: KeyedProcessFunction.Context
    ) -> Iterator[tuple[str, str]]:
        if self.engine is None:
            raise RuntimeError("DiagnosisFunction.open() was not called before process_element()")
        _, _vin, event_json, raw = value
        event = EVENT_ADAPTER.validate_json(event_json)
        stored = self.session_state.value()
        session = SessionState.model_validate_json(stored) if stored else None
        dedup_raw = self.dedup_state.value()
        dedup = DedupState.model_validate_json(dedup_raw) if dedup_raw else DedupState()

        result = self.engine.on_event(session, dedup, event, raw)

        if result.session is None:
            self.session_state.clear()
        else:
            self.session_state.update(result.session.model_dump_json())
        self.dedup_state.update(result.dedup.model_dump_json())
        for diagnosis in result.diagnoses:
            yield DIAGNOSIS, diagnosis.model_dump_json()
        for letter in result.dead_letters:
            yield DEAD_LETTER, letter.model_dump_json()

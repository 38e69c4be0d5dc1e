"""One vehicle's failure is its own: a flagged diagnosis or a dead letter, never the job's.

The engine is driven as the operator drives it: per VIN the session and
dedup snapshots as keyed state holds them (the session's JSON text as a
``StoredSession``; the dedup ids as ``StoredDedup`` text, or parsed), written
back from whatever each step returns. Outages are fakes of the model, the
summary model, the embedder and the store that fail as the real ones do
after their retries (``ModelError``, ``StoreError``); a bug is a foreign
exception from the model.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest

from vdoctor import diagnosis as diagnosis_module
from vdoctor.diagnosis import MAX_FAILURE_CHARS, DiagnosisEngine, RunStats, StepResult, failure_text
from vdoctor.embedders.base import Vectors
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.errors import ConfigError, ModelError, StoreError
from vdoctor.events import parse_event
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.knowledge.search import KnowledgeBase
from vdoctor.knowledge.stores import open_knowledge_store
from vdoctor.memory import summary as summary_module
from vdoctor.memory.session import DedupState, SessionState, StoredDedup, StoredSession
from vdoctor.memory.summarizer import ModelSummarizer, Summarizer
from vdoctor.models.base import ChatModel, ChatResponse, Message, ToolCall, ToolSpec
from vdoctor.models.offline import OfflineModel
from vdoctor.records import (
    MAX_DEAD_LETTER_BYTES,
    MAX_DEAD_LETTER_RAW_CHARS,
    DeadLetter,
    Diagnosis,
    MemoryRecord,
    MemoryRef,
    Phase,
)
from vdoctor.settings import DEFAULT_CASE_RETRY_S
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
T0 = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
SID_1 = f"{VIN}-20261101T081530"  # opened by the alert at T0


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def alert(event_id: str, at: datetime, mv: float) -> dict[str, Any]:
    """A P0A7F alert: 187 mV confirms the fault (the pack's rule is 100 mV), 87 mV does not."""
    return {
        "type": "alert",
        "event_id": event_id,
        "vin": VIN,
        "series": "EV-A",
        "ts": iso(at),
        "alert_text": "电池包单体压差过大",
        "dtc_codes": ["P0A7F"],
        "signals": {"cell_voltage_diff_mv": mv},
    }


def recheck(event_id: str, at: datetime, session_id: str) -> dict[str, Any]:
    return {
        "type": "recheck",
        "event_id": event_id,
        "vin": VIN,
        "session_id": session_id,
        "ts": iso(at),
        "recheck_ok": True,
        "note": "压差 12mV, 复检正常",
    }


def lifecycle(event_id: str, at: datetime) -> dict[str, Any]:
    return {"type": "lifecycle", "event_id": event_id, "vin": VIN, "ts": iso(at), "change": "scrapped"}


@dataclass
class Harness:
    """The operator's part: snapshots in and out as keyed state holds them."""

    engine: DiagnosisEngine
    dedup_kind: Literal["stored", "parsed"] = "stored"
    state: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    now: float = 0.0  # the engine's clock at the retries of waiting cases (``_retry``)

    def send(self, payload: dict[str, Any]) -> StepResult:
        raw = json.dumps(payload, ensure_ascii=False)
        event = parse_event(raw)
        session_json, dedup_json = self.state.get(event.vin, (None, DedupState().model_dump_json()))
        session = StoredSession(session_json) if session_json else None
        dedup = StoredDedup(dedup_json) if self.dedup_kind == "stored" else DedupState.model_validate_json(dedup_json)
        result = self.engine.on_event(session, dedup, event, raw)
        self.state[event.vin] = (
            result.session.model_dump_json() if result.session is not None else None,
            result.dedup.model_dump_json(),
        )
        return result

    def diagnose(self, payload: dict[str, Any]) -> Diagnosis:
        result = self.send(payload)
        assert result.dead_letters == [] and not result.duplicate
        [diagnosis] = result.diagnoses
        return diagnosis

    def dead_letter(self, payload: dict[str, Any]) -> DeadLetter:
        result = self.send(payload)
        assert result.diagnoses == []
        [letter] = result.dead_letters
        assert letter.stage == "process" and letter.raw == json.dumps(payload, ensure_ascii=False)
        # The event is not held as seen: sent again, it is processed.
        assert payload["event_id"] not in result.dedup.seen
        return letter


class FlakyEmbedder(HashingEmbedder):
    """The hashing embedder behind an endpoint that can be down (as the OpenAI embedder fails: ``ModelError``)."""

    def __init__(self) -> None:
        super().__init__()
        self.queries_down = False
        self.passages_down = False

    def embed(self, texts: list[str]) -> Vectors:
        if self.passages_down:
            raise ModelError("embedding endpoint failed for model m: HTTP 503")
        return super().embed(texts)

    def embed_queries(self, texts: list[str]) -> Vectors:
        if self.queries_down:
            raise ModelError("embedding endpoint failed for model m: HTTP 503")
        return super().embed_queries(texts)


@dataclass
class DownModel:
    """A chat model that failed for good (after its retries)."""

    name: str = "down"
    calls: int = 0

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.calls += 1
        raise ModelError("chat model down: gave up after 4 attempts; last error: HTTP 503")

    def close(self) -> None:
        pass


@dataclass
class ScriptedModel:
    """A chat model that answers from a script (tool calls or final content) and keeps what it was sent."""

    answers: list[ChatResponse]
    name: str = "scripted"
    sent: list[list[Message]] = field(default_factory=list)

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.sent.append(list(messages))
        return self.answers[len(self.sent) - 1]

    def close(self) -> None:
        pass


@dataclass
class RaisingOnce:
    """The offline model, but its first call raises ``error`` (a bug, or an interrupt)."""

    error: BaseException
    name: str = "raising-once"
    inner: OfflineModel = field(default_factory=OfflineModel)
    raised: bool = False

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        if not self.raised:
            self.raised = True
            raise self.error
        return self.inner.chat(messages, tools)

    def close(self) -> None:
        pass


class FlakyStore(InMemoryStore):
    """Long-term memory whose soft delete (a lifecycle event) fails while it is down."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def soft_delete(self, vin: str, at: datetime) -> int:
        if self.down:
            raise StoreError("long-term memory at sqlite:///m.db: database is locked")
        return super().soft_delete(vin, at)


@pytest.fixture(scope="module")
def pack() -> KnowledgePack:
    return load_pack()


def engine(
    pack: KnowledgePack,
    *,
    store: InMemoryStore | None = None,
    model: ChatModel | None = None,
    embedder: HashingEmbedder | None = None,
    summarizer: Summarizer | None = None,
    knowledge: KnowledgeBase | None = None,
    working_keep_rounds: int = 6,
) -> DiagnosisEngine:
    return DiagnosisEngine(
        store=store if store is not None else InMemoryStore(),
        model=model or OfflineModel(),
        embedder=embedder or HashingEmbedder(),
        pack=pack,
        summarizer=summarizer,
        knowledge=knowledge,
        working_keep_rounds=working_keep_rounds,
    )


# -- an embedder that stays down ---------------------------------------------------------------------


def test_recall_with_the_embedder_down_diagnoses_without_memory_and_says_so(pack: KnowledgePack) -> None:
    embedder = FlakyEmbedder()
    h = Harness(engine(pack, embedder=embedder))
    h.diagnose(alert("e-1", T0, 187))  # concludes at once: the vehicle's own history now holds a case
    again = h.diagnose(alert("e-2", T0 + timedelta(days=3), 187))
    assert again.memory.own == [MemoryRef(vin=VIN, session_id=SID_1)]  # recalled while the embedder is up

    embedder.queries_down = True
    down = h.diagnose(alert("e-3", T0 + timedelta(days=6), 187))
    # As when the store is down: no memory at all, and the output says so; the agent still diagnoses.
    assert down.memory.degraded and not down.memory.injected
    assert down.memory.own == [] and down.memory.similar == [] and down.memory.tokens == 0
    # The case is written (the store's embedding of it works), merged into the one of 6 days before (same cause).
    assert down.phase is Phase.CONCLUDED and down.flags == ["l3_merged"]


def test_a_case_the_embedder_cannot_embed_is_flagged_and_the_diagnosis_goes_out(pack: KnowledgePack) -> None:
    embedder, store = FlakyEmbedder(), InMemoryStore()
    h = Harness(engine(pack, store=store, embedder=embedder))
    h.diagnose(alert("e-1", T0, 87))
    embedder.passages_down = True
    result = h.send(alert("e-2", T0 + timedelta(hours=2), 187))
    [concluded] = result.diagnoses
    assert concluded.phase is Phase.CONCLUDED and concluded.root_cause
    assert concluded.flags == ["l3_write_failed"]
    assert result.stats.write_failed and result.stats.write_ms is None  # nothing reached the store
    assert store.count() == 0


def test_a_milestone_the_embedder_cannot_embed_is_flagged_and_written_by_the_next_alert(pack: KnowledgePack) -> None:
    embedder, store = FlakyEmbedder(), InMemoryStore()
    h = Harness(engine(pack, store=store, embedder=embedder))
    h.diagnose(alert("e-1", T0, 87))
    embedder.passages_down = True
    # 25 h into the session (an alert within 48 h keeps it open): its first milestone is due.
    missed = h.diagnose(alert("e-2", T0 + timedelta(hours=25), 88))
    assert missed.phase is Phase.INVESTIGATING and missed.flags == ["l3_write_failed"]
    assert store.count() == 0
    embedder.passages_down = False
    written = h.diagnose(alert("e-3", T0 + timedelta(hours=26), 89))
    assert written.flags == ["l3_milestone"]
    assert [r.session_id for r in store.history(VIN)] == [f"{SID_1}-m1"]


def _first_milestone(pack: KnowledgePack, answer: dict[str, Any]) -> MemoryRecord:
    """The milestone a session writes 25 h in, its model answering ``answer`` (investigating, P2) every time."""
    reply = json.dumps({"phase": "INVESTIGATING", "priority": "P2", "confidence": 0.3, **answer})
    store = InMemoryStore()
    h = Harness(engine(pack, store=store, model=ScriptedModel([ChatResponse(content=reply)] * 3)))
    h.diagnose(alert("e-1", T0, 87))
    later = h.diagnose(alert("e-2", T0 + timedelta(hours=25), 88))
    assert later.flags == ["l3_milestone"]
    [milestone] = store.history(VIN)
    return milestone


def test_a_hypothesis_longer_than_a_summary_holds_is_clipped_in_its_milestone(pack: KnowledgePack) -> None:
    """A model's leading hypothesis of 480 characters: the milestone's line carries its start and the record
    lists the whole of it as omitted, instead of every later alert of the session failing on its milestone."""
    cause = "suspected the low-voltage harness connector X12 is corroded " * 8
    milestone = _first_milestone(pack, {"root_cause": cause.strip()})
    assert len(milestone.summary) <= 300 and "leading: suspected the low-voltage harness" in milestone.summary
    assert "…" in milestone.summary
    # The whole hypothesis first; then whatever else the line left no room for (here the readings).
    assert milestone.omitted == [f"leading: {cause.strip()}", "cell_voltage_diff_mv=87→88mV"]


def test_a_milestone_of_more_suspected_codes_than_its_line_holds_names_those_that_fit(pack: KnowledgePack) -> None:
    """A full scan's 60 codes suspected, no hypothesis yet: the line names the first that fit and the record keeps
    them all as omitted. Before, the milestone was no valid record and every later alert was flagged for it."""
    codes = [f"P{0x0100 + i:04X}" for i in range(60)]
    milestone = _first_milestone(pack, {"codes": codes})
    line = milestone.summary.splitlines()[-1]
    assert len(milestone.summary) <= 300 and "leading: suspected P0100 P0101" in line
    named = line.split("leading: suspected ", 1)[1].split(" conf ", 1)[0].split()
    assert named == codes[: len(named)] and 0 < len(named) < len(codes)
    assert milestone.omitted[0] == "suspected: " + " ".join(codes)


def test_a_clipped_hypothesis_never_ends_inside_a_number(pack: KnowledgePack) -> None:
    """A cut 1873456789 must not read as an invented 18 in long-term memory."""
    for pad in range(0, 40, 3):
        cause = "x" * (200 + pad) + " cell diff 1873456789 mV after 4123456 km"
        reply = json.dumps({"phase": "INVESTIGATING", "root_cause": cause, "priority": "P2", "confidence": 0.3})
        store = InMemoryStore()
        h = Harness(engine(pack, store=store, model=ScriptedModel([ChatResponse(content=reply)] * 3)))
        h.diagnose(alert("e-1", T0, 87))
        h.diagnose(alert("e-2", T0 + timedelta(hours=25), 88))
        [milestone] = store.history(VIN)
        line = milestone.summary.splitlines()[-1]
        kept = line.split("leading: ", 1)[1].split("…", 1)[0]
        assert cause.startswith(kept)
        numbers = [t for t in kept.split() if t[:1].isdigit()]
        assert all(n in ("1873456789", "4123456") for n in numbers), kept


def test_a_knowledge_search_the_embedder_fails_is_a_failed_tool_result(pack: KnowledgePack) -> None:
    knowledge_embedder = FlakyEmbedder()
    knowledge_embedder.queries_down = True
    model = ScriptedModel(
        [
            ChatResponse(content=None, tool_calls=(ToolCall("k-1", "search_knowledge", {"query": "P0A7F"}),)),
            ChatResponse(content='{"phase": "INVESTIGATING", "confidence": 0.3}'),
        ]
    )
    knowledge = KnowledgeBase(open_knowledge_store("memory://"), knowledge_embedder)
    h = Harness(engine(pack, model=model, knowledge=knowledge))
    diagnosis = h.diagnose(alert("e-1", T0, 87))
    assert diagnosis.tool_calls == 1 and diagnosis.llm_calls == 2
    assert diagnosis.phase is Phase.INVESTIGATING and diagnosis.confidence == pytest.approx(0.3)
    # The model read that the search failed, and why.
    tool_result = json.loads(model.sent[1][-1].content)
    assert tool_result == {"error": "knowledge search failed: embedding endpoint failed for model m: HTTP 503"}


# -- a summary model that stays down -------------------------------------------------------------------


def test_a_case_the_summary_model_cannot_summarise_is_flagged_and_the_diagnosis_goes_out(pack: KnowledgePack) -> None:
    store, summary_model = InMemoryStore(), DownModel()
    h = Harness(engine(pack, store=store, summarizer=ModelSummarizer(summary_model)))
    h.diagnose(alert("e-1", T0, 87))
    result = h.send(alert("e-2", T0 + timedelta(hours=2), 187))
    [concluded] = result.diagnoses
    assert concluded.phase is Phase.CONCLUDED and concluded.root_cause
    assert concluded.flags == ["summary_model_failed", "l3_write_failed"]
    assert result.stats.write_failed
    assert store.count() == 0 and summary_model.calls == 1


def test_a_fold_the_summary_model_cannot_write_is_written_offline_and_flagged(pack: KnowledgePack) -> None:
    summary_model = DownModel()
    e = engine(pack, summarizer=ModelSummarizer(summary_model), working_keep_rounds=1)
    h = Harness(e)
    first = h.diagnose(alert("e-1", T0, 87))
    assert first.flags == []  # one round: nothing to fold
    # A second round passes keep_rounds=1: the older one is folded, by the offline summarizer.
    second = h.diagnose(alert("e-2", T0 + timedelta(hours=1), 88))
    assert second.phase is Phase.INVESTIGATING and second.flags == ["summary_model_failed"]
    assert summary_model.calls == 1
    result = h.send(alert("e-3", T0 + timedelta(hours=2), 89))
    session = result.session
    assert session is not None and not isinstance(session, StoredSession)
    working = session.working
    assert len(working.rounds) == 1 and working.threshold_folds == 2 and working.fidelity_failures == 0
    # The offline summary's lines: the folded rounds' event lines, with their times.
    assert len(working.summary_lines) == 2 and all(line.startswith("2026-11-01") for line in working.summary_lines)
    assert e.summary_metrics.checked == 2 and e.summary_metrics.failed == 0


# -- what a model's reply may hold -----------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000  # deeper than json reads (RecursionError)


@pytest.mark.parametrize(
    ("reply", "confidence", "flags"),
    [
        # A conclusion without a fix is a guess: the phase goes back, and the confidence is still clamped.
        ('{"phase": "CONCLUDED", "root_cause": "x", "confidence": 85}', 1.0, []),
        ('{"phase": "CONCLUDED", "root_cause": "x", "confidence": -2}', 0.0, []),
        ('{"phase": "CONCLUDED", "root_cause": "x", "confidence": NaN}', 0.0, []),
        ('{"phase": "CONCLUDED", "root_cause": "x", "confidence": Infinity}', 1.0, []),
        ('{"phase": "INVESTIGATING", "confidence": NaN}', 0.0, []),
        ('{"phase": "INVESTIGATING", "confidence": "0.85"}', 0.85, []),
        ('{"phase": "INVESTIGATING", "confidence": "85"}', 1.0, []),
        # Outside the contract: not an answer (the session goes on investigating, flagged).
        ('{"phase": "INVESTIGATING", "confidence": "high"}', 0.0, ["unparseable_answer"]),
        ('{"phase": "INVESTIGATING", "priority": "P4"}', 0.0, ["unparseable_answer"]),
        ('{"phase": "INVESTIGATING", "evidence": "dtc://P0A7F"}', 0.0, ["unparseable_answer"]),
        ('{"phase": "INVESTIGATING", "evidence": [1, 2]}', 0.0, ["unparseable_answer"]),
        ('{"phase": "INVESTIGATING", "codes": null}', 0.0, ["unparseable_answer"]),
        ('{"phase": "concluded"}', 0.0, ["unparseable_answer"]),
        ('{"phase": "INVESTIGATING", "evidence": ' + DEEP + "}", 0.0, ["unparseable_answer"]),
    ],
)
def test_any_reply_gives_a_valid_diagnosis(
    pack: KnowledgePack, reply: str, confidence: float, flags: list[str]
) -> None:
    h = Harness(engine(pack, model=ScriptedModel([ChatResponse(content=reply)])))
    diagnosis = h.diagnose(alert("e-1", T0, 87))
    assert diagnosis.phase is Phase.INVESTIGATING and diagnosis.root_cause is None
    assert diagnosis.confidence == pytest.approx(confidence)
    assert diagnosis.flags == flags


# -- any other error of one event's run: a dead letter, and the job goes on --------------------------------


def test_an_unexpected_error_in_one_events_run_is_a_dead_letter_and_the_job_goes_on(
    pack: KnowledgePack, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(engine(pack, model=RaisingOnce(RuntimeError("tool schema mismatch in step 3"))))
    with caplog.at_level(logging.WARNING, logger="vdoctor.diagnosis"):
        letter = h.dead_letter(alert("e-1", T0, 87))
    assert letter.error == "processing failed: RuntimeError (its message and traceback are in the job's log)"
    # Logged at WARNING with the traceback.
    [logged] = [r for r in caplog.records if r.name == "vdoctor.diagnosis"]
    assert logged.levelno == logging.WARNING and "e-1" in logged.getMessage()
    assert logged.exc_info is not None and isinstance(logged.exc_info[1], RuntimeError)
    assert h.state[VIN][0] is None  # no session was opened by the failed run
    # The job goes on: the same event sent again, and the next one, are diagnosed.
    assert h.diagnose(alert("e-1", T0, 87)).session_id == SID_1
    assert h.diagnose(alert("e-2", T0 + timedelta(hours=1), 88)).session_id == SID_1


def test_a_failed_alert_gives_back_the_stored_session_untouched(pack: KnowledgePack) -> None:
    h = Harness(engine(pack))
    h.diagnose(alert("e-1", T0, 87))
    stored = h.state[VIN][0]
    h.engine.model = RaisingOnce(ValueError("unexpected reply shape"))
    result = h.send(alert("e-2", T0 + timedelta(hours=1), 88))
    assert [d.error for d in result.dead_letters] == [
        "processing failed: ValueError (its message and traceback are in the job's log)"
    ]
    # The alert's run read the session and changed it before it failed: the session as stored is kept.
    assert isinstance(result.session, StoredSession) and result.session.model_dump_json() == stored


def test_a_failed_alert_gives_back_a_live_session_as_it_was_before_the_run(pack: KnowledgePack) -> None:
    """A vehicle's chain of runs hands its session on live: a run that fails half-way must not leave its
    changes in it, or the same alert sent again (its id leaves the dedup) would be counted twice."""
    from vdoctor.events import parse_event
    from vdoctor.memory.session import SessionState

    e = engine(pack)
    dedup = DedupState()
    first = e.on_event(None, dedup, parse_event(json.dumps(alert("e-1", T0, 87))), "e-1")
    live = first.session
    assert isinstance(live, SessionState) and live.alerts == 1
    before = live.model_dump_json()
    e.model = RaisingOnce(ValueError("unexpected reply shape"))
    raw = json.dumps(alert("e-2", T0 + timedelta(hours=1), 88))
    failed = e.on_event(live, first.dedup, parse_event(raw), raw)
    assert failed.dead_letters and isinstance(failed.session, StoredSession)
    assert failed.session.model_dump_json() == before  # not the half-run's (alerts 2, the code counted twice)
    again = e.on_event(failed.session, failed.dedup, parse_event(raw), raw)
    assert again.diagnoses and isinstance(again.session, SessionState)
    assert again.session.alerts == 2 and again.session.codes == {"P0A7F": 2}


def test_interrupts_still_propagate(pack: KnowledgePack) -> None:
    h = Harness(engine(pack, model=RaisingOnce(KeyboardInterrupt())))
    with pytest.raises(KeyboardInterrupt):
        h.send(alert("e-1", T0, 87))


def test_a_failure_text_names_the_type_and_bounds_the_message() -> None:
    # A foreign error's message may hold anything a library put there (a URL, a reply): its type only.
    foreign = failure_text(KeyError("sk-secret"))
    assert foreign == "processing failed: KeyError (its message and traceback are in the job's log)"
    # Ours are written to be shown, bounded.
    assert failure_text(ConfigError("model down")) == "processing failed: ConfigError: model down"
    long = failure_text(ConfigError("x" * 10_000))
    assert long == "processing failed: ConfigError: " + "x" * MAX_FAILURE_CHARS + "…"


# -- a dead letter's event may be sent again -----------------------------------------------------------------


@pytest.mark.parametrize("dedup_kind", ["stored", "parsed"])
def test_a_recheck_before_its_case_is_a_dead_letter_and_processed_when_sent_again(
    pack: KnowledgePack, dedup_kind: Literal["stored", "parsed"]
) -> None:
    store = InMemoryStore()
    h = Harness(engine(pack, store=store), dedup_kind=dedup_kind)
    early = recheck("r-1", T0 + timedelta(days=2), SID_1)
    # The recheck's topic delivered it before the alerts' topic delivered the case.
    letter = h.dead_letter(early)
    assert SID_1 in letter.error
    h.diagnose(alert("e-1", T0, 87))
    assert h.diagnose(alert("e-2", T0 + timedelta(hours=2), 187)).phase is Phase.CONCLUDED
    again = h.send(early)
    assert not again.duplicate and again.dead_letters == []
    case = store.get(VIN, SID_1)
    assert case is not None and case.recheck_ok is True
    # Processed now, so held as seen: a replay of it is a duplicate.
    assert h.send(early).duplicate


def test_a_process_dead_letter_of_a_line_near_a_megabyte_keeps_it_within_the_bound(pack: KnowledgePack) -> None:
    """The raw of a process dead letter is the line as received: one near the broker's limit is cut."""
    h = Harness(engine(pack))
    early = recheck("r-1", T0 + timedelta(days=2), SID_1) | {"attachment": '"' * 500_000}  # an unknown field
    raw = json.dumps(early, ensure_ascii=False)
    [letter] = h.send(early).dead_letters
    assert letter.stage == "process" and SID_1 in letter.error
    assert len(letter.model_dump_json().encode()) <= MAX_DEAD_LETTER_BYTES  # 1,000,000 bytes of \" uncut
    assert letter.raw == raw[:MAX_DEAD_LETTER_RAW_CHARS] and letter.raw_truncated
    assert (letter.raw_chars, letter.raw_bytes) == (len(raw), len(raw.encode()))


def test_a_lifecycle_event_the_store_refused_is_processed_when_sent_again(pack: KnowledgePack) -> None:
    store = FlakyStore()
    h = Harness(engine(pack, store=store))
    h.diagnose(alert("e-1", T0, 187))
    store.down = True
    scrapped = lifecycle("l-1", T0 + timedelta(days=1))
    letter = h.dead_letter(scrapped)
    assert letter.error.startswith("long-term memory unavailable: ")
    assert h.state[VIN][0] is not None  # the session stays until the event is processed
    store.down = False
    assert h.send(scrapped).dead_letters == []
    ended = h.state[VIN][0]
    assert ended is not None and '"phase":"CONCLUDED"' in ended and '"left_care_at":"2026-11-02T08:15:30Z"' in ended
    assert [r.valid for r in store.history(VIN)] == [False]


# -- key facts from a model's JSON answer -------------------------------------------------------------------


def test_the_keys_of_a_models_json_answer_are_no_key_facts(pack: KnowledgePack) -> None:
    """A model that writes every key the prompt asks for, its lists empty: ``"excluded": [], "voided": []``
    read as text made an excluded and a void key fact of JSON fragments on every answer, which took the places
    of real facts in the stored summary. Its lists are read from the parsed answer; its prose still as text."""
    empty = {"codes": ["P0A7F"], "evidence": [], "excluded": [], "voided": []}
    first = {"phase": "INVESTIGATING", "priority": "P2", "confidence": 0.4, "root_cause": None, **empty}
    ruled_out = {**first, "root_cause": "suspected cell imbalance, 187mV across the pack", "excluded": ["冷却泵故障"]}
    replies = [ChatResponse(content="Answer:\n" + json.dumps(r, ensure_ascii=False)) for r in (first, ruled_out)]
    h = Harness(engine(pack, model=ScriptedModel(replies)))
    h.diagnose(alert("e-1", T0, 87))
    session = h.send(alert("e-2", T0 + timedelta(hours=1), 88)).session
    assert session is not None and not isinstance(session, StoredSession)
    facts = [(f.kind.value, f.text) for f in session.working.key_facts]
    assert [text for kind, text in facts if kind in ("excluded", "void")] == ["冷却泵故障"]
    # The answer's prose is still read: the reading its cause names.
    assert ("reading", "187mV") in facts


# -- a recheck verifies a concluded case, never a milestone ------------------------------------------------


def test_a_recheck_never_verifies_a_milestone(pack: KnowledgePack) -> None:
    """A session open 25 h writes a milestone, what it guessed so far. A recheck that names no session took the
    vehicle's newest record, the milestone, and marked it verified: other vehicles then recalled the guess as a
    verified similar case. Now it verifies the newest concluded case (none here: a dead letter), and a recheck
    naming the milestone's id is refused, saying why."""
    store = InMemoryStore()
    guess = json.dumps({"phase": "INVESTIGATING", "priority": "P2", "confidence": 0.3, "root_cause": "harness"})
    h = Harness(engine(pack, store=store, model=ScriptedModel([ChatResponse(content=guess)] * 2)))
    h.diagnose(alert("e-1", T0, 87))
    assert h.diagnose(alert("e-2", T0 + timedelta(hours=25), 88)).flags == ["l3_milestone"]
    [milestone] = store.history(VIN)
    at = T0 + timedelta(hours=26)
    unnamed = h.dead_letter({k: v for k, v in recheck("r-1", at, "").items() if k != "session_id"})
    assert "has no valid concluded case" in unnamed.error
    named = h.dead_letter(recheck("r-2", at, milestone.session_id))
    assert "names a milestone" in named.error
    [still] = store.history(VIN)
    assert still.recheck_ok is None and still.verified_ts is None


def test_a_recheck_without_a_session_id_verifies_the_case_before_the_open_sessions_milestones(
    pack: KnowledgePack,
) -> None:
    store = InMemoryStore()
    h = Harness(engine(pack, store=store))
    h.diagnose(alert("e-1", T0, 187))  # concludes at once (187 mV confirms P0A7F)
    guess = json.dumps({"phase": "INVESTIGATING", "priority": "P2", "confidence": 0.3, "root_cause": "harness"})
    h.engine.model = ScriptedModel([ChatResponse(content=guess)] * 2)
    later = T0 + timedelta(days=3)
    h.diagnose(alert("e-2", later, 87))  # a new session, still open 25 h on: its milestone is the newest record
    assert h.diagnose(alert("e-3", later + timedelta(hours=25), 88)).flags == ["l3_milestone"]
    h.send({k: v for k, v in recheck("r-1", later + timedelta(hours=26), "").items() if k != "session_id"})
    verified = {r.session_id: r.recheck_ok for r in store.history(VIN)}
    assert verified == {SID_1: True, f"{VIN}-{later:%Y%m%dT%H%M%S}-m1": None}


# -- two sessions opened in one second --------------------------------------------------------------------


def test_a_session_opened_in_the_second_the_one_before_it_opened_gets_an_id_of_its_own(pack: KnowledgePack) -> None:
    """Two alerts of one second, the first concluding at once: the second opened a session of the same id,
    and its case replaced the first one's in long-term memory as if it were the same session run again."""
    store = InMemoryStore()
    first = {"phase": "CONCLUDED", "root_cause": "cell imbalance", "fix_action": "balance the pack", "priority": "P1",
             "confidence": 0.9, "codes": ["P0A7F"], "evidence": ["dtc://P0A7F"]}  # fmt: skip
    second = {**first, "root_cause": "coolant pump failure", "fix_action": "replace the pump", "priority": "P2"}
    replies = [ChatResponse(content=json.dumps(a)) for a in (first, second, first)]
    h = Harness(engine(pack, store=store, model=ScriptedModel(replies)))
    diagnoses = [h.diagnose(alert(f"e-{i}", T0, 87)) for i in range(3)]
    assert [d.session_id for d in diagnoses] == [SID_1, f"{SID_1}-2", f"{SID_1}-3"]
    # Each later session recalls the cases before it as the vehicle's own history.
    assert [[m.session_id for m in d.memory.own] for d in diagnoses] == [[], [SID_1], [f"{SID_1}-2", SID_1]]
    # Two records; the third session, of the first one's cause, merged into its record (the 30-day rule).
    assert diagnoses[2].flags == ["l3_merged"]
    assert [(r.session_id, r.root_cause, r.merged_sessions) for r in store.history(VIN)] == [
        (f"{SID_1}-2", "coolant pump failure", []),
        (SID_1, "cell imbalance", [f"{SID_1}-3"]),
    ]
    stored = h.state[VIN][0]
    assert stored is not None and StoredSession(stored).session_id == f"{SID_1}-3"


def test_following_session_ids() -> None:
    from vdoctor.events import following_session_id

    assert following_session_id(SID_1, None) == SID_1
    assert following_session_id(SID_1, f"{VIN}-20261101T081529") == SID_1
    assert following_session_id(SID_1, SID_1) == f"{SID_1}-2"
    assert following_session_id(SID_1, f"{SID_1}-9") == f"{SID_1}-10"


def test_a_late_alert_in_the_second_of_an_older_session_never_takes_that_sessions_id(pack: KnowledgePack) -> None:
    """A case concluded and verified; a later session; then a late alert of another fault in the first
    session's second: it took the first session's id, and its case replaced the verified one in long-term
    memory, verdict and all (found by an audit)."""
    store = InMemoryStore()
    h = Harness(engine(pack, store=store))
    assert h.diagnose(alert("e-1", T0, 187)).session_id == SID_1
    h.send(recheck("r-1", T0 + timedelta(days=2), SID_1))
    other = {"alert_text": "Dim lights", "dtc_codes": ["P0562"], "signals": {"battery_voltage_v": 10.8}}
    h.diagnose({**alert("e-2", T0 + timedelta(days=3), 187), **other})
    late = {**alert("e-1b", T0, 187), "alert_text": "ABS通讯丢失，ABS灯亮", "dtc_codes": ["U0121"]}
    late_diagnosis = h.diagnose(late)
    assert late_diagnosis.session_id == f"{SID_1}-2"
    kept = store.get(VIN, SID_1)
    assert kept is not None and kept.recheck_ok is True and kept.dtc_codes == ["P0A7F"]
    # The vehicle's next alert, of the first session's second too, takes the id after both.
    again = {**late, "event_id": "e-1c", "alert_text": "ESP和ABS故障灯同时点亮"}
    h.state[VIN] = (None, h.state[VIN][1])  # its state expired meanwhile: the store alone can tell
    assert h.diagnose(again).session_id in {f"{SID_1}-2", f"{SID_1}-3"}
    assert store.get(VIN, SID_1) == kept


def codes_only(event_id: str, at: datetime, codes: list[str]) -> dict[str, Any]:
    """An alert without text: its codes (and a reading) alone."""
    payload = {**alert(event_id, at, 187), "dtc_codes": codes}
    del payload["alert_text"]
    return payload


def test_a_late_codes_only_alert_in_the_second_of_an_older_codes_only_session_gets_an_id_of_its_own(
    pack: KnowledgePack,
) -> None:
    """The opening texts alone told the two apart, and alerts without text all say the same (nothing): a late
    codes-only alert of another fault took the older codes-only session's id, and its case replaced the
    verified one (a gap the README named). The codes the older session saw tell them apart now."""
    store = InMemoryStore()
    h = Harness(engine(pack, store=store))
    assert h.diagnose(codes_only("e-1", T0, ["P0A7F"])).session_id == SID_1
    h.send(recheck("r-1", T0 + timedelta(days=2), SID_1))
    h.diagnose({**codes_only("e-2", T0 + timedelta(days=3), ["P0562"]), "signals": {"battery_voltage_v": 10.8}})
    assert h.diagnose(codes_only("e-1b", T0, ["U0121"])).session_id == f"{SID_1}-2"
    kept = store.get(VIN, SID_1)
    assert kept is not None and kept.recheck_ok is True and kept.dtc_codes == ["P0A7F"] and kept.alert_text == ""


def test_a_codes_only_session_run_again_keeps_its_id(pack: KnowledgePack) -> None:
    """A restore runs a codes-only session again that long-term memory holds: its codes are the case's, so
    it is the same session and keeps the id, not a second case of the same alert."""
    store = InMemoryStore()
    Harness(engine(pack, store=store)).diagnose(codes_only("e-1", T0, ["P0A7F", "U0121"]))
    again = Harness(engine(pack, store=store))
    assert again.diagnose(codes_only("e-1", T0, ["P0A7F", "U0121"])).session_id == SID_1
    assert [r.session_id for r in store.history(VIN)] == [SID_1]


def test_a_session_replayed_into_the_case_a_later_session_merged_into_keeps_its_id(pack: KnowledgePack) -> None:
    """A later session of the same fault merged into the first one's case, whose text and request are then
    the later session's: its codes seen lack one of the first alert's. A replay of the first session took
    the next id, merged into its own case as another session, and the verified verdict was reset (found by
    a diff review). A merged case is judged by its text, as before."""
    store = InMemoryStore()
    h = Harness(engine(pack, store=store))
    first = {**alert("a-1", T0, 187), "dtc_codes": ["P0A7F", "U0121"]}
    later = alert("b-1", T0 + timedelta(days=3), 187)  # the same text, P0A7F alone
    assert h.diagnose(first).session_id == SID_1
    assert h.diagnose(later).flags == ["l3_merged"]
    h.send(recheck("r-1", T0 + timedelta(days=4), SID_1))
    replay = Harness(engine(pack, store=store))  # the same input into the same store, the state lost
    assert replay.diagnose(first).session_id == SID_1
    replay.diagnose(later)
    [case] = store.history(VIN)
    assert case.session_id == SID_1 and case.recheck_ok is True and len(case.merged_sessions) == 1


def test_a_late_codes_only_alert_of_another_fault_never_takes_the_id_of_a_merged_case(pack: KnowledgePack) -> None:
    """A case a later session merged into, verified; then a late codes-only alert of another fault in its
    second. Judged by text alone (a merged case's request is the newest session's), it took the id, and its
    case replaced the verified one, merged session and all (found by a diff review)."""
    store = InMemoryStore()
    h = Harness(engine(pack, store=store))
    assert h.diagnose(codes_only("e-1", T0, ["P0A7F"])).session_id == SID_1
    assert h.diagnose(codes_only("e-2", T0 + timedelta(days=3), ["P0A7F"])).flags == ["l3_merged"]
    h.send(recheck("r-1", T0 + timedelta(days=4), SID_1))
    late = {**codes_only("e-1b", T0, ["P0562"]), "signals": {"battery_voltage_v": 10.8}}
    assert h.diagnose(late).session_id == f"{SID_1}-2"
    kept = store.get(VIN, SID_1)
    assert kept is not None and kept.recheck_ok is True and kept.dtc_codes == ["P0A7F"] and kept.merged_sessions


def test_a_case_opened_alike_by_text_and_the_codes_its_session_saw(pack: KnowledgePack) -> None:
    from vdoctor.diagnosis import opened_alike

    store = InMemoryStore()
    Harness(engine(pack, store=store)).diagnose(codes_only("e-1", T0, ["P0A7F", "U0121"]))
    case = store.get(VIN, SID_1)
    assert case is not None
    assert opened_alike(case, "", ["U0121"]) and opened_alike(case, "", ["P0A7F", "U0121"])
    assert not opened_alike(case, "", ["P0562"]) and not opened_alike(case, "", ["P0A7F", "P0562"])
    assert not opened_alike(case, "电池包单体压差过大", ["P0A7F"])
    # A request not kept (too long, or written by a release before requests were), or one this release
    # cannot read: the text decides, as before.
    for source in ("", "not json", '{"kind": "case"}', "[1, 2]"):
        assert opened_alike(case.model_copy(update={"source": source}), "", ["P0562"])


class DownStore(InMemoryStore):
    """Long-term memory that is down for every read and write."""

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        raise StoreError("long-term memory at mysql://fleet: connection refused")

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        raise StoreError("long-term memory at mysql://fleet: connection refused")


def test_a_session_opens_at_once_while_long_term_memory_is_down(pack: KnowledgePack) -> None:
    """Whether the new session's id is taken was asked through the retrying store's get, which waits out an
    outage as a write must (300 s by default): every vehicle's first alert stalled its run (found by a diff
    review). It is asked at once now, as recall is: the id stays and the diagnosis goes out, degraded."""
    from vdoctor.stores.retry import RetryingStore

    slept: list[float] = []
    store = RetryingStore(DownStore(), 300.0, sleep=slept.append)
    diagnosis = Harness(engine(pack, store=store)).diagnose(alert("e-1", T0, 187))  # type: ignore[arg-type]
    assert slept == [] and diagnosis.session_id == SID_1 and diagnosis.memory.degraded


def test_a_session_run_again_keeps_the_id_its_case_was_written_under(pack: KnowledgePack) -> None:
    """A restore, or a replay into the same store, runs a session again that long-term memory already holds:
    its alert says what the stored case's did, so it is the same session and keeps the id (writes are
    idempotent by id), not a second case of the same alert."""
    store = InMemoryStore()
    first = Harness(engine(pack, store=store))
    first.diagnose(alert("e-1", T0, 187))
    again = Harness(engine(pack, store=store))
    assert again.diagnose(alert("e-1", T0, 187)).session_id == SID_1
    assert [r.session_id for r in store.history(VIN)] == [SID_1]


# -- a case whose write failed is tried again at the vehicle's next alert ------------------------------------


def test_a_case_the_embedder_could_not_embed_is_written_at_the_next_alert(pack: KnowledgePack) -> None:
    """The session stayed concluded and unwritten, and the next alert opened a new session over it: the case
    was lost although the embedder was back a minute later (found by an audit)."""
    embedder, store = FlakyEmbedder(), InMemoryStore()
    h = Harness(engine(pack, store=store, embedder=embedder))
    embedder.passages_down = True
    assert h.diagnose(alert("e-1", T0, 187)).flags == ["l3_write_failed"]
    assert store.count() == 0
    embedder.passages_down = False
    later = h.diagnose(alert("e-2", T0 + timedelta(hours=2), 87))
    assert later.flags == ["l3_written_late"] and later.session_id != SID_1
    assert [r.session_id for r in store.history(VIN)] == [SID_1]
    # Written before the new session opened: it recalls the case as the vehicle's own history.
    assert later.memory.own == [MemoryRef(vin=VIN, session_id=SID_1)]
    # Once: the alert after it has nothing left to write.
    assert h.diagnose(alert("e-3", T0 + timedelta(hours=3), 87)).flags == []


def test_an_alert_that_writes_the_waiting_case_and_its_own_counts_two_writes(pack: KnowledgePack) -> None:
    """``l3_writes`` counted one write per run: the waiting case written late and the alert's own case were one."""
    store = UpsertDownStore()
    store.down = True
    h = Harness(engine(pack, store=store))
    assert h.diagnose(alert("e-1", T0, 187)).flags == ["l3_write_failed"]
    assert h.send(alert("e-1", T0, 187)).duplicate  # (the failed write counted one, at its run: not here)
    store.down = False
    upserts = store.upserts
    result = h.send(alert("e-2", T0 + timedelta(hours=2), 188))  # concludes a session of its own (merged)
    [diagnosis] = result.diagnoses
    assert diagnosis.flags[0] == "l3_written_late" and diagnosis.phase == "CONCLUDED"
    assert result.stats.writes == 2 == store.upserts - upserts and result.stats.late_write
    # A late write that fails is no write (``l3_late_write_failed``: the case is lost), the alert's own is one.
    store.down = True
    h.diagnose(alert("e-3", T0 + timedelta(hours=4), 187))
    store.down = False
    h.engine.store.upsert = lambda record: (_ for _ in ()).throw(StoreError("refused"))  # type: ignore[method-assign]
    lost = h.send(alert("e-4", T0 + timedelta(hours=6), 87))
    assert lost.diagnoses[0].flags == ["l3_late_write_failed"] and lost.stats.writes == 0 and lost.stats.case_lost


def test_a_case_whose_second_write_fails_too_is_flagged_at_that_alert(pack: KnowledgePack) -> None:
    embedder, store = FlakyEmbedder(), InMemoryStore()
    h = Harness(engine(pack, store=store, embedder=embedder))
    embedder.passages_down = True
    h.diagnose(alert("e-1", T0, 187))
    again = h.diagnose(alert("e-2", T0 + timedelta(hours=2), 87))
    assert again.flags == ["l3_late_write_failed"] and store.count() == 0
    embedder.passages_down = False
    assert h.diagnose(alert("e-3", T0 + timedelta(hours=3), 87)).flags == []  # tried once, not at every alert
    assert store.count() == 0


def test_a_case_waiting_for_its_second_write_is_written_before_a_lifecycle_event_sets_the_vehicle_aside(
    pack: KnowledgePack,
) -> None:
    """The case waited in the session for the vehicle's next alert; a transfer or scrap ended the session, and the
    case with it, without a word (found by an audit). Now it is written, and set invalid with the others."""
    embedder, store = FlakyEmbedder(), InMemoryStore()
    h = Harness(engine(pack, store=store, embedder=embedder))
    embedder.passages_down = True
    assert h.diagnose(alert("e-1", T0, 187)).flags == ["l3_write_failed"]
    embedder.passages_down = False
    result = h.send(lifecycle("l-1", T0 + timedelta(days=1)))
    assert result.dead_letters == [] and result.session is not None and not result.session.l3_pending
    [case] = store.history(VIN)
    assert case.session_id == SID_1 and case.valid is False and case.invalid_ts == T0 + timedelta(days=1)


# -- ... and on the operator's retry timer meanwhile (``DiagnosisEngine.retry_case``) ------------------------


class UpsertDownStore(InMemoryStore):
    """Long-term memory whose upserts fail while it is down; counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.upserts = 0

    def upsert(self, record: MemoryRecord) -> None:
        self.upserts += 1
        if self.down:
            raise StoreError("long-term memory at mysql://fleet: connection refused")
        super().upsert(record)


def _retry(h: Harness) -> StepResult:
    """The operator's retry of the vehicle's waiting case, its state read and written as the job's: a retry
    interval after the one before, as the operator's timer runs them."""
    h.now += DEFAULT_CASE_RETRY_S
    h.engine.clock = lambda: h.now
    session_json, dedup_json = h.state[VIN]
    result = h.engine.retry_case(StoredSession(session_json) if session_json else None, StoredDedup(dedup_json))
    h.state[VIN] = (result.session.model_dump_json() if result.session is not None else None, dedup_json)
    return result


def test_a_case_the_store_refused_is_written_by_a_retry_without_waiting_out_the_outage(pack: KnowledgePack) -> None:
    """A case whose write failed waited in its session for the vehicle's next alert: a vehicle silent for longer
    than its session state's TTL lost it without a word. The operator's timer tries it meanwhile, once a try,
    not through the store's own retries (a worker must not wait out an outage for a case that can wait)."""
    from vdoctor.stores.retry import RetryingStore

    inner, slept, clock = UpsertDownStore(), [], [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    inner.down = True
    store = RetryingStore(inner, 30.0, sleep=sleep, clock=lambda: clock[0])
    h = Harness(engine(pack, store=store))  # type: ignore[arg-type]
    assert h.diagnose(alert("e-1", T0, 187)).flags == ["l3_write_failed"] and inner.count() == 0
    slept.clear()
    before = inner.upserts
    still = _retry(h)
    assert inner.upserts == before + 1 and slept == [] and still.session is not None and still.session.l3_pending
    # A failed try is neither a write nor one failed for good (counted once, at the run that concluded).
    assert not still.stats.write_failed and still.stats.write_ms is None and not still.stats.late_write
    inner.down = False
    written = _retry(h)
    assert written.session is not None and not written.session.l3_pending and written.session.l3_written
    assert [r.session_id for r in inner.history(VIN)] == [SID_1] and written.stats.write_ms is not None
    assert written.stats.late_write
    # Nothing waits any more: a later try and the next alert write nothing.
    upserts = inner.upserts
    assert _retry(h).session is not None and inner.upserts == upserts
    assert h.diagnose(alert("e-2", T0 + timedelta(hours=2), 87)).flags == []


class ReadDownStore(UpsertDownStore):
    """Long-term memory down for reads as well as writes while it is down."""

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        if self.down:
            raise StoreError("long-term memory at mysql://fleet: connection refused")
        return super().get(vin, session_id)


def test_a_try_while_the_store_is_down_costs_no_summary_and_no_try_changes_working_memory(
    pack: KnowledgePack,
) -> None:
    """Each try summarised the case again (a summary model's call, and its check) and folded the session's working
    memory once more, store down or not (found by a review). A try asks the store first, and works on a copy."""
    store = ReadDownStore()
    store.down = True
    h = Harness(engine(pack, store=store))
    assert h.diagnose(alert("e-1", T0, 187)).flags == ["l3_write_failed"]
    checked = h.engine.summary_metrics.checked
    working = StoredSession(h.state[VIN][0] or "").load().working.model_dump_json()
    for _ in range(3):
        assert _retry(h).session is not None
    assert h.engine.summary_metrics.checked == checked and store.upserts == 1
    # Up for reads, down for writes: the try summarises and fails at the write; working memory is as it was.
    store.down = False
    store.get = lambda vin, session_id: None  # type: ignore[method-assign]
    store.upsert = lambda record: (_ for _ in ()).throw(StoreError("refused"))  # type: ignore[method-assign]
    still = _retry(h)
    assert still.session is not None and still.session.l3_pending
    assert h.engine.summary_metrics.checked == checked + 1
    assert StoredSession(h.state[VIN][0] or "").load().working.model_dump_json() == working


def test_after_a_try_found_the_store_not_answering_the_other_tries_wait_a_while_without_asking_it(
    pack: KnowledgePack,
) -> None:
    """A store that does not answer (a host gone, not a refused connection) held each vehicle's try for its connect
    timeout, a worker each, or the operator's thread at concurrency 1: a thousand vehicles with a case waiting, ten
    seconds each, every ten minutes. After one try's read fails that slowly, the others wait for their next turn for a
    while (``store_down_pause_s``) without asking it."""
    store = ReadDownStore()
    reads: list[str] = []
    down_get = store.get
    clock = [1000.0]
    answer_s = [10.0]  # how long the store takes to fail: a connect timeout

    def get(vin: str, session_id: str) -> MemoryRecord | None:
        reads.append(vin)
        clock[0] += answer_s[0]
        return down_get(vin, session_id)

    store.get = get  # type: ignore[method-assign]
    store.down = True
    h = Harness(engine(pack, store=store))
    other = VIN[:-1] + "5"
    h.diagnose(alert("e-1", T0, 187))
    h.diagnose({**alert("e-2", T0, 187), "vin": other})
    h.engine.clock = lambda: clock[0]

    def retry(vin: str) -> StepResult:
        session_json, dedup_json = h.state[vin]
        return h.engine.retry_case(StoredSession(session_json or ""), StoredDedup(dedup_json), vin)

    # A quick failure (a refusal, or an error of the vehicle's own record: a review found one vehicle's bad record
    # held back the others' tries every round for 7 days) pauses nothing.
    answer_s[0] = 0.01
    reads.clear()
    retry(VIN)
    retry(other)
    assert reads == [VIN, other]
    answer_s[0] = 10.0
    reads.clear()
    assert retry(VIN).session is not None and reads == [VIN]
    clock[0] += h.engine.store_down_pause_s - 1
    waited = retry(other)
    assert reads == [VIN] and isinstance(waited.session, StoredSession) and waited.session.l3_pending
    clock[0] += 1
    store.down = False
    written = retry(other)
    assert reads == [VIN, other] and written.session is not None and written.session.l3_written


def test_a_retry_of_a_vehicle_with_nothing_waiting_changes_nothing(pack: KnowledgePack) -> None:
    h = Harness(engine(pack))
    h.diagnose(alert("e-1", T0, 187))
    before = h.state[VIN]
    result = h.engine.retry_case(StoredSession(before[0] or ""), StoredDedup(before[1]))
    assert isinstance(result.session, StoredSession) and result.session.json == before[0]
    assert h.engine.retry_case(None, DedupState()).session is None


def test_a_waiting_case_whose_summary_fails_its_check_on_a_retry_waits_no_more(
    pack: KnowledgePack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No retry changes a summary that fails the fidelity check (such a summary never reaches long-term memory):
    the case is let go, the log says why, and no timer tries it again."""
    embedder = FlakyEmbedder()
    h = Harness(engine(pack, embedder=embedder))
    embedder.passages_down = True
    h.diagnose(alert("e-1", T0, 187))
    embedder.passages_down = False
    real = summary_module.summarize_case

    def failing(*args: Any, **kwargs: Any) -> Any:
        case = real(*args, **kwargs)
        return replace(case, report=replace(case.report, missing=["cell_voltage_diff_mv=187"]))

    monkeypatch.setattr(diagnosis_module, "summarize_case", failing)
    result = _retry(h)
    assert result.session is not None and not result.session.l3_pending and not result.session.l3_written
    assert result.stats.case_lost  # (counted: ``l3_cases_lost``)


@pytest.mark.parametrize("given", ["live", "stored"])
def test_a_lifecycle_event_the_store_refused_gives_back_the_session_as_it_was(pack: KnowledgePack, given: str) -> None:
    """The waiting case's write failed again: the session comes back as it was given, its case waiting. A live
    session (a vehicle's chain of runs) came back changed in place by the write (found by a review)."""
    embedder, store = FlakyEmbedder(), FlakyStore()
    h = Harness(engine(pack, store=store, embedder=embedder))
    embedder.passages_down = True
    h.diagnose(alert("e-1", T0, 187))
    store.down = True
    before = h.state[VIN][0] or ""
    session = StoredSession(before).load() if given == "live" else StoredSession(before)
    event = parse_event(json.dumps(lifecycle("l-1", T0 + timedelta(days=1))))
    result = h.engine.on_event(session, StoredDedup(h.state[VIN][1]), event, "raw")
    assert [x.stage for x in result.dead_letters] == ["process"]
    assert result.session is not None and result.session.model_dump_json() == before
    assert result.stats == RunStats() and "l-1" not in result.dedup.seen


@pytest.mark.parametrize("given", ["live", "stored"])
def test_a_lifecycle_event_whose_soft_delete_failed_after_it_wrote_the_waiting_case_keeps_it_written(
    pack: KnowledgePack, given: str
) -> None:
    """The case was written, then the soft delete failed: the event's dead letter dropped the write's figures and
    gave the session back with its case still waiting, so the next try or the event sent again wrote it a second
    time (a review). The session now comes back as written, and the write is counted."""
    embedder, store = FlakyEmbedder(), FlakyStore()
    h = Harness(engine(pack, store=store, embedder=embedder))
    embedder.passages_down = True
    h.diagnose(alert("e-1", T0, 187))
    embedder.passages_down = False
    store.down = True
    stored = h.state[VIN][0] or ""
    session = StoredSession(stored).load() if given == "live" else StoredSession(stored)
    event = parse_event(json.dumps(lifecycle("l-1", T0 + timedelta(days=1))))
    result = h.engine.on_event(session, StoredDedup(h.state[VIN][1]), event, "raw")
    [letter] = result.dead_letters
    assert letter.error.startswith("long-term memory unavailable: ") and "l-1" not in result.dedup.seen
    assert isinstance(result.session, SessionState) and not result.session.l3_pending and result.session.l3_written
    assert result.session.phase == Phase.CONCLUDED and result.session.left_care_at is None  # (not ended)
    assert (result.stats.late_write, result.stats.writes) == (True, 1)
    [written] = store.history(VIN)
    assert written.valid
    # Sent again with the store back: the vehicle leaves the fleet's care, and its case is not written again.
    store.down = False
    h.state[VIN] = (result.session.model_dump_json(), result.dedup.model_dump_json())
    again = h.send(lifecycle("l-1", T0 + timedelta(days=1)))
    assert again.dead_letters == [] and again.stats.writes == 0 and not again.stats.late_write
    [ended] = store.history(VIN)
    assert not ended.valid


def test_a_reading_delivered_late_is_not_the_latest_one(pack: KnowledgePack) -> None:
    """Readings of 120 mV at 08:00 and 250 at 10:00, then one of 150 taken at 09:00 that came last (a vehicle out
    of coverage sends what it stored): the span took 150 as the latest, and the case gave 120->150 (found by an
    audit). First and latest go by the readings' times; a span stored before they were kept reads as it did."""
    investigating = {"phase": "INVESTIGATING", "priority": "P2", "confidence": 0.4, "codes": ["P0A7F"]}
    h = Harness(engine(pack, model=ScriptedModel([ChatResponse(content=json.dumps(investigating))] * 4)))
    for event_id, hours, mv in (("e-1", 0, 120), ("e-2", 2, 250), ("e-3", 1, 150), ("e-0", -1, 90)):
        h.diagnose(alert(event_id, T0 + timedelta(hours=hours), mv))
    stored = h.state[VIN][0]
    assert stored is not None
    span = StoredSession(stored).load().signals["cell_voltage_diff_mv"]
    assert (span.first, span.lowest, span.highest, span.latest) == (90, 90, 250, 250)
    older = span.model_copy(update={"first_at": None, "latest_at": None})  # a state from before the times
    older.add(300, int((T0 - timedelta(hours=5)).timestamp()))
    assert (older.first, older.latest) == (90, 300)  # arrival order, as such a state was read


def test_an_answer_of_pages_is_cut_to_what_a_diagnosis_keeps_and_flagged(pack: KnowledgePack) -> None:
    """A runaway generation: a root cause of 60,000 characters and 500 excluded hypotheses went whole into the
    diagnosis (and working memory), which could pass what the outputs' topic takes."""
    from vdoctor.agent.react import MAX_ANSWER_HYPOTHESES, MAX_ANSWER_TEXT_CHARS

    cause = "cell group 7 drifts by 187 mV under load; " * 1500
    answer = {"phase": "CONCLUDED", "root_cause": cause, "fix_action": "balance the pack", "priority": "P1",
              "confidence": 0.9, "codes": ["P0A7F"], "evidence": ["dtc://P0A7F"],
              "excluded": [f"hypothesis {i}" for i in range(500)]}  # fmt: skip
    h = Harness(engine(pack, model=ScriptedModel([ChatResponse(content=json.dumps(answer))])))
    diagnosis = h.diagnose(alert("e-1", T0, 187))
    assert "answer_clipped" in diagnosis.flags
    assert diagnosis.root_cause is not None and len(diagnosis.root_cause) <= MAX_ANSWER_TEXT_CHARS
    assert diagnosis.root_cause.endswith("…") and cause.startswith(diagnosis.root_cause[:-1].rstrip())
    assert not diagnosis.root_cause[:-1].rstrip().endswith("18")  # never cut inside a number
    assert len(diagnosis.model_dump_json()) < 10_000
    stored = h.state[VIN][0]
    assert stored is not None and len(stored) < 60_000
    assert MAX_ANSWER_HYPOTHESES < 500


def test_a_runaway_tool_call_is_not_run_and_the_next_model_call_stays_within_the_budget(pack: KnowledgePack) -> None:
    """A model that called search_knowledge with a query of 240 KB, then 40 lookups in one step: the calls went
    back whole in the transcript of its next call, ~200,000 tokens that no model takes (and 40 results)."""
    from vdoctor.agent.react import MAX_TOOL_CALL_CHARS, MAX_TOOL_CALLS_PER_STEP

    answer = {"phase": "INVESTIGATING", "priority": "P2", "confidence": 0.4, "root_cause": None, "codes": ["P0A7F"],
              "evidence": []}  # fmt: skip
    runaway = ToolCall(id="c-1", name="search_knowledge", arguments={"query": "P0A7F cell drift " * 15_000})
    lookup = ToolCall(id="c-2", name="lookup_dtc", arguments={"codes": ["P0A7F"]})
    many = tuple(ToolCall(id=f"m-{i}", name="lookup_dtc", arguments={"codes": ["P0A7F"]}) for i in range(40))
    long_id = ToolCall(id="x" * 5_000, name="lookup_dtc", arguments={"codes": ["P0A7F"]})
    model = ScriptedModel([
        ChatResponse(content="", tool_calls=(runaway, lookup, long_id)),
        ChatResponse(content="", tool_calls=many),
        ChatResponse(content="Answer:\n" + json.dumps(answer)),
    ])  # fmt: skip
    diagnosis = Harness(engine(pack, model=model)).diagnose(alert("e-1", T0, 87))
    assert "model_step_clipped" in diagnosis.flags and "working_over_budget" not in diagnosis.flags
    assert diagnosis.tool_calls == 3 + MAX_TOOL_CALLS_PER_STEP and diagnosis.llm_calls == 3
    second, third = model.sent[1], model.sent[2]
    # The runaway call is echoed without its arguments, and its result says why; the lookup beside it ran.
    echoed = second[2]
    calls = [(c.id, c.arguments) for c in echoed.tool_calls]
    assert calls == [("c-1", {}), ("c-2", {"codes": ["P0A7F"]}), ("call01002", {})]  # (step 0, third call)
    assert "not run" in second[3].content and str(MAX_TOOL_CALL_CHARS) in second[3].content
    assert "P0A7F" in second[4].content and second[4].tool_call_id == "c-2"
    assert "not run" in second[5].content and second[5].tool_call_id == "call01002"  # an id of 5,000 characters
    # Of 40 calls in one step, the first 16 are echoed and answered, each by its result.
    step = [m for m in third[7:] if m.role == "tool"]
    assert len(third[6].tool_calls) == len(step) == MAX_TOOL_CALLS_PER_STEP
    assert [m.tool_call_id for m in step] == [f"m-{i}" for i in range(MAX_TOOL_CALLS_PER_STEP)]
    assert sum(len(m.content) + sum(len(c.arguments_json) for c in m.tool_calls) for m in third) < 40_000


def test_an_alert_that_makes_working_memory_let_readings_go_says_so(pack: KnowledgePack) -> None:
    """64 module temperatures an alert, each signal's first, lowest, highest and latest reading kept: past 200
    readings the oldest give way (recorded in the state), and the diagnosis said nothing of it."""
    h = Harness(engine(pack))
    flags = []
    for i in range(6):
        payload = alert(f"e-{i}", T0 + timedelta(minutes=10 * i), 87)
        payload["signals"] = {f"module_{m}_temp_c": 30.0 + (m * 7 + i * 13) % 17 for m in range(64)}
        flags.append(h.diagnose(payload).flags)
    assert flags[0] == [] and "key_facts_dropped" in flags[-1]
    stored = h.state[VIN][0]
    assert stored is not None and json.loads(stored)["working"]["dropped_fact_count"] > 0


def test_a_fold_of_rounds_whose_answers_write_every_key_passes_its_check(pack: KnowledgePack) -> None:
    """The fold's check took its required facts from the rounds' whole text, JSON keys included, while the key
    facts no longer held those fragments: every fold failed, and past 6 rounds every alert was flagged
    summary_fidelity_failed (found by a diff review)."""
    answer = {"phase": "INVESTIGATING", "priority": "P2", "confidence": 0.4, "root_cause": None, "codes": ["P0A7F"],
              "evidence": [], "excluded": [], "voided": []}  # fmt: skip
    h = Harness(engine(pack, model=ScriptedModel([ChatResponse(content="Answer:\n" + json.dumps(answer))] * 9)))
    flags = [h.diagnose(alert(f"e-{i}", T0 + timedelta(hours=i), 87)).flags for i in range(9)]
    assert flags == [[]] * 9
    stored = h.state[VIN][0]
    assert stored is not None
    working = StoredSession(stored).load().working
    assert working.threshold_folds == 3 and working.fidelity_failures == 0


def test_a_same_second_session_run_again_after_a_restore_recalls_what_it_recalled_first(pack: KnowledgePack) -> None:
    """A restore runs an alert again with the store as the first run left it: the first session of a second
    then found the case of the second session of that second, written after it, in its own history."""
    store = InMemoryStore()
    first = {"phase": "CONCLUDED", "root_cause": "cell imbalance", "fix_action": "balance the pack", "priority": "P1",
             "confidence": 0.9, "codes": ["P0A7F"], "evidence": ["dtc://P0A7F"]}  # fmt: skip
    second = {**first, "root_cause": "coolant pump failure", "fix_action": "replace the pump", "priority": "P2"}
    replies = [ChatResponse(content=json.dumps(a)) for a in (first, second)]
    h = Harness(engine(pack, store=store, model=ScriptedModel(replies)))
    before = []
    recalled = []
    for i in range(2):
        before.append(dict(h.state))
        recalled.append([m.session_id for m in h.diagnose(alert(f"e-{i}", T0, 87)).memory.own])
    assert recalled == [[], [SID_1]]
    for i in range(2):
        again = Harness(engine(pack, store=store, model=ScriptedModel(replies[i:])))
        again.state = dict(before[i])
        assert [m.session_id for m in again.diagnose(alert(f"e-{i}", T0, 87)).memory.own] == recalled[i], i

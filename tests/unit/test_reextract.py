"""Re-extraction of summaries written with an older summary-prompt version."""

from __future__ import annotations

import pytest

from tests.unit.test_engine import SID_1, T0, VIN, Harness, alert
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import load_pack
from vdoctor.memory.reextract import reextract
from vdoctor.memory.summarizer import OfflineSummarizer, SummaryRequest, request_from_json
from vdoctor.memory.summary import SUMMARY_PROMPT_VERSION
from vdoctor.models.offline import OfflineModel
from vdoctor.retrieval.text import dense_text
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

OLD = "case-summary-v0"


class Inventing:
    """A summarizer that always adds a number the source does not have."""

    name = "inventing"

    def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
        return OfflineSummarizer().summarize(request) + " 999mV"


@pytest.fixture
def store() -> InMemoryStore:
    store = InMemoryStore()
    h = Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack()))
    h.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 187}))
    record = store.get(VIN, SID_1)
    assert record is not None and record.source and record.prompt_version == SUMMARY_PROMPT_VERSION
    # As if written by an older prompt: different wording, older version.
    store.upsert(record.model_copy(update={"prompt_version": OLD, "summary": "old wording of the case"}))
    # A record from before sources were kept.
    store.upsert(record.model_copy(update={"session_id": SID_1 + "x", "prompt_version": OLD, "source": ""}))
    return store


def test_records_of_older_versions_are_rewritten_checked_and_resumable(store: InMemoryStore) -> None:
    fresh = OfflineSummarizer().summarize(request_from_json(store.get(VIN, SID_1).source))  # type: ignore[union-attr]
    report = reextract(store, OfflineSummarizer(), HashingEmbedder(), SUMMARY_PROMPT_VERSION)
    assert (report.seen, report.rewritten, report.no_source, report.failed_check) == (2, 1, 1, 0)
    record = store.get(VIN, SID_1)
    assert record is not None
    assert record.prompt_version == SUMMARY_PROMPT_VERSION
    assert record.summary == fresh and "cell_voltage_diff_mv=187" in record.summary
    # Re-embedded as what the record is found by: the alert text, codes, cause, fix and the new summary's words.
    assert record.alert_text == "电池包单体压差过大" and record.embedder == "hash-ngram-v1/256"
    found_by = dense_text(record.alert_text, record.dtc_codes, record.root_cause, record.fix_action, fresh)
    assert record.summary_vec == [float(x) for x in HashingEmbedder().embed([found_by])[0]]
    again = reextract(store, OfflineSummarizer(), HashingEmbedder(), SUMMARY_PROMPT_VERSION)
    assert (again.rewritten, again.no_source) == (0, 1)  # only the record without a source is left


def test_a_rewrite_that_fails_the_fidelity_check_keeps_the_old_summary(store: InMemoryStore) -> None:
    report = reextract(store, Inventing(), HashingEmbedder(), SUMMARY_PROMPT_VERSION)
    assert (report.rewritten, report.failed_check) == (0, 1)
    record = store.get(VIN, SID_1)
    assert record is not None and record.summary == "old wording of the case" and record.prompt_version == OLD


def test_the_stored_source_round_trips(store: InMemoryStore) -> None:
    record = store.get(VIN, SID_1)
    assert record is not None
    request = request_from_json(record.source)
    assert request.kind == "case" and "P0A7F" in request.required and request.events
    assert record.public_dict().get("source") is None  # not part of what users see
    # The conclusion's event time under the design's name too (memory history --json, the inspector).
    assert record.public_dict()["concluded_ts"] == record.public_dict()["concluded_at"] is not None
    assert record.concluded_at == T0


def test_a_request_stored_before_readings_were_kept_gains_them_when_rewritten() -> None:
    import json

    store = InMemoryStore()
    h = Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack()))
    h.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 60, "pack_temp_c": 41.5}, text="怀疑线束松动，已排除"))
    h.diagnose(alert("e-2", T0.replace(hour=10), signals={"cell_voltage_diff_mv": 187, "pack_temp_c": 44}))
    record = store.get(VIN, SID_1)
    assert record is not None
    # The request as the previous prompt version stored it: no readings, omitted facts or decision, and a
    # source without the readings and codes-seen lines.
    old = json.loads(record.source)
    for key in ("readings", "omitted", "decision"):
        del old[key]
    old["source"] = "\n".join(
        line for line in old["source"].splitlines() if not line.startswith(("readings: ", "codes seen: "))
    )
    old["events"] = [e for e in old["events"] if e[1] != "readings"]
    old_summary = "2026-11-01 10:15 | concluded P0A7F | P2 conf 0.80; confirmed cell_voltage_diff_mv=187>=100 | -"
    store.upsert(record.model_copy(update={"prompt_version": OLD, "summary": old_summary, "source": json.dumps(old)}))
    report = reextract(store, OfflineSummarizer(), HashingEmbedder(), SUMMARY_PROMPT_VERSION)
    assert (report.rewritten, report.failed_check) == (1, 0)
    rewritten = store.get(VIN, SID_1)
    assert rewritten is not None and rewritten.prompt_version == SUMMARY_PROMPT_VERSION
    assert "readings: cell_voltage_diff_mv=60→187mV pack_temp_c=41.5→44°C" in rewritten.summary
    assert "excluded | 怀疑线束松动，已排除" in rewritten.summary
    assert request_from_json(rewritten.source).decision is not None  # checkable from now on


def test_records_of_a_newer_version_are_left_as_they_are(store: InMemoryStore) -> None:
    """After a rollback, the records a later release wrote were rewritten and labelled with the older version
    (found by an audit). They are left, and counted."""
    from vdoctor.memory.reextract import is_newer

    number = int(SUMMARY_PROMPT_VERSION.rsplit("-v", 1)[1])
    newer = SUMMARY_PROMPT_VERSION.rsplit("-v", 1)[0] + f"-v{number + 1}"
    record = store.get(VIN, SID_1)
    assert record is not None
    later = record.model_copy(update={"session_id": SID_1 + "-2", "prompt_version": newer, "summary": "later wording"})
    store.upsert(later)
    report = reextract(store, OfflineSummarizer(), HashingEmbedder(), SUMMARY_PROMPT_VERSION)
    assert (report.seen, report.rewritten, report.newer) == (2, 1, [newer])
    assert f"records of newer versions left as they are: {newer}" in report.render()
    kept = store.get(VIN, SID_1 + "-2")
    assert kept is not None and (kept.prompt_version, kept.summary) == (newer, "later wording")
    assert is_newer("case-summary-v10", "case-summary-v3") and not is_newer("case-summary-v2", "case-summary-v3")
    assert not is_newer("other-v9", "case-summary-v3") and not is_newer("case-summary", "case-summary-v3")

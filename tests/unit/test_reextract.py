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
    assert record.summary_vec == [float(x) for x in HashingEmbedder().embed([fresh])[0]]
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
    assert record.concluded_at == T0

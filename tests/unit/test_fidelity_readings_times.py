"""Summary fidelity of readings and times: a reading is a number of the source with the source's unit, and
a time of the source is stated whole, never borrowed from in pieces (the 15 and 30 of 08:15:30)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.unit.test_engine import T0, VIN, Harness, alert
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import load_pack
from vdoctor.memory.fidelity import check_request, check_summary
from vdoctor.memory.request import SummaryRequest, request_from_json
from vdoctor.memory.summarizer import OfflineSummarizer, Summarizer
from vdoctor.models.offline import OfflineModel
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

URI_187 = f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T10:15:30Z"
# Its only 15, 30 and 01 are pieces of times and dates; 87 and 187 are mV by the signal's name, 41.5 is °C.
SOURCE = "\n".join(
    [
        "2026-11-01 08:15 | alert P0A7F cell_voltage_diff_mv=87 | investigating | dtc://P0A7F",
        "2026-11-01 10:15 | alert P0A7F cell_voltage_diff_mv=187 pack_temp_c=41.5 | concluded P2 conf 0.80 | "
        + URI_187,
        "reading cell_voltage_diff_mv=187 @2026-11-01T10:15:30Z",
    ]
)
GOOD = f"2026-11-01 10:15 | concluded P0A7F | P2 conf 0.80; cell_voltage_diff_mv=187 | {URI_187}"


@pytest.mark.parametrize(
    ("extra", "invented"),
    [
        ("\n2026-11-01 08:15 | cell voltage diff 30 mV | - | -", ["30"]),  # the seconds of 10:15:30
        ("\n2026-11-01 08:15 | pack 15℃ | - | -", ["15"]),  # the minutes of 08:15
        ("\nreadings: pack 01℃", ["01"]),  # the day of 2026-11-01
        ("\n11 cells", ["11"]),  # the month
    ],
    ids=["seconds-30mV", "minutes-15C", "day-01C", "month-count"],
)
def test_a_number_taken_from_a_time_of_the_source_is_invented(extra: str, invented: list[str]) -> None:
    report = check_summary(GOOD + extra, [], SOURCE)
    assert report.invented == invented
    assert not report.ok


@pytest.mark.parametrize(
    ("extra", "invented"),
    [
        ("; 187 V", ["reading 187 V"]),  # 187 is mV
        ("; 压差87kPa", ["reading 87kPa"]),
        ("; 41.5°F", ["reading 41.5°F"]),  # 41.5 is °C: no unit is converted, nor taken for another
        ("; cell_voltage_diff_mv=87→187V", ["reading cell_voltage_diff_mv=87V", "reading cell_voltage_diff_mv=187V"]),
    ],
    ids=["text", "chinese", "temperature", "span"],
)
def test_a_number_of_the_source_with_another_unit_is_invented(extra: str, invented: list[str]) -> None:
    report = check_summary(GOOD + extra, [], SOURCE)
    assert report.invented == invented
    assert not report.ok


@pytest.mark.parametrize(
    "extra",
    [
        "; 187 mV",
        "; 压差187mV，温度41.5℃",  # ℃ is the °C of pack_temp_c
        "; 41.5 °C",
        "\nreadings: cell_voltage_diff_mv=87→187mV pack_temp_c=41.5°C",
    ],
    ids=["text", "chinese", "spaced", "span"],
)
def test_a_reading_of_the_source_with_its_unit_passes(extra: str) -> None:
    report = check_summary(GOOD + extra, [], SOURCE)
    assert report.invented == []
    assert report.ok


@pytest.mark.parametrize(
    "time",
    ["2026-11-01 08:15", "2026-11-01T10:15:30Z", "10:15:30", "08:15", "2026-11-01"],
    ids=["summary-time", "iso", "clock-seconds", "clock", "date"],
)
def test_a_time_of_the_source_passes(time: str) -> None:
    report = check_summary(f"{GOOD}\n{time} | alert P0A7F | investigating | dtc://P0A7F", [], SOURCE)
    assert report.invented == []
    assert report.ok


@pytest.mark.parametrize(
    "time", ["2026-11-01 08:16", "2026-11-02 08:15", "10:15:31", "09:15"], ids=["minute", "day", "seconds", "hour"]
)
def test_a_time_that_is_not_the_sources_is_invented(time: str) -> None:
    report = check_summary(f"{GOOD}\n{time} | alert P0A7F | investigating | dtc://P0A7F", [], SOURCE)
    assert report.invented == [f"time {time}"]


class Inventor:
    """The offline summary with its opening line swapped for a reading the session never had."""

    name = "inventor"

    def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
        text = OfflineSummarizer().summarize(request, feedback)
        if request.kind != "case":
            return text
        return "\n".join(["2026-11-01 08:15 | cell voltage diff 30 mV | - | -", *text.splitlines()[1:]])


def _two_alerts(summarizer: Summarizer) -> tuple[InMemoryStore, list[str]]:
    store = InMemoryStore()
    engine = DiagnosisEngine(
        store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack(), summarizer=summarizer
    )
    h = Harness(engine)
    h.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 87}))
    d = h.diagnose(alert("e-2", T0 + timedelta(hours=2), signals={"cell_voltage_diff_mv": 187}))
    return store, d.flags


def test_an_invented_reading_does_not_reach_long_term_memory() -> None:
    store, flags = _two_alerts(Inventor())
    assert "summary_fidelity_failed" in flags
    assert all("30 mV" not in r.summary for r in store.history(VIN))


def test_the_offline_summary_of_the_review_case_passes_and_quotes_times_and_readings() -> None:
    store, flags = _two_alerts(OfflineSummarizer())
    assert "summary_fidelity_failed" not in flags
    [record] = store.history(VIN)
    request = request_from_json(record.source)
    assert "2026-11-01 10:15" in record.summary and "87→187mV" in record.summary
    assert check_request(record.summary, request).ok
    # The alert's time, quoted again in another form, is still its time.
    assert check_request(record.summary + "; at 10:15:30", request).invented == []


@pytest.mark.parametrize(
    "date",
    ["11-01", "11/01", "01/11", "Nov 1", "1 November 2026", "Nov. 1st, 2026", "2026年11月1日", "11月1日"],
    ids=[
        "month-day",
        "month/day",
        "day/month",
        "month-name",
        "day-month-year",
        "abbreviated",
        "chinese",
        "chinese-short",
    ],
)
def test_a_date_of_the_source_written_short_or_in_words_passes(date: str) -> None:
    # Before, its numbers were checked as numbers: 11 and 01 are no numbers of the source, so a model
    # writing "于11月1日" had its summary rejected as inventing them.
    report = check_summary(f"{GOOD}\n{date} 08:15 | alert P0A7F | investigating | dtc://P0A7F", [], SOURCE)
    assert report.invented == []
    assert report.ok


@pytest.mark.parametrize(
    ("date", "invented"),
    [("11-02", ["11", "02"]), ("Nov 2", ["2"]), ("2025年11月1日", ["2025", "11", "1"]), ("13/14", ["13", "14"])],
    ids=["another-day", "another-day-in-words", "another-year", "no-date"],
)
def test_a_short_date_that_is_no_date_of_the_source_is_its_numbers_invented(date: str, invented: list[str]) -> None:
    report = check_summary(f"{GOOD}\n{date} | alert P0A7F | investigating | dtc://P0A7F", [], SOURCE)
    assert report.invented == invented


class WordyDates:
    """The offline summary with its dates written as a model may write them (2026年11月1日, Nov 1)."""

    name = "wordy-dates"

    def __init__(self, date: str) -> None:
        self.date = date

    def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
        return OfflineSummarizer().summarize(request, feedback).replace("2026-11-01 ", f"{self.date} ")


@pytest.mark.parametrize("date", ["2026年11月1日", "11月1日", "Nov 1", "1 November 2026", "11/01"])
def test_a_case_summary_with_dates_written_short_or_in_words_is_stored(date: str) -> None:
    store, flags = _two_alerts(WordyDates(date))
    assert "summary_fidelity_failed" not in flags
    [record] = store.history(VIN)
    assert f"{date} 10:15" in record.summary and "fact |" not in record.summary

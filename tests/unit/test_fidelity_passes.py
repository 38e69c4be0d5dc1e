"""The fidelity check reads each text once where it can, and the source only for what a summary leaves to check.

These pin the places where a shared pass or a skipped read could change a
finding: URIs split off in one scan, the cause/fix clauses found from the
whole summary, and the source's readings, words, names and Chinese read only
when a summary states something that is not already known.
"""

from __future__ import annotations

import random
import re

import pytest

from vdoctor.memory import facts, fidelity, meaning
from vdoctor.memory.facts import URI_RE, split_uris
from vdoctor.memory.meaning import check_case
from vdoctor.memory.request import CaseDecision, SummaryRequest

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


@pytest.mark.parametrize(
    ("text", "plain", "uris"),
    [
        ("no uri here", "no uri here", []),
        (
            "证据signal://V1/x_mv@2026-11-01T10:15:30Z. then dtc://P0A7F,case://V/s-1",
            "证据 . then  , ",
            ["signal://V1/x_mv@2026-11-01T10:15:30Z", "dtc://P0A7F", "case://V/s-1"],
        ),
        ("dtc://P0A7F\ndtc://U0111", " \n ", ["dtc://P0A7F", "dtc://U0111"]),
        ("xdtc://P0A7F dtc://", "xdtc://P0A7F dtc://", []),  # no word boundary; nothing after the scheme
    ],
)
def test_split_uris_gives_the_text_without_uris_and_the_uris(text: str, plain: str, uris: list[str]) -> None:
    assert split_uris(text) == (plain, uris)
    assert split_uris(text) == (URI_RE.sub(" ", text), URI_RE.findall(text))


SOURCE = "\n".join(
    [
        "2026-11-01 08:15 | alert P0A7F cell_voltage_diff_mv=87 pack_temp_c=42 fan_duty_raw=3 | investigating | -",
        "2026-11-01 10:15 | alert P0A7F cell_voltage_diff_mv=187 pack_temp_c=44 | concluded P2 conf 0.80 | -",
        "readings: cell_voltage_diff_mv=87→187mV pack_temp_c=42→44°C",
        "怀疑线束松动",
    ]
)
DECISION = CaseDecision(
    root_cause="A weak cell group self-discharges.",
    fix_action="Balance the pack.",
    priority="P2",
    confidence="0.80",
    codes=["P0A7F"],
    spans=["cell_voltage_diff_mv=87→187mV", "pack_temp_c=42→44°C"],
)
GOOD = "\n".join(
    [
        "readings: cell_voltage_diff_mv=87→187mV pack_temp_c=42→44°C",
        "2026-11-01 10:15 | concluded P0A7F | P2 conf 0.80 | -",
    ]
)
REQUEST = SummaryRequest(kind="case", source=SOURCE, required=[], events=[], decision=DECISION)


def findings(summary: str) -> tuple[list[str], list[str], list[str]]:
    case = check_case(summary, REQUEST)
    return case.missing, case.invented, case.contradicted


def test_the_faithful_summary_has_no_findings() -> None:
    assert findings(GOOD) == ([], [], [])


def test_a_fix_word_inside_a_uri_still_makes_its_clause_a_claim() -> None:
    # The clauses are read from the summary as written, URIs included: the
    # URI's own words (the VIN's letters) are no words of the cause or fix.
    line = f"2026-11-01 10:15 | note | - | case://{VIN}/fix-1"
    assert findings(f"{GOOD}\n{line}")[2] == [f"cause or fix that is not the session's: 'case://{VIN}/fix-1'"]


def test_a_cause_mark_right_after_a_clause_end_is_found() -> None:
    assert findings(f"{GOOD}\nnote;due to harness")[2] == ["cause or fix that is not the session's: 'due to harness'"]
    assert findings(f"{GOOD}\n备注。由于线束")[2] == ["cause or fix that is not the session's: '由于线束'"]


def test_a_cause_mark_in_any_case_is_found() -> None:
    # re.I lets the long s (ſ) match s and the dotless ı match i, as it does
    # everywhere in a line; the whole-summary test must too.
    assert findings(f"{GOOD}\nCAUſE: harness")[2] == ["cause or fix that is not the session's: 'CAUſE: harness'"]
    assert findings(f"{GOOD}\nFıXED harness")[2] == ["cause or fix that is not the session's: 'FıXED harness'"]


def test_a_bare_reading_is_checked_against_the_sources_readings_beyond_the_key_ones() -> None:
    # 42 and 44 are pack_temp_c's key readings, 3 is a reading of a signal with no span.
    assert findings(f"{GOOD}\nalso pack_temp_c=44 fan_duty_raw=3") == ([], [], [])
    assert findings(f"{GOOD}\nalso pack_temp_c=43 fan_duty_raw=4")[1] == ["pack_temp_c=43", "fan_duty_raw=4"]
    assert findings(f"{GOOD}\nalso coolant_temp_c=90")[1] == [
        "reading of coolant_temp_c, a signal the session never had"
    ]


def test_words_names_and_chinese_are_checked_against_the_source() -> None:
    # "alert" is a format word, "cell" and "pack" are words of the source's
    # snake_case names, 结论 is a format word and 怀疑线束 is the source's.
    assert findings(f"{GOOD}\nalert cell pack 怀疑线束 结论") == ([], [], [])
    assert findings(f"{GOOD}\ncorroded cell strap")[1] == ["words not in the source: corroded, strap"]
    assert findings(f"{GOOD}\nrule fan_duty_raw rule coolant_temp_c")[1] == ["name coolant_temp_c"]
    assert findings(f"{GOOD}\n线束腐蚀")[1] == ["Chinese not in the source: 束腐, 腐蚀"]


# -- patterns written to start with their first character --------------------------------

# Each fast pattern and the plain form it must match exactly (see facts.CODE_RE).
PLAIN_FORMS = {
    "code": (facts.CODE_RE, re.compile(r"\b[PCBU][0-9A-F]{4}\b", re.ASCII)),
    "number": (fidelity._NUMBER_RE, re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?", re.ASCII)),
    "time": (
        meaning._TIME_RE,
        re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2})(?::\d{2}Z?)?(?!\d)"),
    ),
}
PIECES = [
    "P0A7F", "U0111", "C", "B12", "xP0A7F", "报", "压差", "-", "--", ".", "_", "a", "Z", "T", " ", "\n", ":",
    "1", "12", "187", "-3.5", "0.80", "2026", "2026-11-01", "2026-11-01 08:15", "2026-11-01T08:15:30Z",
    "08:15", ":30", "٣", "١٢٣٤-٠١-٠٢ ٠٨:١٥",
]  # fmt: skip


@pytest.mark.parametrize("name", sorted(PLAIN_FORMS))
def test_a_pattern_written_from_its_first_character_matches_its_plain_form(name: str) -> None:
    fast, plain = PLAIN_FORMS[name]
    rng = random.Random(name)
    for _ in range(3000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30)))
        assert fast.findall(text) == plain.findall(text), text
        assert fast.sub("#", text) == plain.sub("#", text), text


def _plain_times_not_in(text: str, source: str) -> set[str]:
    """``meaning._times_not_in`` as it was: every time of the source found by a scan of the whole source."""

    def times(of: str) -> set[str]:
        return {f"{d} {hm}" for d, hm in meaning._TIME_RE.findall(of)}

    return times(text) - times(source)


def test_the_times_not_in_the_source_are_those_of_a_scan_of_the_whole_source() -> None:
    rng = random.Random("times")
    texts = ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30))) for _ in range(3000)]
    pairs = [(rng.choice(texts), rng.choice(texts)) for _ in range(6000)]
    # A summary's times taken from the source too, with text around them.
    pairs += [(text, rng.choice(texts) + text + rng.choice(PIECES)) for text in texts]
    pairs += [(text, text[1:] + text[:1]) for text in texts]
    found = [_plain_times_not_in(text, source) for text, source in pairs]
    assert sum(bool(f) for f in found) > 500  # times not in the source ...
    assert sum(bool(meaning._TIME_RE.search(text)) and not f for (text, _), f in zip(pairs, found, strict=True)) > 500
    for (text, source), plain in zip(pairs, found, strict=True):
        assert meaning._times_not_in(text, source) == plain, (text, source)


@pytest.mark.parametrize("name", ["number", "code"])
def test_a_summarys_numbers_and_codes_found_in_the_source_are_those_of_a_scan_of_it(name: str) -> None:
    pattern = fidelity._NUMBER_RE if name == "number" else facts.CODE_RE
    rng = random.Random(name)
    texts = ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    for source in texts:
        summary = rng.choice(texts) + "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 5)))
        tokens = pattern.findall(summary) + pattern.findall(source[: rng.randint(0, len(source))])
        assert fidelity._tokens_in(pattern, source, tokens) == set(tokens) & set(pattern.findall(source)), source


def test_a_number_found_right_after_a_sign_is_no_number_of_the_source() -> None:
    # findall gives -5 here, not 5; after a word character the sign is no sign and 5 is a number.
    assert fidelity._tokens_in(fidelity._NUMBER_RE, "x -5", ["5", "-5"]) == {"-5"}
    assert fidelity._tokens_in(fidelity._NUMBER_RE, "x-5", ["5", "-5"]) == {"5"}
    # Past the lookups the source is read whole: same answer.
    assert fidelity._tokens_in(fidelity._NUMBER_RE, "15 25 35 45 55 65 5", ["5"]) == {"5"}
    assert fidelity._tokens_in(fidelity._NUMBER_RE, "15 25 35 45 55 65", ["5"]) == set()


def test_a_requests_checks_on_one_split_of_the_summary_find_what_each_check_finds_alone() -> None:
    rng = random.Random("one split")
    lines = [*GOOD.splitlines(), f"x signal://{VIN}/pack_temp_c@2026-11-01T10:15:30Z 44", "dtc://P0A7F. 43 ruled out"]
    for _ in range(300):
        summary = "\n".join(rng.choice(lines) + rng.choice(PIECES) for _ in range(rng.randint(0, 4)))
        request = SummaryRequest(kind=rng.choice(["case", "rolling"]), source=SOURCE, required=["P0A7F", "44"],
                                 events=[], decision=DECISION)  # fmt: skip
        report = fidelity.check_request(summary, request)
        alone = fidelity.check_summary(summary, request.required, SOURCE, request.max_chars)
        case = check_case(summary, request) if request.kind == "case" else meaning.CaseFindings()
        assert report.missing == alone.missing + [m for m in case.missing if m not in alone.missing]
        assert report.invented == alone.invented + case.invented
        assert report.contradicted == case.contradicted

"""The mutation generator breaks a faithful summary one way per kind, and the check catches each."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.unit.test_case_fidelity import GOOD, request
from vdoctor.evaluation.mutations import KINDS, mutate
from vdoctor.memory.fidelity import check_request
from vdoctor.memory.request import SummaryRequest

pytestmark = pytest.mark.unit

OTHER_CAUSES = ["The HVIL loop is open: an unseated HV connector or service disconnect, or a pushed-back pin."]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(12))
def test_every_kind_breaks_the_summary_and_is_caught(kind: str, seed: int) -> None:
    assert check_request(GOOD, request()).ok
    m = mutate(GOOD, request(), kind, random.Random(seed), OTHER_CAUSES)
    assert m is not None and m.kind == kind and m.text != GOOD
    report = check_request(m.text, request())
    assert report.missing or report.invented or report.contradicted, (m.note, m.text)


def test_what_each_kind_changes() -> None:
    rng = random.Random(3)
    digit = mutate(GOOD, request(), "digit", rng, OTHER_CAUSES)
    assert digit is not None and sum(a != b for a, b in zip(digit.text, GOOD, strict=True)) == 1
    void = mutate(GOOD, request(), "void_as_valid", rng, OTHER_CAUSES)
    assert void is not None and "| concluded | harness connector X12 conclusion |" in void.text
    excluded = mutate(GOOD, request(), "excluded_dropped", random.Random(1), OTHER_CAUSES)
    assert excluded is not None and len(excluded.text.splitlines()) == len(GOOD.splitlines()) - 1
    swapped = mutate(GOOD, request(), "cause_swapped", rng, OTHER_CAUSES)
    assert swapped is not None and OTHER_CAUSES[0] in swapped.text
    dropped = mutate(GOOD, request(), "drop_reading", random.Random(0), OTHER_CAUSES)
    assert dropped is not None and dropped.note.startswith("dropped ")
    name, value = dropped.note.removeprefix("dropped ").split("=")
    assert f"{name}={value}" in GOOD or value in GOOD


def test_a_kind_with_nothing_to_break_is_not_applicable() -> None:
    bare: SummaryRequest = replace(request(), decision=replace(request().decision, void=[], excluded=[]))  # type: ignore[arg-type]
    assert mutate(GOOD, bare, "void_as_valid", random.Random(0), OTHER_CAUSES) is None
    assert mutate(GOOD, bare, "excluded_dropped", random.Random(0), OTHER_CAUSES) is None
    assert mutate("no numbers here", bare, "digit", random.Random(0), OTHER_CAUSES) is None
    with pytest.raises(ValueError, match="unknown mutation kind"):
        mutate(GOOD, bare, "typo", random.Random(0), OTHER_CAUSES)


@pytest.mark.parametrize("kind", ["reorder_lines", "true_cause_stated", "wordier_confidence"])
def test_rewrites_that_keep_the_meaning_pass(kind: str) -> None:
    from vdoctor.evaluation.mutations import rewrite

    r = rewrite(GOOD, request(), kind, random.Random(0))
    assert r is not None and r.text != GOOD
    assert check_request(r.text, request()).ok, check_request(r.text, request()).describe()


def test_an_alert_line_whose_facts_are_stated_elsewhere_may_go() -> None:
    from vdoctor.evaluation.mutations import rewrite

    opening = "2026-11-01 08:15 | alert P0A7F cell_voltage_diff_mv=87 pack_temp_c=41.5 | investigating | dtc://P0A7F"
    r = rewrite(f"{opening}\n{GOOD}", request(), "opening_line_dropped", random.Random(0))
    assert r is not None and r.text == GOOD and check_request(f"{opening}\n{GOOD}", request()).ok

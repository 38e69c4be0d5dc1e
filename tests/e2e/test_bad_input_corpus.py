"""A hostile corpus of 10,000 lines through the job: it never fails, and nothing is lost.

Every bad line is a dead letter with its raw text, stage and a reason; every
valid alert is diagnosed exactly once; prompt-injection text from one vehicle
never changes what any other vehicle sees or gets.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from devtools.bad_corpus import SET_ASIDE, Line, generate, write
from tests.conftest import REPO_ROOT
from vdoctor.events import AlertEvent, parse_event, trouble_code
from vdoctor.units import SIGNAL_NAME_RE

pytestmark = pytest.mark.e2e

CORPUS_EVENTS = 10_000
ISOLATION_EVENTS = 2_000


def _run(lines: list[Line], out: Path, parallelism: int, concurrency: int = 64) -> tuple[list[dict], list[dict]]:
    out.mkdir(parents=True, exist_ok=True)
    alerts = out / "corpus.jsonl"
    write(lines, alerts)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.cli",
            "run",
            "--alerts",
            str(alerts),
            "--out",
            str(out),
            "--memory",
            f"sqlite:///{out}/memory.db",
            "--knowledge",
            "memory://",
            "--parallelism",
            str(parallelism),
            "--concurrency",
            str(concurrency),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    def read(name: str) -> list[dict]:
        # split on "\n" only: U+2028 inside a JSON string is not a line break in JSONL
        text = (out / name).read_text(encoding="utf-8")
        return [json.loads(line) for line in text.split("\n") if line]

    return read("diagnoses.jsonl"), read("dead_letters.jsonl")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Line], list[dict], list[dict]]:
    lines = generate(CORPUS_EVENTS, seed=7)
    diagnoses, dead = _run(lines, tmp_path_factory.mktemp("corpus"), parallelism=2)
    return lines, diagnoses, dead


def test_corpus_covers_every_kind_of_bad_input(corpus: tuple[list[Line], list[dict], list[dict]]) -> None:
    kinds = Counter(line.kind for line in corpus[0])
    for kind in (
        "truncated_json",
        "garbage",
        "nan_literal",
        "infinity_literal",
        "nan_literal_time",
        "infinity_literal_time",
        "raw_control_char",
        "deep_nesting",
        "missing_vin",
        "missing_ts",
        "signal_as_string",
        "signal_in_another_unit",
        "signal_name_other_script",
        "invalid_vin",
        "huge_number",
        "too_many_signals",
        "battery_snapshot",
        "too_many_codes",
        "full_scan",
        "gateway_forms",
        "ts_out_of_range",
        "one_mb_text",
        "unknown_type",
        "duplicate",
        "sql_text",
        "escaped_control_chars",
        "injection",
        "recheck_unknown_session",
    ):
        assert kinds[kind] > 0, kind
    assert sum(1 for line in corpus[0] if line.expect == "diagnosis") > 5000


def test_every_bad_line_is_one_dead_letter_with_stage_and_reason(
    corpus: tuple[list[Line], list[dict], list[dict]],
) -> None:
    lines, _, dead = corpus
    expected = Counter(
        (line.raw, line.expect.removeprefix("dead:")) for line in lines if line.expect.startswith("dead:")
    )
    # An alert that set readings aside is diagnosed, and its line is kept as a dead letter as well.
    expected.update((line.raw, "validate") for line in lines if line.expect == SET_ASIDE)
    # A raw over the dead letter's bound is cut, and named by the whole line's sha256 and length.
    by_sha = {hashlib.sha256(line.raw.encode("utf-8", "surrogatepass")).hexdigest(): line.raw for line in lines}
    cut = [d for d in dead if d.get("raw_truncated")]
    assert cut and all(len(by_sha[d["raw_sha256"]]) == d["raw_chars"] > len(d["raw"]) for d in cut)
    assert all(by_sha[d["raw_sha256"]].startswith(d["raw"]) for d in cut)
    got = Counter((by_sha[d["raw_sha256"]] if d.get("raw_truncated") else d["raw"], d["stage"]) for d in dead)
    assert got == expected
    assert all(d["error"].strip() for d in dead)


def test_every_valid_alert_is_diagnosed_exactly_once(corpus: tuple[list[Line], list[dict], list[dict]]) -> None:
    lines, diagnoses, _ = corpus
    expected = sorted(line.event_id for line in lines if line.expect in ("diagnosis", SET_ASIDE))
    assert sorted(d["event_id"] for d in diagnoses) == expected
    set_aside = {line.event_id for line in lines if line.expect == SET_ASIDE}
    assert set_aside
    assert all(("signals_set_aside" in d["flags"]) == (d["event_id"] in set_aside) for d in diagnoses)


def test_codes_and_signal_names_as_gateways_write_them_are_cited_in_one_form(
    corpus: tuple[list[Line], list[dict], list[dict]],
) -> None:
    # ``DTC P0A7F-1B (active)``, ``P0562-1B, U0100 [08]``, ``Battery Voltage (v)``, ``cells[61].temp_c``.
    lines, diagnoses, _ = corpus
    by_event = {d["event_id"]: d for d in diagnoses}
    written = [line for line in lines if line.kind == "gateway_forms"]
    assert written
    cited_codes = cited_signals = 0
    for line in written:
        event = parse_event(line.raw)
        assert isinstance(event, AlertEvent)
        evidence = by_event[line.event_id]["evidence"]
        for uri in evidence:
            scheme, _, rest = uri.partition("://")
            if scheme == "dtc":
                assert trouble_code(rest) == rest, uri  # the one written form, never the gateway's
                cited_codes += rest in event.dtc_codes
            elif scheme == "signal":
                name = rest.split("/", 1)[1].split("@", 1)[0]
                assert SIGNAL_NAME_RE.match(name) and name in event.signals, uri
                cited_signals += 1
    assert cited_codes >= len(written) and cited_signals > 0


def test_injection_vehicles_never_reach_other_vehicles(corpus: tuple[list[Line], list[dict], list[dict]]) -> None:
    lines, diagnoses, _ = corpus
    injectors = {line.vin for line in lines if line.kind == "injection"}
    assert injectors
    for d in diagnoses:
        assert all(ref["vin"] == d["vin"] for ref in d["memory"]["own"])
        assert not any(ref["vin"] in injectors for ref in d["memory"]["similar"])
        if d["vin"] not in injectors:
            assert not any(vin in json.dumps(d) for vin in injectors)


def test_other_vehicles_get_identical_outputs_with_or_without_injection_traffic(
    tmp_path: Path,
) -> None:
    lines = generate(ISOLATION_EVENTS, seed=11)
    injectors = {line.vin for line in lines if line.kind == "injection"}
    clean = [line for line in lines if line.vin not in injectors]
    # One run at a time in file order: a vehicle's similar cases depend on which other vehicles'
    # cases were verified before it, so both runs must see the same order for a fair comparison.
    with_inj, _ = _run(lines, tmp_path / "with", parallelism=1, concurrency=1)
    without, _ = _run(clean, tmp_path / "without", parallelism=1, concurrency=1)
    timings = ("latency_ms", "model_latency_ms")  # wall-clock, differ from run to run

    def untimed(diags: list[dict]) -> list[dict]:
        return [{k: v for k, v in d.items() if k not in timings} for d in diags]

    others = [d for d in with_inj if d["vin"] not in injectors]
    assert len(others) == len(without) > 0
    assert untimed(others) == untimed(without)

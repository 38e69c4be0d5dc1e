"""The DTC knowledge pack we ship, and extra code tables merged from CSV."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vdoctor.errors import KnowledgeError
from vdoctor.knowledge import ConfirmRule, load_pack
from vdoctor.units import SIGNAL_NAME_RE, unit_of

pytestmark = pytest.mark.unit

PACK_CODES = (
    "P0A7F P0A80 P0AFA P0A94 P0AA6 P0A9C P0AC0 P0A1F P0C73 P0D27 P0A0D P0AA1 P0B24 P0CA6 P0300 "
    "P0171 P0420 P0128 P0087 P0299 P0335 P0562 P0118 U0100 U0121 U0073 U0140 C0035 C0040 B1318"
).split()

# tests/unit/<this file> -> parents[2] is the repository; the shared data lies beside it.
REAL_TABLE = Path(__file__).resolve().parents[2].parent / "shared/data/dtc/dtc_codes.csv"


def test_the_listed_codes_are_thirty_distinct_codes() -> None:
    # Guards the list itself, so a typo cannot silently shrink the check below.
    assert len(PACK_CODES) == len(set(PACK_CODES)) == 30


@pytest.mark.parametrize("code", PACK_CODES)
def test_pack_code_is_actionable(code: str) -> None:
    entry = load_pack().get(code)
    assert entry is not None, f"{code} missing from the pack"
    assert entry.code == code
    assert entry.source == "pack"
    assert entry.definition_en.strip()
    assert entry.root_cause and entry.root_cause.strip()
    assert entry.fix_action and entry.fix_action.strip()
    assert entry.priority in ("P1", "P2", "P3")
    assert isinstance(entry.confirm, ConfirmRule)
    assert entry.actionable
    result = entry.as_tool_result()
    assert result["root_cause"] == entry.root_cause
    assert result["confirm"] == entry.confirm.describe()


def test_pack_lookup_is_case_insensitive() -> None:
    pack = load_pack()
    assert pack.get("p0a7f") is pack.get("P0A7F") is not None
    assert pack.get("P9999") is None


def test_every_confirm_rule_is_usable() -> None:
    pack = load_pack()
    assert pack.version
    for code, entry in pack.entries.items():
        rule = entry.confirm
        assert rule is not None, code
        if rule.signal is None:
            # Confirmed by repetition: the code must come back at least twice.
            assert rule.repeat >= 2, code
        else:
            # A signal rule names a reading the events contract can carry.
            assert SIGNAL_NAME_RE.match(rule.signal), (code, rule.signal)
            assert unit_of(rule.signal) is not None, (code, rule.signal)
            assert rule.op in (">=", "<="), code


def test_p0a7f_confirm_rule_reads_cell_voltage_diff() -> None:
    rule = load_pack().get("P0A7F").confirm  # type: ignore[union-attr]
    assert rule is not None
    assert rule.signal == "cell_voltage_diff_mv"
    assert rule.describe() == f"cell_voltage_diff_mv{rule.op}{int(rule.threshold)}"
    # 187 mV is a clear cell imbalance, 12 mV a healthy pack.
    assert rule.satisfied_by(187)
    assert not rule.satisfied_by(12)


def test_confirm_rule_operators_and_boundaries() -> None:
    high = ConfirmRule(signal="cell_voltage_diff_mv", op=">=", threshold=100)
    low = ConfirmRule(signal="soh_pct", op="<=", threshold=70)
    assert high.satisfied_by(100) and not high.satisfied_by(99.9)
    assert low.satisfied_by(70) and not low.satisfied_by(70.1)
    assert high.describe() == "cell_voltage_diff_mv>=100"
    assert ConfirmRule(signal="dcdc_output_v", op="<=", threshold=12.8).describe() == "dcdc_output_v<=12.8"
    assert ConfirmRule(repeat=2).describe() == "code seen in 2 alerts"


# -- merge_csv ----------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "codes.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_merge_csv_adds_generic_rows_only_and_never_overwrites_the_pack(tmp_path: Path) -> None:
    table = write(
        tmp_path,
        "code,manufacturer,description\n"
        "B0001,GENERIC,Driver Frontal Stage 1 Deployment Control\n"
        "p0102,generic,Mass or Volume Air Flow Circuit Low Input\n"
        "P1106,ACURA,BARO Circuit Range Performance Malfunction\n"
        "P0A7F,GENERIC,Hybrid/EV Battery Pack A Deterioration\n"
        'P0A7F,AUDI,"Poor connections at the HV battery, ECU issues"\n'
        "NOTACODE,GENERIC,Not a trouble code\n"
        "C0500,GENERIC,\n"
        "B0001,GENERIC,A second definition of B0001\n",
    )
    pack = load_pack()
    before = len(pack)
    pack_p0a7f = pack.get("P0A7F")
    assert pack.get("P0102") is None  # not in the pack: the CSV adds it

    added = pack.merge_csv(table)

    # New: B0001 (once) and P0102 (manufacturer "generic" in lower case counts).
    assert added == 2
    assert len(pack) == before + added
    b0001 = pack.get("B0001")
    assert b0001 is not None
    assert b0001.definition_en == "Driver Frontal Stage 1 Deployment Control"  # first row wins
    assert b0001.source == "csv:codes.csv"
    assert not b0001.actionable  # a bare definition never concludes a session
    assert "root_cause" not in b0001.as_tool_result()
    assert pack.get("P1106") is None  # manufacturer rows are ignored
    assert pack.get("NOTACODE") is None
    assert pack.get("C0500") is None  # no description
    assert pack.get("P0A7F") == pack_p0a7f  # the pack's entry is untouched
    p0102 = pack.get("P0102")
    assert p0102 is not None and p0102.definition_en == "Mass or Volume Air Flow Circuit Low Input"


def test_merge_csv_without_manufacturer_column_treats_rows_as_generic(tmp_path: Path) -> None:
    table = write(tmp_path, "code,description\nB0002,Driver Frontal Stage 2 Deployment Control\n")
    pack = load_pack()
    assert pack.merge_csv(table) == 1
    assert pack.get("B0002").definition_en == "Driver Frontal Stage 2 Deployment Control"  # type: ignore[union-attr]


def test_merge_csv_is_idempotent(tmp_path: Path) -> None:
    table = write(tmp_path, "code,description\nB0002,Driver Frontal Stage 2 Deployment Control\n")
    pack = load_pack()
    assert pack.merge_csv(table) == 1
    assert pack.merge_csv(table) == 0


@pytest.mark.parametrize(
    "header",
    ["code,manufacturer\n", "description,manufacturer\n", "dtc,text\n", ""],
    ids=["no-description", "no-code", "other-names", "empty-file"],
)
def test_merge_csv_without_required_columns_raises(tmp_path: Path, header: str) -> None:
    table = write(tmp_path, header + ("B0001,GENERIC\n" if header else ""))
    with pytest.raises(KnowledgeError, match="code and description"):
        load_pack().merge_csv(table)


def test_merge_csv_missing_file_raises_knowledge_error(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeError):
        load_pack().merge_csv(tmp_path / "absent.csv")


def test_load_pack_with_extra_csv_merges_it(tmp_path: Path) -> None:
    table = write(tmp_path, "code,description\nB0002,Driver Frontal Stage 2 Deployment Control\n")
    assert load_pack(extra_csv=table).get("B0002") is not None


@pytest.mark.parametrize(
    "text",
    ["not json", json.dumps({"codes": []}), json.dumps({"version": "x"})],
    ids=["not-json", "no-version", "no-codes"],
)
def test_load_pack_from_a_broken_file_raises_knowledge_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(KnowledgeError):
        load_pack(write(tmp_path, text, "pack.json"))


def test_real_code_table_merges_thousands_of_generic_codes() -> None:
    if not REAL_TABLE.exists():
        pytest.skip(f"the shared DTC table is not at {REAL_TABLE}")
    pack = load_pack()
    before = len(pack)
    pack_p0a7f = pack.get("P0A7F")

    added = pack.merge_csv(REAL_TABLE)

    # The table holds 9,415 generic SAE codes (its README); the pack's own
    # codes among them are not added again.
    assert 9000 < added < 9415
    assert len(pack) == before + added
    assert pack.get("P0A7F") == pack_p0a7f
    assert pack.get("P0A7F").source == "pack"  # type: ignore[union-attr]
    # A generic row beats the manufacturers' rows of the same code.
    assert pack.get("P1000").definition_en == "Manufacturer Controlled DTC"  # type: ignore[union-attr]
    # A code with only manufacturer rows stays unknown.
    assert pack.get("P1106") is None

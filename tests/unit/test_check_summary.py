"""``vdoctor memory check-summary``: any summary text against a record's stored source."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from jobs.cli import main
from tests.unit.test_engine import SID_1, T0, VIN, Harness, alert
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import load_pack
from vdoctor.models.offline import OfflineModel
from vdoctor.stores import open_store

pytestmark = pytest.mark.unit


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    store = open_store(url)
    h = Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack()))
    for i, hours in enumerate((0, 26, 30)):  # open for 26 h: one milestone, then the conclusion
        signals = {"cell_voltage_diff_mv": 187 if hours == 30 else 60, "pack_temp_c": 41.5}
        h.diagnose(alert(f"e-{i}", T0 + timedelta(hours=hours), signals=signals))
    h.engine.close()
    return url


def check(url: str, summary: str, *extra: str, session: str = SID_1) -> int:
    args = ["memory", "check-summary", "--vin", VIN, "--session-id", session, "--summary", summary]
    return main([*args, "--memory", url, *extra])


def stored(url: str) -> str:
    store = open_store(url)
    record = store.get(VIN, SID_1)
    store.close()
    assert record is not None and record.source
    return record.summary


def test_the_stored_summary_is_faithful(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(url, stored(url)) == 0
    assert capsys.readouterr().out.startswith(f"{SID_1}: faithful (ok)")


def test_a_broken_summary_exits_1_with_its_findings_as_json(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    broken = stored(url).replace("pack_temp_c=41.5°C", "pack_temp_c=41.5°F") + "\ncause: corroded ground strap"
    assert check(url, broken, "--json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["faithful"] is False and out["session_id"] == SID_1
    assert out["missing"] == ["pack_temp_c=41.5°C"]
    assert out["contradicted"][0].startswith("pack_temp_c=41.5°F is not the session's pack_temp_c=41.5°C")
    assert any("corroded" in item for item in out["invented"])
    assert out["readings"] == {"checked": 3, "stated": 2, "omitted": 0}  # 60 and 187; 41.5


def test_a_summary_from_stdin(url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(stored(url)))
    assert check(url, "-") == 0


def test_no_record_or_no_source_is_a_usage_error(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(url, "x", session=f"{VIN}-20200101T000000") == 2
    assert "no long-term record of" in capsys.readouterr().err
    assert check(url, "x", session=f"{SID_1}-m1") == 2  # a milestone keeps no source
    assert "keeps no source to check against" in capsys.readouterr().err

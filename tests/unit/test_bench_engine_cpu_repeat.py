"""bench/engine_cpu.py's repeated runs without stage clocks, and bench/machine_speed.py's reference."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import engine_cpu, machine_speed

pytestmark = pytest.mark.unit


def test_each_run_without_clocks_gets_its_own_store_beside_the_named_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Runs that shared one file would each start from the cases the one before wrote: not the same run.
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        found = {"process_ms_per_alert": 1.25, "model_ms_per_alert": 0.25, "interpreter": "CPython", "reference_ms": 30}
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(found) + "\n")

    monkeypatch.setattr(engine_cpu.subprocess, "run", fake_run)
    store = Path("/tmp/fleet.db")
    figures = [engine_cpu.without_stages(["--vins", "10"], store, run) for run in range(2)]
    assert [(f.process_ms, f.engine_ms) for f in figures] == [(1.25, 1.0), (1.25, 1.0)]
    stores = [cmd[cmd.index("--store", cmd.index("--vins")) + 1] for cmd in seen]
    assert stores == [f"{store}.plain0", f"{store}.plain1"]
    assert all(cmd[-1] == "--no-stages" for cmd in seen)


def test_without_a_store_each_run_makes_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps({"process_ms_per_alert": 2.0}))

    monkeypatch.setattr(engine_cpu.subprocess, "run", fake_run)
    assert engine_cpu.without_stages(["--vins", "10"], None, 1).process_ms == 2.0
    assert "--store" not in seen[0]
    assert seen[0][0] == sys.executable


def test_another_interpreter_runs_the_same_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        found = {"process_ms_per_alert": 1.5, "model_ms_per_alert": 0.5, "interpreter": "other", "reference_ms": 25}
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(found))

    monkeypatch.setattr(engine_cpu.subprocess, "run", fake_run)
    run = engine_cpu.without_stages(["--vins", "10"], None, 0, "/opt/other/bin/python")
    assert seen[0][0] == "/opt/other/bin/python" and seen[0][2:] == ["--vins", "10", "--no-stages"]
    assert (run.engine_ms, run.interpreter, run.reference_ms) == (1.0, "other", 25.0)


def test_the_interpreter_list_is_not_passed_on() -> None:
    # A run without clocks under another interpreter must not start runs of its own.
    argv = ["--vins", "10", "--python", "/a/python", "--repeat", "2", "--python=/b/python"]
    assert engine_cpu.strip_python_args(argv) == ["--vins", "10", "--repeat", "2"]


def test_the_interpreter_names_its_build() -> None:
    described = engine_cpu.interpreter()
    assert described.startswith(f"CPython {sys.version.split()[0]} at {sys.executable}, configured with ")


def test_repeat_below_one_is_refused() -> None:
    with pytest.raises(SystemExit):
        engine_cpu.main(["--repeat", "0"])


def test_the_reference_workload_does_the_same_work_each_time() -> None:
    assert machine_speed._workload() == machine_speed._workload() > 0
    assert 0 < machine_speed.reference_ms(repetitions=1) < 10_000


def test_a_run_whose_events_fail_in_the_engine_gives_no_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A failing alert is cheaper than a diagnosed one: its run would report a lower CPU per alert for less work.
    from vdoctor.diagnosis import DiagnosisEngine

    def broken(*_: Any) -> Any:
        raise TypeError("list object expected; got PackedVector")

    monkeypatch.setattr(DiagnosisEngine, "_write_case", broken)
    assert engine_cpu.main(["--vins", "20", "--embedder", "hashing", "--no-stages", "--out", str(tmp_path)]) == 2
    said = capsys.readouterr()
    # The alerts that write a case failed; the dead letter names the error's type (its text is in the log).
    assert re.search(r"\b[1-9]\d* of \d+ events failed in the engine", said.err) and "TypeError" in said.err
    assert "process_ms_per_alert" not in said.out


def test_a_failed_run_without_clocks_stops_the_bench_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 2, stdout="", stderr="3 of 80 events failed in the engine ...\n")

    monkeypatch.setattr(engine_cpu.subprocess, "run", fake_run)
    with pytest.raises(SystemExit, match="exit 2.*3 of 80 events failed"):
        engine_cpu.without_stages(["--vins", "10"], None, 0)


@pytest.mark.parametrize(
    ("pin", "placed"),
    [
        ("same", "this process on core 0, the embedding child on core 0"),
        ("apart", "this process on core 0, the embedding child on core 1"),
    ],
)
def test_pinned_runs_place_the_embedding_child_as_asked(pin: str, placed: str, tmp_path: Path) -> None:
    # The runs without clocks start pinned to core 0 by the run that starts them: each still places its own child.
    # The heading gives the cores each process may run on, as read back.
    done = subprocess.run(
        [sys.executable, str(Path(engine_cpu.__file__)), "--vins", "40", "--repeat", "1", "--embed-child", "--pin",
         pin, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"sessions read from their stored JSON, {placed}; " in done.stdout
    assert json.loads((tmp_path / "engine_cpu.json").read_text())["engine_ms_per_alert"] > 0

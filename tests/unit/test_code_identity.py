"""A TaskManager's one Python interpreter (thread mode) and the jobs it runs one after the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from operators import code_identity
from operators.code_identity import code_id, enter_job
from vdoctor.errors import ConfigError

pytestmark = pytest.mark.unit


def _tree(root: Path, extra: str = "") -> Path:
    for package in code_identity.PACKAGES:
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text(f"# {package}\n{extra}")
    return root


def test_the_code_id_follows_the_sources_and_the_shipped_distributions(tmp_path: Path) -> None:
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert code_id(a) == code_id(b)
    (b / "vdoctor" / "__init__.py").write_text("# vdoctor\nCHANGED = 1\n")
    assert code_id(a) != code_id(b)
    c = _tree(tmp_path / "c")
    (c / "pydantic-2.11.0.dist-info").mkdir()
    assert code_id(a) != code_id(c)
    # A data file shipped in a package (the knowledge pack) is the code's too; bytecode is each machine's.
    d = _tree(tmp_path / "d")
    (d / "vdoctor" / "__pycache__").mkdir()
    (d / "vdoctor" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    assert code_id(a) == code_id(d)
    (d / "vdoctor" / "dtc_pack.json").write_text('{"version": "2026.12.1"}')
    assert code_id(a) != code_id(d)
    # The checkout's own code: what the client computes and a worker of the same checkout finds.
    assert code_id() == code_id(Path(code_identity.__file__).resolve().parent.parent)


def test_a_job_of_other_code_than_the_interpreter_holds_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(code_identity, "_loaded", None)
    here = code_id()
    enter_job(here)  # the interpreter's first job: its code is what it loads
    assert code_identity._loaded == here
    enter_job(here)  # a job of the same code beside it
    with pytest.raises(ConfigError, match="another version of the job's code .* run this job on fresh TaskManagers"):
        enter_job("0123456789abcdef")


def test_a_job_after_one_whose_files_are_gone_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The modules were imported from an earlier job's folder, deleted when that job ended.
    monkeypatch.setattr(code_identity, "_loaded_root", lambda: tmp_path / "python-files" / "vdoctor-job")
    with pytest.raises(ConfigError, match="loaded by an earlier job, whose files are gone"):
        enter_job(code_id())

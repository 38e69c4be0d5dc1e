"""A store URL names a file, a server or the store in memory, and nothing else is read as one of them.

A sqlite URL that names no file (``sqlite://demo.db``, ``sqlite:demo.db``) was read as a database in
memory: a command ran on an empty store, printed that it found nothing, exited 0, and lost its writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import cli
from vdoctor.errors import ConfigError
from vdoctor.knowledge.stores import open_knowledge_store
from vdoctor.settings import load_settings
from vdoctor.stores import open_store, sqlite_file

pytestmark = pytest.mark.unit

VIN = "LFVAU2180ND238173"
NO_FILE = ["sqlite://demo.db", "sqlite:demo.db", "sqlite:/abs/demo.db", "sqlite:///", " sqlite:///demo.db"]


@pytest.mark.parametrize("url", NO_FILE)
def test_a_sqlite_url_that_names_no_file_is_refused_saying_the_right_form(url: str) -> None:
    with pytest.raises(ConfigError, match=r"names no file: write sqlite:///relative/path or sqlite:////absolute"):
        sqlite_file(url)
    with pytest.raises(ConfigError, match="names no file"):
        open_store(url)
    with pytest.raises(ConfigError, match="names no file"):
        open_knowledge_store(url)


def test_the_forms_that_name_a_file_or_the_store_in_memory_still_do() -> None:
    assert sqlite_file("sqlite:///.vdoctor/memory.db") == ".vdoctor/memory.db"
    assert sqlite_file("sqlite:////data/fleet.db?synchronous=full") == "/data/fleet.db"
    assert sqlite_file("sqlite:///:memory:") == ":memory:"
    assert sqlite_file("sqlite://") is None and sqlite_file("memory://") is None
    assert sqlite_file("mysql://u@db:3306/vd") is None


@pytest.mark.parametrize("url", NO_FILE[:-1])
def test_the_settings_refuse_it_for_memory_and_knowledge(url: str) -> None:
    with pytest.raises(ConfigError, match="names no file"):
        load_settings({"VDOCTOR_MEMORY_URL": url})
    with pytest.raises(ConfigError, match="names no file"):
        load_settings({}, knowledge_url=url)


def test_white_space_around_a_url_from_the_environment_or_a_flag_is_not_part_of_it(tmp_path: Path) -> None:
    # A variable filled from a secret file ends in a newline, which would end the file's name.
    db = tmp_path / "demo.db"
    settings = load_settings(
        {"VDOCTOR_MEMORY_URL": f" sqlite:///{db}\n", "OPENAI_BASE_URL": "http://llm:8000/v1\n"},
        knowledge_url="\tmemory://\n",
    )
    assert settings.memory.url == f"sqlite:///{db}" and settings.memory.knowledge_url == "memory://"
    assert settings.endpoint.base_url == "http://llm:8000/v1"


def test_the_cli_says_so_and_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VDOCTOR_MEMORY_URL", "sqlite://demo.db")
    assert cli.main(["memory", "history", "--vin", VIN]) == 2
    captured = capsys.readouterr()
    assert "names no file" in captured.err and "no long-term memory" not in captured.out


@pytest.mark.parametrize(
    ("memory", "knowledge", "said"),
    [
        ("redis://cache:6379/0", None, "unknown memory URL scheme 'redis'; valid schemes: doris, mem0, memory, mysql"),
        (None, "ftp://files/knowledge", "unknown knowledge URL scheme 'ftp'; valid schemes: memory, sqlite"),
        (None, "mysql://vd:s3cret@db:3306/vd", "unknown knowledge URL scheme 'mysql'"),
    ],
    ids=["memory-redis", "knowledge-ftp", "knowledge-mysql"],
)
def test_a_url_of_no_backend_is_refused_by_the_settings_before_a_job_starts(
    memory: str | None, knowledge: str | None, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run` started the Flink JVM with such a URL, and its operator failed opening the store: a traceback of
    some 140 lines, exit 1, where the memory commands said it in one line (an audit)."""
    flags = {"memory_url": memory} if memory else {"knowledge_url": knowledge}
    with pytest.raises(ConfigError, match=said):
        load_settings({}, **flags)
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text("{}\n", encoding="utf-8")
    given = ["--memory", memory] if memory else ["--knowledge", str(knowledge)]
    assert cli.main(["run", "--alerts", str(alerts), "--out", str(tmp_path / "out"), *given]) == 2
    err = capsys.readouterr().err  # (after the warning of a password on the command line, where one is)
    assert err.splitlines()[-1].startswith("vdoctor: invalid settings: ") and said in err.splitlines()[-1], err
    assert "s3cret" not in err and "Traceback" not in err and err.count("\n") <= 2, err
    assert not (tmp_path / "out").exists()

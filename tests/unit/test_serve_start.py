"""``vdoctor serve`` refuses what it cannot serve before it says where it serves: a ``--diagnoses`` that is not
the job's output, a port another process holds. Each is a one-line ``vdoctor: ...`` error, exit 2."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import inspector.server
from inspector.views import Inspector
from jobs import cli
from jobs.job_settings import SERVE_TOKEN_ENV
from vdoctor.errors import ConfigError
from vdoctor.stores import open_store

pytestmark = pytest.mark.unit

VIN = "LFVAU2180ND238173"
DIAGNOSIS = {"vin": VIN, "session_id": f"{VIN}-20261121T000000", "event_id": "e1", "phase": "CONCLUDED",
             "root_cause": "cell imbalance", "flags": [], "memory": {"injected": False}}  # fmt: skip
DEAD_LETTER = {"stage": "parse", "error": "no field vin", "raw": '{"alert_text": "x"}'}


@pytest.fixture
def memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty long-term store that exists, and an environment that sets nothing for serve."""
    for var in ("VDOCTOR_MEMORY_URL", "VDOCTOR_KNOWLEDGE_URL", SERVE_TOKEN_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("VDOCTOR_EMBEDDER", "hashing")
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    open_store(url).close()
    return url


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Inspector]:
    """The inspectors ``serve`` would have served (it returns at once)."""
    inspectors: list[Inspector] = []
    monkeypatch.setattr(inspector.server, "serve", lambda ins, *rest: inspectors.append(ins))
    return inspectors


@pytest.fixture
def root_logging() -> Iterator[None]:
    """``serve`` sets the root logger's handler (to the stderr of the test): put it back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(*rows: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def one_line_error(capsys: pytest.CaptureFixture[str], *said: str) -> None:
    err = capsys.readouterr().err
    assert err.startswith("vdoctor: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for part in said:
        assert part in err, err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (lines(DEAD_LETTER, DEAD_LETTER), "line 1: not a diagnosis of the job's output (diagnoses.jsonl): no field"),
        (lines({"a": 1}), "line 1: not a diagnosis of the job's output (diagnoses.jsonl): no field 'session_id'"),
        (lines(DIAGNOSIS) + "vin,code\n" + lines(DIAGNOSIS), "line 2: not a diagnosis"),
        ("[1, 2]\n", "line 1: not a diagnosis"),
    ],
    ids=["dead-letters", "other-json", "not-json", "not-an-object"],
)
def test_serve_refuses_a_diagnoses_file_that_is_not_the_jobs_as_memory_health_does(
    content: str, said: str, memory: str, served: list[Inspector], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """serve showed the dead letters as 2 diagnoses of 1 session, and {"a": 1} as 1 of 1 (found by an audit)."""
    given = tmp_path / "dead_letters.jsonl"
    given.write_text(content, encoding="utf-8")
    plot = tmp_path / "h.png"
    assert cli.main(["memory", "health", "--diagnoses", str(given), "--memory", memory, "--plot", str(plot)]) == 2
    one_line_error(capsys, str(given), said)
    assert cli.main(["serve", "--memory", memory, "--diagnoses", str(given)]) == 2
    one_line_error(capsys, str(given), said)
    assert served == []


def test_serve_refuses_a_folder_without_diagnoses(
    memory: str, served: list[Inspector], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder that is not the job's output folder showed no diagnoses, no warning (found by an audit)."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "dead_letters.jsonl").write_text(lines(DEAD_LETTER), encoding="utf-8")
    assert cli.main(["serve", "--memory", memory, "--diagnoses", str(folder)]) == 2
    one_line_error(capsys, str(folder / "diagnoses.jsonl"), "No such file or directory")
    assert served == []


def test_serve_takes_the_output_of_a_job_that_is_still_writing_it(
    memory: str, served: list[Inspector], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A last line without its newline is one the job is writing (cut inside a character, even): not an error.
    A file the job has just opened is empty."""
    folder = tmp_path / "out"
    folder.mkdir()
    given = folder / "diagnoses.jsonl"
    given.write_bytes(b"")
    assert cli.main(["serve", "--memory", memory, "--diagnoses", str(folder)]) == 0
    partial = json.dumps({**DIAGNOSIS, "root_cause": "单体压差过大"}, ensure_ascii=False).encode()
    given.write_bytes(lines(DIAGNOSIS).encode() + partial[: partial.index("压".encode()) + 1])
    assert cli.main(["serve", "--memory", memory, "--diagnoses", str(given)]) == 0
    assert cli.main(["serve", "--memory", memory, "--diagnoses", str(folder)]) == 0
    assert capsys.readouterr().err == ""
    outputs = served[-1].outputs
    # The line being written is neither a diagnosis nor an unreadable line: it is read when it is whole.
    assert outputs is not None and (outputs.summary()["diagnoses"], outputs.summary()["unreadable_lines"]) == (1, 0)
    # memory health reads the same file as far as the job has written it.
    plot = tmp_path / "h.png"
    assert cli.main(["memory", "health", "--diagnoses", str(given), "--memory", memory, "--plot", str(plot)]) == 0
    assert "concluded sessions in the log   1" in capsys.readouterr().out


@pytest.mark.usefixtures("root_logging")
def test_a_port_in_use_is_a_one_line_error_before_any_address_is_announced(
    memory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """serve logged "memory inspector on http://127.0.0.1:PORT/", then uvicorn's error, and exited 3 (found by
    an audit)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert cli.main(["serve", "--memory", memory, "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vdoctor: ") and err.count("\n") == 1, err
    assert f"127.0.0.1:{port}" in err and "--port" in err and "memory inspector on" not in err


@pytest.mark.parametrize(
    "content",
    [b"hello world", (json.dumps(DIAGNOSIS) + "\r" + json.dumps(DIAGNOSIS) + "\r").encode()],
    ids=["one-line-not-json", "cr-only"],
)
def test_a_file_with_no_whole_line_is_no_output_being_written(
    content: bytes, memory: str, served: list[Inspector], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Such a file was read as empty, its only line taken for the one a job was writing (a review): the job ends
    every line with a newline, so a file without one is no output of its."""
    given = tmp_path / "diagnoses.jsonl"
    given.write_bytes(content)
    assert cli.main(["serve", "--memory", memory, "--diagnoses", str(given)]) == 2
    one_line_error(capsys, str(given), "line 1: not a diagnosis")
    plot = tmp_path / "h.png"
    assert cli.main(["memory", "health", "--diagnoses", str(given), "--memory", memory, "--plot", str(plot)]) == 2
    one_line_error(capsys, str(given), "line 1: not a diagnosis")
    assert served == []


def test_an_address_family_this_host_has_no_sockets_of_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """localhost as ::1 and 127.0.0.1 on a host with IPv6 off: serve refused to start, where asyncio binds the
    address it can (a review)."""
    real = socket.socket
    found = [
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 0, 0, 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)),
    ]

    def no_ipv6(family: int = socket.AF_INET, *rest: Any) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(97, "Address family not supported by protocol")
        return real(family, *rest)

    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: found)
    monkeypatch.setattr(socket, "socket", no_ipv6)
    [bound] = inspector.server.listen("localhost", 0)
    try:
        assert bound.getsockname()[0] == "127.0.0.1"
    finally:
        bound.close()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: found[:1])
    with pytest.raises(ConfigError, match="no address of it can be bound"):
        inspector.server.listen("localhost", 0)

"""scripts/doris_schema.py: docker compose's schema service waits for a live Doris BE, creates the database, inits."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import load_script
from vdoctor.errors import ConfigError
from vdoctor.stores.sqltypes import parse_url

pytestmark = pytest.mark.unit

doris_schema = load_script("doris_schema")

INFO = parse_url("doris://root:s3cret@127.0.0.1:9030/vdoctor", 9030)


class Server:
    """Answers each connection in turn: an exception to raise, or the readiness value to return."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.statements: list[str] = []

    def connect(self, _info: Any) -> Server:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        self.value = answer
        return self

    def cursor(self) -> Server:
        return self

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def execute(self, sql: str) -> None:
        self.statements.append(sql)

    def fetchone(self) -> tuple[int]:
        return (self.value,)

    def close(self) -> None:
        pass


def test_it_waits_for_a_live_backend_then_creates_the_database(capsys: pytest.CaptureFixture[str]) -> None:
    server = Server([OSError("connection refused for root:s3cret"), 0, 1])
    slept: list[float] = []
    doris_schema.create_when_ready(INFO, doris_schema.DORIS_READY_SQL, 600, server.connect, slept.append)
    assert server.statements == [doris_schema.DORIS_READY_SQL, doris_schema.DORIS_READY_SQL,
                                 "CREATE DATABASE IF NOT EXISTS `vdoctor`"]  # fmt: skip
    assert slept == [doris_schema.PAUSE_S] * 2
    err = capsys.readouterr().err
    assert "no live backend yet" in err and "connection refused" in err and "s3cret" not in err


def test_it_gives_up_after_the_wait_saying_why_without_the_password() -> None:
    server = Server([OSError("refused for s3cret")] * 3)
    now = iter([0.0, 10.0, 700.0])
    with pytest.raises(ConfigError, match="not ready within 600 s: refused for \\*\\*\\*") as err:
        doris_schema.create_when_ready(
            INFO, doris_schema.DORIS_READY_SQL, 600, server.connect, lambda _s: None, lambda: next(now)
        )
    assert "s3cret" not in str(err.value)


def test_a_bad_url_is_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert doris_schema.main(["doris://root@127.0.0.1:9030/bad-name", "--wait-s", "0"]) == 1
    assert "database name" in capsys.readouterr().err

"""The memory URL, which may hold a password, is not passed as a program argument where others can read it.

A program argument is in ``ps`` for every user of the machine, and Flink's client logs every program
argument of a job it submits; the environment variable (VDOCTOR_MEMORY_URL) is in neither. So the
README's cluster submit command, the one ``vdoctor package`` prints, and every ``--memory`` flag's help
point there.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs import cli_jobs, cli_memory, cli_serve
from jobs.job_settings import CONNECTOR_JAR_NAME
from jobs.package import Bundle
from vdoctor.settings import ENV_VARS

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[2] / "README.md"
# The block tests/integration/test_clean_cluster.py runs as written.
SUBMIT_MARK = "<!-- submit-to-cluster: tests/integration/test_clean_cluster.py runs this block -->"
ENV = ENV_VARS["memory_url"]


def readme_submit_block() -> str:
    found = re.search(re.escape(SUBMIT_MARK) + r"\n```bash\n(.*?)\n```", README.read_text(encoding="utf-8"), re.S)
    assert found, f"README.md has no block marked {SUBMIT_MARK}"
    return found.group(1)


def test_the_submit_command_gives_the_memory_url_in_the_environment_as_the_readme_does() -> None:
    folder = Path("dist/flink-job")
    bundle = Bundle(folder=folder, archive=folder / "vdoctor-job.zip", connector_jar=folder / CONNECTOR_JAR_NAME)
    command = bundle.submit_command()
    assert "--memory" not in command and command.startswith(f'{ENV}="$MEMORY_URL" ')
    # The README's block is what `vdoctor package --out dist/flink-job` prints.
    block = readme_submit_block()
    assert command in block and "--memory" not in block


def _memory_flags(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, str | None]]:
    for action in parser._actions:
        if "--memory" in action.option_strings:
            yield path, action.help
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _memory_flags(child, f"{path} {name}")


def test_every_memory_flag_says_a_url_with_a_password_is_better_in_the_environment() -> None:
    parser = argparse.ArgumentParser(prog="vdoctor")
    sub = parser.add_subparsers(dest="command", required=True)
    for commands in (cli_jobs, cli_memory, cli_serve):
        commands.add_commands(sub)
    flags = list(_memory_flags(parser, "vdoctor"))
    assert {"vdoctor run", "vdoctor serve", "vdoctor memory init", "vdoctor memory history"} <= {p for p, _ in flags}
    for path, help_text in flags:
        assert help_text is not None and f"better given as {ENV}" in help_text, path


def test_a_password_on_the_command_line_is_warned_of_and_not_shown(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs import cli

    # Nothing listens on port 1: the command fails at once, after the warning.
    url = "mysql://fleet:s3cret@127.0.0.1:1/vdoctor"
    assert cli.main(["memory", "history", "--vin", "LSVAX4E64N2000001", "--memory", url]) == 2
    err = capsys.readouterr().err
    assert "the password in --memory is visible to every user of this machine (ps)" in err and ENV in err
    assert "s3cret" not in err
    # The same URL in the environment, where ps does not show it: no warning.
    monkeypatch.setenv(ENV, url)
    assert cli.main(["memory", "history", "--vin", "LSVAX4E64N2000001"]) == 2
    err = capsys.readouterr().err
    assert "warning" not in err and "s3cret" not in err


def test_the_cluster_job_warns_of_a_password_in_its_knowledge_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from jobs.job_settings import warn_passwords_in_arguments

    warn_passwords_in_arguments(argparse.Namespace(memory="sqlite:///m.db", knowledge="mysql://k:p%40ss@db/kb"))
    err = capsys.readouterr().err
    assert "--knowledge" in err and ENV_VARS["knowledge_url"] in err and "--memory" not in err and "p%40ss" not in err
    # A user without a password is no secret.
    warn_passwords_in_arguments(argparse.Namespace(memory="mysql://reader@db/vdoctor"))
    assert capsys.readouterr().err == ""

"""The ``vdoctor`` command line: run the job, feed it, and inspect long-term memory.

Configuration: flags, then VDOCTOR_* environment variables (vdoctor.settings).
The commands live by group: jobs/cli_jobs.py (run, replay, eval),
jobs/cli_memory.py (memory, knowledge) and jobs/cli_serve.py (serve, the memory
inspector); jobs/job_settings.py turns flags into settings.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from jobs import cli_jobs, cli_memory, cli_serve
from jobs.job_settings import warn_passwords_in_arguments
from vdoctor.errors import VDoctorError


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vdoctor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cli_jobs.add_commands(sub)
    cli_memory.add_commands(sub)
    cli_serve.add_commands(sub)
    return parser.parse_args(argv)


def _not_py4j(record: logging.LogRecord) -> bool:
    """py4j logs a traceback for every call that finds the JVM gone, and at exit for every Java object it
    then fails to release: 500 to 1,700 lines each time the Flink JVM of a 400-event local replay was killed
    (three tries), which hid the line that says so (and, unread, filled the output pipe of a test). Its
    errors reach the caller as exceptions, which ``run`` reports; pyflink sets py4j's logger to WARNING when
    it starts the JVM, so the records are dropped here, at the handler."""
    return not (record.name.startswith("py4j") or f"{os.sep}py4j{os.sep}" in record.pathname)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    warn_passwords_in_arguments(args)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_py4j)
    try:
        return int(args.func(args))
    except VDoctorError as e:
        print(f"vdoctor: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of stdout left (``vdoctor memory recall --json | head``): stop as the shell's tools do,
        # without a traceback, and with stdout pointed where a flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer stopped by it


if __name__ == "__main__":
    sys.exit(main())

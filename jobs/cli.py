"""The ``vdoctor`` command line: run the job, feed it, and inspect long-term memory.

Configuration: flags, then VDOCTOR_* environment variables (vdoctor.settings).
The commands live by group: jobs/cli_jobs.py (run, replay, eval),
jobs/cli_memory.py (memory, knowledge) and jobs/cli_serve.py (serve, the memory
inspector); jobs/job_settings.py turns flags into settings.
"""

from __future__ import annotations

import argparse
import logging
import sys

from jobs import cli_jobs, cli_memory, cli_serve
from vdoctor.errors import VDoctorError


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vdoctor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cli_jobs.add_commands(sub)
    cli_memory.add_commands(sub)
    cli_serve.add_commands(sub)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except VDoctorError as e:
        print(f"vdoctor: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

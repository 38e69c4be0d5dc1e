"""Create a store's database and apply vehicle-doctor's schema once the server is ready.

docker-compose.yml's ``doris-schema`` service runs it from the job's image:
it waits until the Doris FE lists a live BE, creates the database the URL
names (``CREATE DATABASE IF NOT EXISTS``), then runs ``vdoctor memory init``,
which fills in the vector index's dimension for the configured embedder and
skips what an earlier run applied. Safe to run again.

    python scripts/doris_schema.py doris://root@127.0.0.1:9030/vdoctor [--wait-s 600]

``--ready-sql`` replaces the readiness statement (its first value must reach
1): the tests run the script against MariaDB with ``SELECT 1``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from vdoctor.errors import ConfigError  # noqa: E402
from vdoctor.stores.sqltypes import ConnInfo, parse_url  # noqa: E402

# Doris answers SQL before a BE has joined; a table can be created only once one is alive.
DORIS_READY_SQL = "SELECT COUNT(*) FROM backends() WHERE alive = true"
PAUSE_S = 5.0


def server_connection(info: ConnInfo) -> Any:
    """A connection to the server without a database (the database may not exist yet)."""
    from vdoctor.stores.mysql import connect

    return connect(info, found_rows=False, database=False)


def create_when_ready(
    info: ConnInfo,
    ready_sql: str,
    wait_s: float,
    connect: Callable[[ConnInfo], Any] = server_connection,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Wait until ``ready_sql`` gives 1 or more, then create the URL's database if it is missing.

    Raises ``ConfigError`` once ``wait_s`` has passed, with the last reason the server was not ready.
    """
    deadline = clock() + wait_s
    while True:
        try:
            conn = connect(info)
            try:
                with conn.cursor() as cur:
                    cur.execute(ready_sql)
                    row = cur.fetchone()
                    if row and int(row[0] or 0) >= 1:
                        # parse_url admits only [A-Za-z_][A-Za-z0-9_]* as a database name.
                        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{info.database}`")
                        return
                    reason = "no live backend yet"
            finally:
                conn.close()
        except Exception as e:  # noqa: BLE001 - the server is starting: any refusal means "not yet"
            reason = info.redact(str(e))
        if clock() >= deadline:
            raise ConfigError(f"{info.redacted} was not ready within {wait_s:.0f} s: {reason}")
        print(f"waiting for {info.redacted}: {reason}", file=sys.stderr, flush=True)
        sleep(PAUSE_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="doris://user:password@host:9030/db (or mysql://...)")
    parser.add_argument("--wait-s", type=float, default=600.0, help="how long to wait for the server (600)")
    parser.add_argument("--ready-sql", default=DORIS_READY_SQL, help="the readiness statement (Doris's live BEs)")
    args = parser.parse_args(argv)
    from jobs.cli import main as cli
    from vdoctor.stores import doris, mysql

    try:
        info = parse_url(args.url, doris.DEFAULT_PORT if args.url.startswith("doris://") else mysql.DEFAULT_PORT)
        create_when_ready(info, args.ready_sql, args.wait_s)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return cli(["memory", "init", "--memory", args.url])


if __name__ == "__main__":
    sys.exit(main())

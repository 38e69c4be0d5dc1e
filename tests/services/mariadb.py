"""A real MariaDB server for the tests: started once per session as a plain process.

``scripts/install/mariadb.sh`` unpacks Debian's MariaDB into ``.services/mariadb``
(the test command runs it through ``scripts/setup.sh``). The ``mariadb`` fixture
starts ``mariadbd`` from there on a free port with a fresh data directory and
stops it at the end of the session; ``mariadb_url`` gives each test its own
empty database with the schema of ``sql/mysql/`` applied. If the server cannot
start, the tests that need it fail with the server's log: they never skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pymysql
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL = REPO_ROOT / ".services" / "mariadb" / "root"
START_TIMEOUT_S = 60
ROOT_PASSWORD = "vdoctor-test-" + uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class MariaDB:
    host: str
    port: int
    user: str
    password: str

    def url(self, database: str) -> str:
        return f"mysql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    def admin(self) -> pymysql.connections.Connection:  # type: ignore[type-arg]
        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password, autocommit=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(INSTALL / "usr/lib/x86_64-linux-gnu") + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else ""
    )
    return env


def _user_flag() -> list[str]:
    # mariadbd refuses to run as root unless told to.
    return ["--user=root"] if os.geteuid() == 0 else []


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDB]:
    mariadbd = INSTALL / "usr/sbin/mariadbd"
    if not mariadbd.exists():
        pytest.fail(f"MariaDB is not installed in {INSTALL.parent}: run bash scripts/install/mariadb.sh")
    work = Path(tempfile.mkdtemp(prefix="vdoctor-mariadb-"))
    datadir, log_path, sock = work / "data", work / "mariadbd.log", work / "mariadbd.sock"
    port = _free_port()
    init = subprocess.run(
        [
            str(INSTALL / "usr/bin/mariadb-install-db"),
            "--no-defaults",
            f"--basedir={INSTALL / 'usr'}",
            f"--datadir={datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *_user_flag(),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if init.returncode != 0:
        pytest.fail(f"mariadb-install-db failed:\n{init.stdout}\n{init.stderr}")
    log_file = log_path.open("w")
    proc = subprocess.Popen(
        [
            str(mariadbd),
            "--no-defaults",
            f"--basedir={INSTALL / 'usr'}",
            f"--datadir={datadir}",
            f"--socket={sock}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--lc-messages-dir={INSTALL / 'usr/share/mysql'}",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=128M",
            "--innodb-flush-log-at-trx-commit=2",
            "--max-allowed-packet=64M",
            *_user_flag(),
        ],
        env=_env(),
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mariadbd exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", connect_timeout=2)
                break
            except pymysql.MySQLError:
                if time.monotonic() > deadline:
                    tail = log_path.read_text()[-3000:]
                    pytest.fail(f"mariadbd did not accept connections in {START_TIMEOUT_S}s:\n{tail}")
                time.sleep(0.2)
        with conn.cursor() as cur:
            # A password, so that tests can check it never leaks into errors or logs.
            cur.execute("ALTER USER 'root'@'localhost' IDENTIFIED BY %s", (ROOT_PASSWORD,))
            cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY %s", (ROOT_PASSWORD,))
            cur.execute("GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
        conn.close()
        yield MariaDB("127.0.0.1", port, "root", ROOT_PASSWORD)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log_file.close()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def mariadb_database(mariadb: MariaDB) -> Iterator[str]:
    """A fresh, empty database for one test (no schema), dropped afterwards."""
    name = "t_" + uuid.uuid4().hex[:16]
    conn = mariadb.admin()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    try:
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.close()


@pytest.fixture
def mariadb_url(mariadb: MariaDB, mariadb_database: str) -> str:
    """A ``mysql://`` URL of a fresh database with the schema of ``sql/mysql/`` applied."""
    from vdoctor.stores.mysql import open_mysql

    url = mariadb.url(mariadb_database)
    store = open_mysql(url)
    try:
        store.init_schema(256)  # sql/mysql/ has no fixed dimension: any will do
    finally:
        store.close()
    return url

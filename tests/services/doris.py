"""A real Apache Doris for the optional contract run, named by VDOCTOR_DORIS_URL.

Doris cannot run here without Docker, so this suite runs only when
``VDOCTOR_DORIS_URL`` (``doris://root@127.0.0.1:9030/vdoctor_test``; the
database part is replaced per test) names a running cluster (see README).
Each test gets its own database with ``sql/doris/`` applied, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pymysql
import pytest

DORIS_ENV = "VDOCTOR_DORIS_URL"
# The ANN index dimension of the test databases (memory init sizes it from the embedder; tests pad to it).
DORIS_TEST_DIM = 256


def doris_configured() -> bool:
    return bool(os.environ.get(DORIS_ENV))


@pytest.fixture
def doris_url() -> Iterator[str]:
    from vdoctor.stores.doris import open_doris
    from vdoctor.stores.sqlbase import parse_url

    base = os.environ.get(DORIS_ENV, "")
    if not base:
        pytest.fail(f"{DORIS_ENV} is not set")
    info = parse_url(base, 9030)
    name = "t_" + uuid.uuid4().hex[:16]
    admin = pymysql.connect(host=info.host, port=info.port, user=info.user, password=info.password, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    parts = urlsplit(base)
    url = urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))
    store = open_doris(url)
    try:
        store.init_schema(DORIS_TEST_DIM)
    finally:
        store.close()
    try:
        yield url
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} FORCE")
        admin.close()

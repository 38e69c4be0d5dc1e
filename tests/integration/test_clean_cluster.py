"""The Kafka job submitted, exactly as the README says, to a Flink cluster that has nothing of ours.

The cluster runs from a separate virtual environment that has only
apache-flink installed (scripts/install/clean-flink.sh): its JobManager,
TaskManager, Python workers and the ``flink`` client all come from there, with
no repository and no project package on any path. The README's block runs as
it is written (with its variables set); the job's code and dependencies reach
the cluster only through what ``vdoctor package`` built.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.conftest import write_events
from tests.integration.events import PART_1, A, B
from tests.services.kafka_flink import SERVICES, FlinkCluster, KafkaBroker, read_topic
from tests.services.mariadb import MariaDB
from vdoctor.stores import open_store
from vdoctor.stores.mysql import open_mysql

pytestmark = pytest.mark.integration

CLEAN_PYTHON = SERVICES / "clean-flink" / "venv" / "bin" / "python"
README_MARK = "<!-- submit-to-cluster: tests/integration/test_clean_cluster.py runs this block -->"


def readme_block() -> str:
    """The shell block under the README's submit-to-cluster mark."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(re.escape(README_MARK) + r"\n```bash\n(.*?)\n```", text, flags=re.S)
    assert found, f"README.md has no block marked {README_MARK}"
    return found.group(1)


@pytest.fixture(scope="module")
def cluster_memory(mariadb: MariaDB) -> Iterator[str]:
    """A MariaDB database with the store's schema, for the cluster's jobs: its URL, password included."""
    name = "cluster_" + uuid.uuid4().hex[:12]
    conn = mariadb.admin()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    url = mariadb.url(name)
    store = open_mysql(url)
    try:
        store.init_schema(512)
    finally:
        store.close()
    yield url
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {name}")
    conn.close()


def _cluster(workdir: Path, memory_url: str) -> FlinkCluster:
    if not CLEAN_PYTHON.is_file():
        pytest.fail(f"no clean apache-flink environment at {CLEAN_PYTHON}: run `bash scripts/setup.sh`")
    # The memory URL with its password in the TaskManagers' environment, as the README asks of a cluster.
    env = {"VDOCTOR_MEMORY_URL": memory_url}
    return FlinkCluster(workdir, slots=1, python=CLEAN_PYTHON, env=env).start()


@pytest.fixture(scope="module")
def clean_cluster(tmp_path_factory: pytest.TempPathFactory, cluster_memory: str) -> Iterator[FlinkCluster]:
    cluster = _cluster(tmp_path_factory.mktemp("clean-flink"), cluster_memory)
    yield cluster
    cluster.stop()


@pytest.fixture
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory, cluster_memory: str) -> Iterator[FlinkCluster]:
    """A cluster of its own: its TaskManager has run no job (see ``operators/code_identity.py``)."""
    cluster = _cluster(tmp_path_factory.mktemp("fresh-flink"), cluster_memory)
    yield cluster
    cluster.stop()


def test_the_clean_environment_has_nothing_of_ours(clean_cluster: FlinkCluster) -> None:
    for module in ("vdoctor", "jobs", "operators", "pydantic", "openai"):
        proc = subprocess.run([str(CLEAN_PYTHON), "-c", f"import {module}"], cwd=clean_cluster.workdir,
                              env=clean_cluster.env, capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0, f"{module} is importable in the clean environment"
    conf = (clean_cluster.workdir / "conf" / "config.yaml").read_text()
    pythonpath = re.search(r"^python.pythonpath: (.*)$", conf, flags=re.M)
    assert pythonpath is not None
    # Only the clean environment's own site-packages: no checkout, no project environment.
    assert [Path(p).resolve() for p in pythonpath.group(1).split(":")] == [
        p.resolve() for p in (CLEAN_PYTHON.parent.parent / "lib").glob("python3.*/site-packages")
    ]
    assert str(REPO_ROOT / ".venv") not in conf and "PYTHONPATH" not in clean_cluster.env


def _start(
    kafka: KafkaBroker, cluster: FlinkCluster, topics: dict[str, str], tmp_path: Path, memory_url: str
) -> tuple[str, Path]:
    """The README's block run with ``MEMORY_URL=memory_url`` over PART_1 and a bad line: the job's id and the
    user's folder."""
    work = tmp_path / "user"
    work.mkdir(parents=True)
    # The README's commands run from a checkout; .venv/bin/vdoctor is this project's environment.
    (work / ".venv").symlink_to(REPO_ROOT / ".venv")
    env = {
        **cluster.env,
        "JOBMANAGER": f"localhost:{cluster.rest_port}",
        "CLIENT_PYTHON": str(CLEAN_PYTHON),  # the client needs no more than apache-flink either
        "KAFKA": kafka.bootstrap,
        "MEMORY_URL": memory_url,
        "CHECKPOINTS": (tmp_path / "checkpoints").as_uri(),
    }
    # The test's own topics, consumer group and transactional ids, after the README's flags.
    extra = (
        f" --alerts-topic {topics['alerts']} --diagnoses-topic {topics['diagnoses']}"
        f" --dead-letters-topic {topics['dead']} --group-id g-{topics['alerts']}"
        f" --transactional-id-prefix tx-{topics['alerts']} --concurrency 1 --restart-attempts 0"
    )
    script = readme_block() + extra + "\n"
    events = write_events(tmp_path / "events.jsonl", [*PART_1, "{not json"])
    replay = subprocess.run([sys.executable, "-m", "jobs.cli", "replay", "--alerts", str(events), "--bootstrap",
                             kafka.bootstrap, "--topic", topics["alerts"], "--quiet"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stderr
    submitted = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                               capture_output=True, text=True, timeout=600)
    found = re.search(r"JobID ([0-9a-f]{32})", submitted.stdout)
    assert submitted.returncode == 0 and found, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    return found.group(1), work


def _submit(
    kafka: KafkaBroker, cluster: FlinkCluster, topics: dict[str, str], tmp_path: Path, memory_url: str
) -> tuple[dict[str, tuple[str, dict]], list[tuple[str, str]], dict[str, object]]:  # type: ignore[type-arg]
    """``_start``, then the diagnoses by event id (with their keys), the dead letters, and the job's status
    while it ran; the job is cancelled."""
    job_id, work = _start(kafka, cluster, topics, tmp_path, memory_url)
    try:
        diagnoses = read_topic(kafka.bootstrap, topics["diagnoses"], expect=3, timeout_s=240)
        dead = read_topic(kafka.bootstrap, topics["dead"], expect=1, timeout_s=60)
    finally:
        status = cluster.rest(f"/jobs/{job_id}")
        if status.get("state") != "RUNNING":  # why, in the assertion's message
            status["exceptions"] = cluster.rest(f"/jobs/{job_id}/exceptions")
        cluster.flink("cancel", job_id)
    assert os.path.isfile(work / "dist" / "flink-job" / "vdoctor-job.zip")
    return {json.loads(v)["event_id"]: (k, json.loads(v)) for k, v in diagnoses}, dead, status


def test_job_submitted_as_the_readme_says_diagnoses_on_a_clean_cluster(
    kafka: KafkaBroker, clean_cluster: FlinkCluster, topics: dict[str, str], tmp_path: Path
) -> None:
    memory = tmp_path / "memory.db"
    by_id, dead, status = _submit(kafka, clean_cluster, topics, tmp_path, f"sqlite:///{memory}")
    assert status["state"] == "RUNNING", json.dumps(status.get("exceptions"))[-6000:]
    assert sorted(by_id) == ["e-1", "e-2", "e-5"]
    assert [by_id[e][1]["phase"] for e in ("e-1", "e-2", "e-5")] == ["CONCLUDED", "CONCLUDED", "INVESTIGATING"]
    assert by_id["e-1"][0] == A and by_id["e-2"][0] == B  # keyed by VIN
    assert [json.loads(v)["stage"] for _, v in dead] == ["parse"]
    # The TaskManager, on the clean Python, wrote both concluded cases to long-term memory.
    for vin, session in ((A, f"{A}-20261101T080000"), (B, f"{B}-20261102T080000")):
        history = subprocess.run([sys.executable, "-m", "jobs.cli", "memory", "history", "--vin", vin, "--json",
                                  "--memory", f"sqlite:///{memory}"], cwd=REPO_ROOT, capture_output=True,
                                 text=True, timeout=60, check=True)
        assert [r["session_id"] for r in json.loads(history.stdout)] == [session]
    # Every Python the job ran on was the clean one (the TaskManager log names its interpreter).
    logs = "".join(p.read_text(errors="replace") for p in (clean_cluster.workdir / "log").glob("*taskexecutor*.log"))
    assert str(CLEAN_PYTHON) in logs and str(REPO_ROOT / ".venv") not in logs


def test_a_cluster_jobs_workers_take_the_store_password_from_their_own_environment(
    kafka: KafkaBroker, fresh_cluster: FlinkCluster, topics: dict[str, str], tmp_path: Path, cluster_memory: str
) -> None:
    # The client is given the URL with another password. The job ships the URL without it, and the workers
    # read the whole URL from the TaskManagers' environment: were the client's password shipped in the
    # JobGraph (which a cluster keeps in its blob and HA storage), the workers would fail to log in.
    user_and_password = cluster_memory.split("://", 1)[1].rpartition("@")[0]
    elsewhere = cluster_memory.replace(user_and_password, user_and_password.split(":")[0] + ":not-the-password")
    by_id, dead, status = _submit(kafka, fresh_cluster, topics, tmp_path, elsewhere)
    assert status["state"] == "RUNNING", json.dumps(status.get("exceptions"))[-6000:]
    assert [by_id[e][1]["phase"] for e in ("e-1", "e-2", "e-5")] == ["CONCLUDED", "CONCLUDED", "INVESTIGATING"]
    assert not [d for _, d in by_id.values() if "l3_write_failed" in d["flags"] or d["memory"]["degraded"]]
    assert [json.loads(v)["stage"] for _, v in dead] == ["parse"]
    store = open_store(cluster_memory)
    try:
        for vin, session in ((A, f"{A}-20261101T080000"), (B, f"{B}-20261102T080000")):
            assert [r.session_id for r in store.history(vin)] == [session]
    finally:
        store.close()


def test_a_job_resubmitted_to_taskmanagers_that_ran_one_stops_with_an_error_that_says_why(
    kafka: KafkaBroker, clean_cluster: FlinkCluster, topics: dict[str, str], tmp_path: Path
) -> None:
    # A resubmission (or an upgrade) to TaskManagers that ran the job before: their one interpreter (thread
    # mode) still holds the earlier job's modules, whose files were deleted with it.
    if not clean_cluster.rest("/jobs/overview")["jobs"]:  # run alone: a job first
        _submit(kafka, clean_cluster, topics, tmp_path / "first", f"sqlite:///{tmp_path / 'first.db'}")
    job_id, _ = _start(kafka, clean_cluster, topics, tmp_path / "again", f"sqlite:///{tmp_path / 'memory.db'}")
    try:
        deadline = time.monotonic() + 180
        while clean_cluster.rest(f"/jobs/{job_id}")["state"] != "FAILED" and time.monotonic() < deadline:
            time.sleep(2)
        status = clean_cluster.rest(f"/jobs/{job_id}")
        exceptions = json.dumps(clean_cluster.rest(f"/jobs/{job_id}/exceptions"))
    finally:
        clean_cluster.flink("cancel", job_id)
    assert status["state"] == "FAILED", status
    assert "loaded by an earlier job, whose files are gone" in exceptions
    assert "run this job on fresh TaskManagers" in exceptions

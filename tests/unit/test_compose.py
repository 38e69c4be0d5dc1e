"""docker-compose.yml and its Flink image: the references that can be checked without Docker."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_stack_has_the_pinned_versions() -> None:
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:4.")
    assert SERVICES["doris-fe"]["image"] == "apache/doris:fe-4.1.4"
    assert SERVICES["doris-be"]["image"] == "apache/doris:be-4.1.4"
    assert {"jobmanager", "taskmanager", "vdoctor-job"} <= set(SERVICES)


def test_flink_image_builds_from_files_that_exist() -> None:
    build = SERVICES["jobmanager"]["build"]
    dockerfile = REPO_ROOT / build["context"] / build["dockerfile"]
    assert dockerfile.is_file()
    for src in re.findall(r"^COPY (\S+) ", dockerfile.read_text(), flags=re.M):
        assert (REPO_ROOT / src).exists(), f"Dockerfile copies missing {src}"
    assert "scripts/install/flink-kafka.sh" in dockerfile.read_text()


def test_job_is_submitted_with_the_kafka_entry_point_and_schema_applied_first() -> None:
    job = SERVICES["vdoctor-job"]
    command = " ".join(job["command"])
    assert "-py /opt/vdoctor/jobs/kafka_job.py" in command and "--kafka 127.0.0.1:9092" in command
    assert (REPO_ROOT / "jobs" / "kafka_job.py").is_file()
    assert job["depends_on"]["doris-schema"]["condition"] == "service_completed_successfully"
    schema = SERVICES["doris-schema"]
    assert "./sql:/sql:ro" in schema["volumes"] and "/sql/doris/*.sql" in " ".join(schema["command"])

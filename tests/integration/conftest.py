"""Session-scoped real services for the integration tier: a Kafka 4.x broker and a standalone Flink cluster.

Each starts once per test session as plain processes on free ports and stops
at the end. A service that cannot start fails the tests that need it (never
a skip): run `bash scripts/setup.sh` first, which fetches the jars.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services.kafka_flink import FlinkCluster, KafkaBroker

_topic_ids = itertools.count(1)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka")).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def flink_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlinkCluster]:
    cluster = FlinkCluster(tmp_path_factory.mktemp("flink")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def topics(kafka: KafkaBroker, request: pytest.FixtureRequest) -> dict[str, str]:
    """Unique input, diagnoses and dead-letter topics for one test."""
    n = next(_topic_ids)
    base = f"t{n}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
    names = {"alerts": f"{base}.alerts", "diagnoses": f"{base}.diagnoses", "dead": f"{base}.dead"}
    kafka.create_topics(names.values())
    return names


def write_events(path: Path, events: list[dict[str, object] | str]) -> Path:
    path.write_text(
        "\n".join(e if isinstance(e, str) else json.dumps(e, ensure_ascii=False) for e in events) + "\n",
        encoding="utf-8",
    )
    return path

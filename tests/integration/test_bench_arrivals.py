"""bench/scale_out.py counts the diagnoses by the topic's end offsets, on a real broker: every record produced
is counted once, in order of arrival, and a count that never comes ends at the timeout with what arrived."""

from __future__ import annotations

import threading
import time

from bench.scale_out import POLL_S, count_arrivals
from tests.services.kafka_flink import KafkaBroker


def _produce(kafka: KafkaBroker, topic: str, n: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    try:
        for i in range(n):
            producer.send(topic, key=f"v{i % 7}".encode(), value=b"{}")
        producer.flush()
    finally:
        producer.close()


def test_every_record_on_every_partition_is_counted_when_it_arrives(kafka: KafkaBroker) -> None:
    topic = "bench-arrivals"
    kafka.create_topics([topic], partitions=4)
    _produce(kafka, topic, 30)  # before the count starts
    got: list[list[float]] = []
    counting = threading.Thread(target=lambda: got.append(count_arrivals(kafka.bootstrap, topic, 80, 60, "t")))
    counting.start()
    time.sleep(1.0)
    second = time.monotonic()
    _produce(kafka, topic, 50)
    counting.join(timeout=90)
    (arrived,) = got
    assert len(arrived) == 80
    assert arrived == sorted(arrived)
    # The first 30 were there at the first count; the other 50 arrived after they were sent.
    assert arrived[29] < second
    assert all(t >= second for t in arrived[30:])
    assert arrived[-1] - second < 10 * POLL_S + 5


def test_a_count_that_never_comes_ends_at_its_timeout_with_what_arrived(kafka: KafkaBroker) -> None:
    topic = "bench-arrivals-short"
    kafka.create_topics([topic], partitions=2)
    _produce(kafka, topic, 12)
    started = time.monotonic()
    arrived = count_arrivals(kafka.bootstrap, topic, 20, 2.0, "t")
    assert len(arrived) == 12
    assert 2.0 <= time.monotonic() - started < 10

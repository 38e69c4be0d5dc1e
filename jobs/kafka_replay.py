"""`vdoctor replay`: produce a JSONL file of events to a Kafka topic, keyed by VIN, at a chosen rate.

Every non-blank line is sent as it is (bad lines too: the job routes them to
its dead-letter topic). The record key is the event's VIN when the line is a
JSON object with one, so that a vehicle's events share a partition and keep
their order.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from jobs.job_settings import bootstrap_servers, check_rate, topic_problem
from vdoctor.errors import ConfigError, VDoctorError
from vdoctor.events import key_vin, raw_vin

# Redraw the progress bar at most this often.
PROGRESS_EVERY_S = 0.5
BAR_WIDTH = 30
# Wait this long for the broker to answer the first metadata request.
CONNECT_TIMEOUT_S = 30


class ReplayError(VDoctorError):
    """The events could not be produced: check the bootstrap address and that the broker is up."""


@dataclass
class ReplayReport:
    topic: str
    lines: int = 0
    sent: int = 0
    failed: int = 0
    keyed: int = 0
    wall_s: float = 0.0

    def render(self) -> str:
        rate = self.sent / self.wall_s if self.wall_s > 0 else float("nan")
        return (
            f"vdoctor replay: {self.sent} of {self.lines} events produced to {self.topic} "
            f"({self.keyed} keyed by VIN, {self.failed} failed) in {self.wall_s:.1f} s, {rate:.0f} events/s"
        )


# Where a line of the alerts file ends, as the job's file source (Java's readLine) and check-events (Python's
# universal newlines) end it: str.splitlines also ends one at U+2028, U+2029, U+0085 and four control
# characters, which JSON carries raw inside a string: an alert text holding one was sent as two broken events.
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")


def read_alerts(path: Path) -> str:
    """The alerts file's text; bytes that are not UTF-8 read as U+FFFD, as ``run`` and ``check-events`` read
    them (the job makes such a line a dead letter, or reads it with the character replaced)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ConfigError(f"cannot read the alerts file {path}: {e.strerror}") from None


def vin_key(line: str) -> bytes | None:
    """The VIN of a JSON event line, as the record key (as the job keys its outputs); None for lines without one."""
    try:
        data = json.loads(line.removeprefix("\ufeff"))  # (a Windows file's first line: read past, as the job does)
    except (ValueError, RecursionError):
        return None
    vin = key_vin(raw_vin(data))
    return None if vin is None else vin.encode("utf-8")


def _draw(progress: TextIO, done: int, total: int, started: float) -> None:
    frac = done / total if total else 1.0
    filled = int(frac * BAR_WIDTH)
    elapsed = time.monotonic() - started
    rate = done / elapsed if elapsed > 0 else 0.0
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    progress.write(f"\r  [{bar}] {done}/{total} events, {rate:.0f}/s")
    progress.flush()


def _producer(bootstrap: str) -> Any:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    try:
        return KafkaProducer(
            bootstrap_servers=bootstrap.split(","),
            acks="all",
            linger_ms=5,
            retries=5,
            request_timeout_ms=CONNECT_TIMEOUT_S * 1000,
            max_block_ms=CONNECT_TIMEOUT_S * 1000,
        )
    except KafkaError as e:
        raise ReplayError(f"cannot reach Kafka at {bootstrap}: {type(e).__name__}: {e}") from e


def replay_file(
    path: Path, bootstrap: str, topic: str, rate: float | None = None, progress: TextIO | None = sys.stderr
) -> ReplayReport:
    """Produce every non-blank line of ``path`` to ``topic``; block until the broker acknowledged them all.

    ``rate`` (events/s) paces the sends against the wall clock; None sends as fast as possible.
    """
    from kafka.errors import KafkaError

    check_rate(rate, "events")
    if problem := topic_problem(topic):
        raise ConfigError(f"--topic: {problem}")
    try:
        bootstrap = bootstrap_servers(bootstrap)
    except ValueError as e:
        raise ConfigError(f"--bootstrap: {e}") from None
    lines = [line for line in _LINE_BREAK_RE.split(read_alerts(path)) if line.strip()]
    report = ReplayReport(topic=topic, lines=len(lines))
    producer = _producer(bootstrap)
    started = time.monotonic()
    last_draw = 0.0
    futures = []
    try:
        for i, line in enumerate(lines):
            if rate is not None:
                due = started + i / rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            key = vin_key(line)
            report.keyed += key is not None
            futures.append(producer.send(topic, key=key, value=line.encode("utf-8")))
            now = time.monotonic()
            if progress is not None and now - last_draw > PROGRESS_EVERY_S:
                last_draw = now
                _draw(progress, i + 1, len(lines), started)
        producer.flush()
        for future in futures:
            try:
                future.get(timeout=CONNECT_TIMEOUT_S)
                report.sent += 1
            except KafkaError:
                report.failed += 1
    except KafkaError as e:
        raise ReplayError(f"producing to {topic} at {bootstrap} failed: {type(e).__name__}: {e}") from e
    finally:
        producer.close()
    report.wall_s = time.monotonic() - started
    if progress is not None:
        _draw(progress, report.sent, len(lines), started)
        progress.write("\n")
    return report

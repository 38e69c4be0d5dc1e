"""Bounded replay: run the diagnosis job over a JSONL file on the local MiniCluster (``vdoctor run --alerts``)."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pyflink.common import WatermarkStrategy
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

from jobs import pipeline
from jobs.flink_env import make_env
from jobs.job_settings import ReplaySettings
from operators.parse import DIAGNOSIS
from vdoctor.settings import Settings

# Progress goes to stderr at most this often.
PROGRESS_EVERY_S = 2.0


@dataclass
class RunReport:
    lines: int = 0
    diagnoses: int = 0
    dead_letters: int = 0
    dead_by_stage: Counter[str] = field(default_factory=Counter)
    sessions: set[str] = field(default_factory=set)
    concluded: int = 0
    sessions_with_memory: set[str] = field(default_factory=set)
    sessions_with_own: set[str] = field(default_factory=set)
    sessions_with_similar: set[str] = field(default_factory=set)
    wall_s: float = 0.0
    processing_s: float = 0.0

    def add_diagnosis(self, d: dict[str, object]) -> None:
        self.diagnoses += 1
        sid = str(d["session_id"])
        self.sessions.add(sid)
        if d["phase"] == "CONCLUDED":
            self.concluded += 1
        memory = d.get("memory") or {}
        if isinstance(memory, dict) and memory.get("injected"):
            self.sessions_with_memory.add(sid)
            if memory.get("own"):
                self.sessions_with_own.add(sid)
            if memory.get("similar"):
                self.sessions_with_similar.add(sid)

    def render(self) -> str:
        # (No result, as for an empty file: no rate to give.)
        rate = f"{self.lines / self.processing_s:.0f} events/s" if self.processing_s > 0 else "no results"
        stages = ", ".join(f"{k} {v}" for k, v in sorted(self.dead_by_stage.items())) or "none"
        return "\n".join(
            [
                "vdoctor run summary",
                f"  events read        {self.lines}",
                f"  diagnoses          {self.diagnoses}",
                f"  sessions opened    {len(self.sessions)}",
                f"  sessions concluded {self.concluded}",
                f"  memory recalls     {len(self.sessions_with_memory)} sessions "
                f"(own history {len(self.sessions_with_own)}, similar cases {len(self.sessions_with_similar)})",
                f"  dead letters       {self.dead_letters} ({stages})",
                f"  wall time          {self.wall_s:.1f} s; {rate} after the job started",
            ]
        )


def count_lines(path: Path) -> int:
    """The lines of an alerts file that are not blank, as the job reads them: ended by ``\n``, ``\r\n`` or a
    ``\r`` alone (a file of ``\r``-ended lines was counted as one line: "events read 1" for 5 diagnoses)."""
    with path.open("r", encoding="utf-8", errors="replace", newline=None) as fh:
        return sum(1 for line in fh if line.strip())


def run_file(replay: ReplaySettings, settings: Settings, progress: TextIO | None = sys.stderr) -> RunReport:
    """Run the job over ``replay.alerts``; write diagnoses and dead letters under ``replay.out``."""
    started = time.monotonic()
    report = RunReport()
    report.lines = count_lines(replay.alerts)
    out_dir = replay.out
    out_dir.mkdir(parents=True, exist_ok=True)
    env = make_env(replay.flink)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(replay.alerts.resolve())).build()
    raw = env.from_source(source, WatermarkStrategy.no_watermarks(), "alerts file").uid("alerts-file")
    results = pipeline.build(raw, settings, rate=replay.rate, output_type=pipeline.COLLECTED_TYPE)
    if replay.flink.restore_from is not None:
        # The collect sink's state belongs to the client of the run that died
        # (restoring it fails with "userVisibleTail should not be larger than
        # offset"): a restored run gets a new sink, and its old state is dropped.
        results = results.map(lambda row: row, output_type=pipeline.COLLECTED_TYPE).name("restored output")
    first_at = last_print = 0.0
    with (
        (out_dir / "diagnoses.jsonl").open("w", encoding="utf-8") as diag_out,
        (out_dir / "dead_letters.jsonl").open("w", encoding="utf-8") as dead_out,
        results.execute_and_collect("vdoctor replay") as rows,
    ):
        for kind, payload in rows:
            now = time.monotonic()
            if not first_at:
                first_at = now
            if kind == DIAGNOSIS:
                diag_out.write(payload + "\n")
                report.add_diagnosis(json.loads(payload))
            else:
                dead_out.write(payload + "\n")
                report.dead_letters += 1
                report.dead_by_stage[str(json.loads(payload)["stage"])] += 1
            if progress is not None and now - last_print > PROGRESS_EVERY_S:
                last_print = now
                done = report.diagnoses + report.dead_letters
                print(f"  ... {done} results ({report.concluded} concluded)", file=progress, flush=True)
    end = time.monotonic()
    report.wall_s = end - started
    report.processing_s = end - first_at if first_at else 0.0
    return report

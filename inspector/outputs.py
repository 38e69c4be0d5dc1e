"""The job's outputs beside long-term memory: ``diagnoses.jsonl`` and ``dead_letters.jsonl`` (``--diagnoses``).

Checked once when the inspector starts, as ``memory health`` checks its
``--diagnoses`` (``health.read_diagnoses``); then read again when a file
changes (a running job appends to them), and a line that is not a JSON object
is counted, never shown.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vdoctor.evaluation.health import read_diagnoses

DIAGNOSES = "diagnoses.jsonl"
DEAD_LETTERS = "dead_letters.jsonl"
# Dead letters shown on the fleet page, newest (last in the file) first; raw text cut for display.
SHOWN_DEAD_LETTERS = 10
RAW_CHARS = 200


@dataclass
class _File:
    path: Path
    stamp: tuple[float, int] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self.stamp, self.rows, self.unreadable = None, [], 0
            return self.rows
        stamp = (stat.st_mtime, stat.st_size)
        if stamp != self.stamp:
            rows, bad = [], 0
            with self.path.open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError:
                        if not line.endswith("\n"):
                            break  # the last line, which a running job is writing: read with the rest next time
                        row = None
                    if isinstance(row, dict):
                        rows.append(row)
                    else:
                        bad += 1
            self.stamp, self.rows, self.unreadable = stamp, rows, bad
        return self.rows


class JobOutputs:
    """A job's output folder, or its diagnoses file with the dead letters beside it."""

    def __init__(self, path: Path) -> None:
        folder = path if path.is_dir() else path.parent
        self.diagnoses = _File(path / DIAGNOSES if path.is_dir() else path)
        self.dead_letters = _File(folder / DEAD_LETTERS)
        self._lock = threading.Lock()

    @classmethod
    def checked(cls, path: Path) -> JobOutputs:
        """The outputs at ``path`` once its diagnoses file reads as the job's; a file that does not (the dead
        letters, another JSON Lines file, a folder without ``diagnoses.jsonl``) is a ``ConfigError`` naming it,
        where the inspector showed its lines as diagnoses, or none. A last line the job is writing is no error.
        """
        outputs = cls(path)
        read_diagnoses(outputs.diagnoses.path)
        return outputs

    @property
    def label(self) -> str:
        return str(self.diagnoses.path)

    def _read(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        with self._lock:
            return self.diagnoses.read(), self.dead_letters.read()

    def summary(self) -> dict[str, Any]:
        diagnoses, dead = self._read()
        flags: Counter[str] = Counter(f for d in diagnoses for f in d.get("flags") or [] if isinstance(f, str))
        stages: Counter[str] = Counter(str(d.get("stage", "?")) for d in dead)
        return {
            "diagnoses_file": self.label,
            "diagnoses": len(diagnoses),
            "sessions": len({d.get("session_id") for d in diagnoses}),
            "concluded": sum(d.get("phase") == "CONCLUDED" for d in diagnoses),
            "with_memory": sum(bool((d.get("memory") or {}).get("injected")) for d in diagnoses),
            "degraded_memory": sum(bool((d.get("memory") or {}).get("degraded")) for d in diagnoses),
            "flags": dict(flags.most_common()),
            "unreadable_lines": self.diagnoses.unreadable + self.dead_letters.unreadable,
            "dead_letters": {
                "total": len(dead),
                "by_stage": dict(sorted(stages.items())),
                "latest": [_dead_letter(d) for d in reversed(dead[-SHOWN_DEAD_LETTERS:])],
            },
        }

    def for_sessions(self, vin: str, session_ids: set[str] | None = None) -> list[dict[str, Any]]:
        """The vehicle's diagnoses in output order (only those of ``session_ids`` when given)."""
        diagnoses, _ = self._read()
        return [
            _diagnosis(d)
            for d in diagnoses
            if d.get("vin") == vin and (session_ids is None or d.get("session_id") in session_ids)
        ]


def _dead_letter(d: dict[str, Any]) -> dict[str, Any]:
    raw = str(d.get("raw", ""))
    return {
        "stage": d.get("stage"),
        "error": str(d.get("error", ""))[:RAW_CHARS],
        "raw": raw[:RAW_CHARS] + ("…" if len(raw) > RAW_CHARS else ""),
    }


def _diagnosis(d: dict[str, Any]) -> dict[str, Any]:
    memory = d.get("memory") or {}
    return {
        "event_id": d.get("event_id"),
        "session_id": d.get("session_id"),
        "phase": d.get("phase"),
        "priority": d.get("priority"),
        "root_cause": d.get("root_cause"),
        "confidence": d.get("confidence"),
        "flags": d.get("flags") or [],
        "memory": {
            "injected": bool(memory.get("injected")),
            "tokens": memory.get("tokens", 0),
            "own": len(memory.get("own") or []),
            "similar": len(memory.get("similar") or []),
        },
    }

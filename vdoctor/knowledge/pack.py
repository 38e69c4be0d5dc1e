"""DTC knowledge: the pack we ship, plus extra code tables loaded from CSV.

The pack (``dtc_pack.json``, written by this project) maps a trouble code to
its definition, fault family, likely root cause, fix action, priority and the
evidence that confirms it. An extra CSV table (columns ``code`` and
``description``, optionally ``manufacturer``) adds definitions for codes the
pack does not know; such codes have no root cause, so they never conclude a
session on their own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from vdoctor.errors import KnowledgeError
from vdoctor.lines import fmt_num
from vdoctor.units import SIGNAL_NAME

_RULE_SIGNAL_RE = re.compile(rf"^({SIGNAL_NAME})(>=|<=)(-?[\d.]+)$")
_RULE_REPEAT_RE = re.compile(r"^code seen in (\d+) alerts$")


@dataclass(frozen=True)
class ConfirmRule:
    """Evidence that confirms a fault: a signal over/under a threshold, or the code repeating."""

    signal: str | None = None
    op: Literal[">=", "<="] = ">="
    threshold: float = 0.0
    repeat: int = 0

    def satisfied_by(self, value: float) -> bool:
        return value >= self.threshold if self.op == ">=" else value <= self.threshold

    def describe(self) -> str:
        """The rule as the ``lookup_dtc`` tool states it: ``cell_voltage_diff_mv>=100`` or ``code seen in 3 alerts``."""
        if self.signal:
            return f"{self.signal}{self.op}{fmt_num(self.threshold)}"
        return f"code seen in {self.repeat} alerts"

    @staticmethod
    def parse(text: str) -> ConfirmRule | None:
        """The rule ``describe`` wrote, or None for any other text."""
        sig = _RULE_SIGNAL_RE.match(text)
        if sig:
            op: Literal[">=", "<="] = ">=" if sig.group(2) == ">=" else "<="
            return ConfirmRule(signal=sig.group(1), op=op, threshold=float(sig.group(3)))
        rep = _RULE_REPEAT_RE.match(text)
        return ConfirmRule(repeat=int(rep.group(1))) if rep else None


@dataclass(frozen=True)
class DtcEntry:
    code: str
    definition_en: str
    definition_zh: str = ""
    family: str = "unknown"
    root_cause: str | None = None
    fix_action: str | None = None
    priority: Literal["P1", "P2", "P3"] | None = None
    confirm: ConfirmRule | None = None
    keywords: tuple[str, ...] = ()
    source: str = "pack"

    @property
    def actionable(self) -> bool:
        """True when the entry can conclude a session: it names a cause, a fix and its evidence."""
        return bool(self.root_cause and self.fix_action and self.priority and self.confirm)

    def as_tool_result(self) -> dict[str, object]:
        out: dict[str, object] = {
            "code": self.code,
            "definition": self.definition_en,
            "definition_zh": self.definition_zh,
            "family": self.family,
            "source": self.source,
        }
        if self.actionable and self.confirm is not None:
            out.update(
                root_cause=self.root_cause,
                fix_action=self.fix_action,
                priority=self.priority,
                confirm=self.confirm.describe(),
            )
        return out


@dataclass
class KnowledgePack:
    version: str
    entries: dict[str, DtcEntry] = field(default_factory=dict)

    def get(self, code: str) -> DtcEntry | None:
        return self.entries.get(code.upper())

    def __len__(self) -> int:
        return len(self.entries)

    def rule_signals(self) -> dict[str, list[DtcEntry]]:
        """The signals the pack's rules confirm faults by, each with the entries whose rule tests it, by name:
        the names a fleet's signal map (``vdoctor.signal_map``) maps its own names to."""
        found: dict[str, list[DtcEntry]] = {}
        for entry in sorted(self.entries.values(), key=lambda e: e.code):
            if entry.confirm is not None and entry.confirm.signal:
                found.setdefault(entry.confirm.signal, []).append(entry)
        return dict(sorted(found.items()))

    def merge_csv(self, path: Path) -> int:
        """Add definitions from a CSV code table; pack entries win. Returns rows added."""
        from vdoctor.knowledge.table import read_code_table

        added = 0
        for row in read_code_table(path):
            # Manufacturer-specific rows reuse generic codes with other
            # meanings; only generic definitions are safe fleet-wide.
            if not row.generic or row.code in self.entries:
                continue
            self.entries[row.code] = DtcEntry(code=row.code, definition_en=row.description, source=f"csv:{path.name}")
            added += 1
        return added


def _entry_from_json(item: dict[str, Any]) -> DtcEntry:
    confirm_raw = item.get("confirm")
    confirm = None
    if isinstance(confirm_raw, dict):
        if "signal" in confirm_raw:
            confirm = ConfirmRule(
                signal=str(confirm_raw["signal"]),
                op=">=" if confirm_raw.get("op", ">=") == ">=" else "<=",
                threshold=float(confirm_raw["threshold"]),
            )
        elif "repeat" in confirm_raw:
            confirm = ConfirmRule(repeat=int(confirm_raw["repeat"]))
    priority = item.get("priority")
    return DtcEntry(
        code=str(item["code"]).upper(),
        definition_en=str(item.get("definition_en", "")),
        definition_zh=str(item.get("definition_zh", "")),
        family=str(item.get("family", "unknown")),
        root_cause=str(item["root_cause"]) if item.get("root_cause") else None,
        fix_action=str(item["fix_action"]) if item.get("fix_action") else None,
        priority=priority if priority in ("P1", "P2", "P3") else None,
        confirm=confirm,
        keywords=tuple(str(k) for k in item.get("keywords", []) or []),
    )


def load_pack(path: Path | None = None, extra_csv: Path | None = None) -> KnowledgePack:
    """Load the shipped pack (or ``path``), then merge an optional CSV code table."""
    try:
        if path is None:
            text = resources.files(__package__ or "vdoctor.knowledge").joinpath("dtc_pack.json").read_text("utf-8")
        else:
            text = path.read_text("utf-8")
        data = json.loads(text)
        pack = KnowledgePack(version=str(data["version"]))
        for item in data["codes"]:
            entry = _entry_from_json(item)
            pack.entries[entry.code] = entry
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise KnowledgeError(f"cannot load the DTC knowledge pack: {e}") from e
    if extra_csv is not None:
        pack.merge_csv(extra_csv)
    return pack

"""DTC knowledge: the pack we ship, plus extra code tables loaded from CSV.

The pack (``dtc_pack.json``, written by this project) maps a trouble code to
its definition, fault family, likely root cause, fix action, priority and the
evidence that confirms it: OBD codes, and J1939 codes of trucks and buses
apart, with what an SPN and an FMI mean for a J1939 code no entry holds. An extra CSV table (columns ``code`` and
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
from vdoctor.events import trouble_code
from vdoctor.lines import fmt_num
from vdoctor.units import SIGNAL_NAME

_RULE_SIGNAL_RE = re.compile(rf"^({SIGNAL_NAME})(>=|<=)(-?[\d.]+)$")
_RULE_REPEAT_RE = re.compile(r"^code seen in (\d+) alerts$")
# At most this many J1939 definitions made from their parts are kept (``KnowledgePack.get``).
_MAX_MADE = 4096


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
    def from_parts(self) -> bool:
        """True for a J1939 code's definition made from its SPN and FMI (``J1939Meanings``), no entry's."""
        return self.source == FROM_PARTS

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


@dataclass(frozen=True)
class J1939Meanings:
    """What a J1939 code's parts mean (SAE J1939-73's FMIs, the names of the SPNs a fleet sees most), for the
    codes the pack's entries do not hold: ``SPN3226-FMI2`` is "Aftertreatment 1 outlet NOx: data erratic,
    intermittent or incorrect". An SPN from ``proprietary_from`` on is a manufacturer's own."""

    fmi: dict[int, tuple[str, str]] = field(default_factory=dict)
    spn: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    proprietary_from: int = 520192

    def entry(self, code: str) -> DtcEntry | None:
        """A definition of ``code`` (``SPN<n>-FMI<m>``, as ``events.trouble_code`` writes it) from its parts, or
        None for any other code. It names no cause or fix, so it never concludes a session on its own (as
        a code table's definition)."""
        match = _J1939_CODE_RE.match(code)
        if match is None:
            return None
        number, mode = int(match.group(1)), int(match.group(2))
        known = self.spn.get(number)
        if known is not None:
            name_en, name_zh, family = known
        elif number >= self.proprietary_from:
            name_en, name_zh, family = f"Manufacturer's own SPN {number}", f"厂家自定义SPN {number}", "unknown"
        else:
            name_en, name_zh, family = f"SPN {number}", f"SPN {number}", "unknown"
        meaning_en, meaning_zh = self.fmi.get(mode, (f"FMI {mode} (reserved)", f"FMI {mode}（保留）"))
        return DtcEntry(
            code=code,
            definition_en=f"{name_en}: {meaning_en}",
            definition_zh=f"{name_zh}：{meaning_zh}",
            family=family,
            source=FROM_PARTS,
        )


# The source of a J1939 code's definition made from its parts.
FROM_PARTS = "pack:j1939"
_J1939_CODE_RE = re.compile(r"^SPN(\d{1,6})-FMI(\d{1,2})$")


@dataclass
class KnowledgePack:
    version: str
    entries: dict[str, DtcEntry] = field(default_factory=dict)
    j1939: J1939Meanings = field(default_factory=J1939Meanings)
    # Definitions made from a J1939 code's parts, kept once made (a fleet's trucks repeat their codes).
    _made: dict[str, DtcEntry] = field(default_factory=dict, repr=False, compare=False)

    def get(self, code: str) -> DtcEntry | None:
        """The pack's entry for ``code``, a code table's, or for a J1939 code neither holds, its definition
        from its SPN and FMI (``J1939Meanings``; ``DtcEntry.from_parts``). A J1939 code is read in its one
        written form, or as a gateway writes it (``SPN0100-FMI01`` and ``SPN 100 FMI 1`` are ``SPN100-FMI1``, the
        pack's entry); one out of range is none."""
        code = code.upper()
        entry = self.entries.get(code)
        if entry is not None or not code.startswith("SPN"):
            return entry
        canonical = trouble_code(code)  # as the job reads an alert's: ``SPN0100-FMI01``, ``SPN 100 FMI 1``
        if canonical is None or not canonical.startswith("SPN"):
            return None
        if canonical != code and (entry := self.entries.get(canonical)) is not None:
            return entry
        made = self._made.get(canonical)
        if made is None:
            made = self.j1939.entry(canonical)
            if made is None:
                return None
            if len(self._made) >= _MAX_MADE:  # a bound on what a model's lookups may add; any thread may clear
                self._made.clear()
            self._made[canonical] = made
        return made

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


def _j1939_from_json(item: dict[str, Any]) -> J1939Meanings:
    return J1939Meanings(
        fmi={int(k): (str(v[0]), str(v[1])) for k, v in item.get("fmi", {}).items()},
        spn={int(k): (str(v[0]), str(v[1]), str(v[2])) for k, v in item.get("spn", {}).items()},
        proprietary_from=int(item.get("proprietary_from", 520192)),
    )


def load_pack(path: Path | None = None, extra_csv: Path | None = None) -> KnowledgePack:
    """Load the shipped pack (or ``path``), then merge an optional CSV code table."""
    try:
        if path is None:
            text = resources.files(__package__ or "vdoctor.knowledge").joinpath("dtc_pack.json").read_text("utf-8")
        else:
            text = path.read_text("utf-8")
        data = json.loads(text)
        j1939 = data.get("j1939") or {}
        pack = KnowledgePack(version=str(data["version"]), j1939=_j1939_from_json(j1939))
        # The J1939 entries are apart from the OBD ones, which the demo's generator and the benches read.
        for item in [*data["codes"], *j1939.get("codes", [])]:
            entry = _entry_from_json(item)
            pack.entries[entry.code] = entry
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise KnowledgeError(f"cannot load the DTC knowledge pack: {e}") from e
    if extra_csv is not None:
        pack.merge_csv(extra_csv)
    return pack

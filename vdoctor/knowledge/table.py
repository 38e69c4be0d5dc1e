"""Reading a DTC code table (CSV with ``code`` and ``description``, optionally ``manufacturer``)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vdoctor.errors import KnowledgeError
from vdoctor.events import trouble_code

GENERIC = "GENERIC"


@dataclass(frozen=True)
class CodeRow:
    code: str
    description: str
    manufacturer: str

    @property
    def generic(self) -> bool:
        return self.manufacturer == GENERIC


def read_code_table(path: Path) -> Iterator[CodeRow]:
    """Rows with a valid code and a description; a missing column or an unreadable file is a KnowledgeError.

    Read as UTF-8 with or without a byte-order mark (Excel's "CSV UTF-8" writes one, which would make the
    first column ``\ufeffcode``), as the signal map is.
    """
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or not {"code", "description"} <= set(reader.fieldnames):
                raise KnowledgeError(
                    f"{path}: a code table needs the columns code and description, found {reader.fieldnames}"
                )
            for row in reader:
                code = trouble_code(row.get("code") or "")
                desc = " ".join((row.get("description") or "").split())
                maker = (row.get("manufacturer") or GENERIC).strip().upper() or GENERIC
                if code is not None and desc:
                    yield CodeRow(code=code, description=desc, manufacturer=maker)
    except OSError as e:
        raise KnowledgeError(f"cannot read code table {path}: {e}") from e
    except UnicodeDecodeError:
        raise KnowledgeError(f"cannot read code table {path}: not UTF-8 text (save it as CSV UTF-8)") from None

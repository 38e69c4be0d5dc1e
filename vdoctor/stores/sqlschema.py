"""Versioned DDL for the MySQL-protocol backends: ``sql/<dialect>/NNN_name.sql``, applied in order.

``vdoctor memory init`` applies every file, every time; each statement must be
safe to run again. ``ADD COLUMN`` has no ``IF NOT EXISTS`` in Doris or MySQL 8
(MariaDB has it), so an ``ALTER TABLE t ADD COLUMN c ...`` statement (one
column per statement) is skipped when the database already has that column.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vdoctor.errors import StoreError

# Where versioned DDL lives: sql/<dialect>/NNN_name.sql at the repository root.
SQL_DIR = Path(__file__).resolve().parents[2] / "sql"
_ADD_COLUMN_RE = re.compile(r"^ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)\s", re.IGNORECASE)
HAS_COLUMN = (
    "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = %s AND table_name = %s AND column_name = %s"
)

Run = Callable[[str, Sequence[object] | None], tuple[list[tuple[Any, ...]], int]]


def schema_files(dialect: str) -> list[Path]:
    folder = SQL_DIR / dialect
    files = sorted(folder.glob("[0-9][0-9][0-9]_*.sql"))
    if not files:
        raise StoreError(f"no DDL files in {folder} (expected NNN_name.sql)")
    return files


def split_statements(text: str) -> list[str]:
    """Split a DDL file on ';' at line ends; ``--`` comment lines are dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    out = []
    for chunk in "\n".join(lines).split(";\n"):
        statement = chunk.strip().rstrip(";").strip()
        if statement:
            out.append(statement)
    return out


def apply_schema(dialect: str, run: Run, database: str) -> list[str]:
    """Run every statement of every DDL file of the dialect, skipping columns that exist; returns the files."""
    applied = []
    for path in schema_files(dialect):
        for statement in split_statements(path.read_text(encoding="utf-8")):
            add = _ADD_COLUMN_RE.match(statement)
            if add is not None:
                rows, _ = run(HAS_COLUMN, (database, add.group(1), add.group(2)))
                if int(rows[0][0]) > 0:
                    continue
            run(statement, None)
        applied.append(path.name)
    return applied

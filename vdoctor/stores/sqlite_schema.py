"""The embedded store's schema, and the migration of files written by older versions (run on open).

Two tables: ``case_memory`` holds each record's current version, with the
event time it started (``version_from``); ``case_history`` holds the versions
a record replaced, each with its span ``[version_from, version_to)``. A
trigger archives the current version whenever a write moves ``version_from``
forward (a merge's new conclusion, an overturned recheck), so every write of
the store stays one statement.

Files written before event times were kept are migrated in one transaction:
the columns are added and every row becomes one version starting at its
conclusion, under this assumption (the earlier versions of those rows were
never kept, so they cannot be recovered):

- ``version_from`` = ``concluded_at`` (always the conclusion's event time);
- ``verified_ts`` = the later of ``concluded_at`` and ``updated_at`` for rows
  with a recheck result: the recheck's event time was not kept, and the
  row's last write (clock time) is the latest it can have been applied, so a
  migrated case never counts as verified earlier than it was; in a live
  stream that is close to the recheck's own time, in a replay of older
  events it is later (those cases then count as verified from the migration
  on);
- ``invalid_ts`` = ``concluded_at`` for soft-deleted rows: they were never
  recalled after their deletion, and stay never recalled at any time;
- ``opened_ts`` stays NULL (not recorded).

Files written before records kept what they are found by (issue 15) get
``alert_text`` (empty: the opening alert's text was not kept), ``embedder``
(empty: which model embedded them was not kept, so ``vdoctor memory reembed``
re-embeds them) and ``search_tokens``, the tokens of the record's indexed
text (``retrieval.text``) that the lexical index reads, computed for every
row when the column is added, and again whenever the tokeniser changes
(``retrieval.tokens.TOKENIZER``, kept in ``vd_meta``).
"""

from __future__ import annotations

import json
import sqlite3

from vdoctor.retrieval.text import search_tokens
from vdoctor.retrieval.tokens import TOKENIZER

SCHEMA_VERSION = "3"

_CASE_COLUMNS = """
    vin TEXT NOT NULL,
    session_id TEXT NOT NULL,
    series TEXT NOT NULL,
    concluded_at INTEGER NOT NULL,
    summary TEXT NOT NULL,
    summary_vec BLOB NOT NULL,
    root_cause TEXT NOT NULL,
    fix_action TEXT NOT NULL,
    priority TEXT,
    dtc_codes TEXT NOT NULL,
    recheck_ok INTEGER,
    prompt_version TEXT NOT NULL,
    valid INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT 'final',
    merged_sessions TEXT NOT NULL DEFAULT '[]',"""

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS case_memory ({_CASE_COLUMNS}
    source TEXT NOT NULL DEFAULT '',
    omitted TEXT NOT NULL DEFAULT '[]',
    seq INTEGER NOT NULL DEFAULT 0,
    opened_ts INTEGER,
    verified_ts INTEGER,
    invalid_ts INTEGER,
    version_from INTEGER,
    alert_text TEXT NOT NULL DEFAULT '',
    embedder TEXT NOT NULL DEFAULT '',
    search_tokens TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (vin, session_id)
);
CREATE INDEX IF NOT EXISTS idx_similar ON case_memory (series, recheck_ok, valid);
CREATE INDEX IF NOT EXISTS idx_own ON case_memory (vin, concluded_at);
CREATE INDEX IF NOT EXISTS idx_prompt ON case_memory (prompt_version);
CREATE TABLE IF NOT EXISTS vd_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO vd_meta (key, value) VALUES ('seq', '0');
"""

# The versions records replaced: the same columns but the summary source (only
# the current version is ever re-extracted), keyed by the version's start.
HISTORY = f"""
CREATE TABLE IF NOT EXISTS case_history ({_CASE_COLUMNS}
    omitted TEXT NOT NULL DEFAULT '[]',
    opened_ts INTEGER,
    verified_ts INTEGER,
    invalid_ts INTEGER,
    version_from INTEGER NOT NULL,
    version_to INTEGER NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    alert_text TEXT NOT NULL DEFAULT '',
    embedder TEXT NOT NULL DEFAULT '',
    search_tokens TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (vin, session_id, version_from)
);
CREATE INDEX IF NOT EXISTS idx_history_own ON case_history (vin, concluded_at);
CREATE INDEX IF NOT EXISTS idx_history_seq ON case_history (seq);
"""
# Which versions ``memory reembed`` still has to rewrite (created after the columns exist).
_EMBEDDER_INDEXES = [
    "CREATE INDEX IF NOT EXISTS idx_embedder ON case_memory (embedder)",
    "CREATE INDEX IF NOT EXISTS idx_history_embedder ON case_history (embedder)",
]

# Record columns, in MemoryRecord row order (``sqlite._from_row``).
RECORD_COLUMNS = (
    "vin, session_id, series, concluded_at, summary, summary_vec, root_cause, fix_action, "
    "priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, kind, merged_sessions, source, omitted, "
    "opened_ts, verified_ts, invalid_ts, alert_text, embedder"
)
RECORD_FIELDS = [c.strip() for c in RECORD_COLUMNS.split(",")]
# What case_history keeps of a record (no source; the tokens its lexical index reads).
ARCHIVED_FIELDS = [*(c for c in RECORD_FIELDS if c != "source"), "search_tokens"]
# Reading archived rows in record order: the source is empty.
HISTORY_SELECT = RECORD_COLUMNS.replace("source", "'' AS source")

# Files written before the change sequence existed get the column on open ...
_MIGRATE_COLUMNS = {
    "seq": "ALTER TABLE case_memory ADD COLUMN seq INTEGER NOT NULL DEFAULT 0",
    # ... and the write-policy columns (record kind, merged sessions, summary source) ...
    "kind": "ALTER TABLE case_memory ADD COLUMN kind TEXT NOT NULL DEFAULT 'final'",
    "merged_sessions": "ALTER TABLE case_memory ADD COLUMN merged_sessions TEXT NOT NULL DEFAULT '[]'",
    "source": "ALTER TABLE case_memory ADD COLUMN source TEXT NOT NULL DEFAULT ''",
    "omitted": "ALTER TABLE case_memory ADD COLUMN omitted TEXT NOT NULL DEFAULT '[]'",
}
# ... and what a record is found by (both tables; see the module doc).
_RETRIEVAL_COLUMNS = ("alert_text", "embedder", "search_tokens")
# A milestone may have no priority yet: NULL. Files made before that have
# priority NOT NULL, which SQLite cannot relax in place; there '' stands for it.
LEGACY_NO_PRIORITY = ""
# ... and the event times (see the module doc for the backfill's assumption).
_EVENT_COLUMNS = ("opened_ts", "verified_ts", "invalid_ts", "version_from")
_BACKFILL = """
UPDATE case_memory SET
    version_from = concluded_at,
    verified_ts = CASE WHEN recheck_ok IS NULL THEN NULL ELSE MAX(concluded_at, updated_at) END,
    invalid_ts = CASE WHEN valid = 0 THEN concluded_at ELSE NULL END
WHERE version_from IS NULL
"""


# Every statement that changes a row stamps it with the next change seq, and
# the trigger moves vd_meta's seq along, in the statement's own transaction:
# a one-record write is a single statement (``SqliteStore._write``).
def next_seq(step: int = 1) -> str:
    """The stored change seq plus ``step``, as a scalar subquery (a combined write's k-th row takes k)."""
    return f"(SELECT CAST(value AS INTEGER) + {int(step)} FROM vd_meta WHERE key = 'seq')"


NEXT_SEQ = next_seq()
_TRIGGERS = [
    "CREATE INDEX IF NOT EXISTS idx_seq ON case_memory (seq)",
    *(
        f"""CREATE TRIGGER IF NOT EXISTS vd_seq_after_{when.split()[0].lower()} AFTER {when} ON case_memory
        BEGIN UPDATE vd_meta SET value = NEW.seq WHERE key = 'seq' AND CAST(value AS INTEGER) < NEW.seq; END"""
        for when in ("INSERT", "UPDATE OF seq")
    ),
    # A write that moves the version's start forward archives the version it
    # replaces, closed where the new one starts, with the same change seq (so
    # the vector index catches up on both). A re-run archives the same key
    # again in place (the rowid, which names it in the index, is kept).
    # Dropped and made again on every open: its column list follows ARCHIVED_FIELDS.
    "DROP TRIGGER IF EXISTS vd_archive",
    f"""CREATE TRIGGER vd_archive AFTER UPDATE OF version_from ON case_memory
    WHEN NEW.version_from > OLD.version_from
    BEGIN
        INSERT INTO case_history ({", ".join(ARCHIVED_FIELDS)}, version_from, version_to, seq)
        VALUES ({", ".join("OLD." + c for c in ARCHIVED_FIELDS)}, OLD.version_from, NEW.version_from, NEW.seq)
        ON CONFLICT (vin, session_id, version_from) DO UPDATE SET
        {", ".join(f"{c} = excluded.{c}" for c in [*ARCHIVED_FIELDS[2:], "version_to", "seq"])};
    END""",
]


def migrate(conn: sqlite3.Connection) -> None:
    """Create or bring the schema up to date; idempotent, one transaction (``conn`` in autocommit)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Statement by statement: executescript would commit half-way.
        for statement in _statements(SCHEMA):
            conn.execute(statement)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(case_memory)")}
        for column, statement in _MIGRATE_COLUMNS.items():
            if column not in columns:
                conn.execute(statement)
        missing = [c for c in _EVENT_COLUMNS if c not in columns]
        for column in missing:
            conn.execute(f"ALTER TABLE case_memory ADD COLUMN {column} INTEGER")
        if missing:
            conn.execute(_BACKFILL)
        for statement in _statements(HISTORY):
            conn.execute(statement)
        for table in ("case_memory", "case_history"):
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            for column in _RETRIEVAL_COLUMNS:
                if column not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
        for statement in _EMBEDDER_INDEXES:
            conn.execute(statement)
        stored = conn.execute("SELECT value FROM vd_meta WHERE key = 'tokenizer'").fetchone()
        if stored is None or stored[0] != TOKENIZER:
            _retokenize(conn)
            conn.execute(
                "INSERT INTO vd_meta (key, value) VALUES ('tokenizer', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (TOKENIZER,),
            )
        for statement in _TRIGGERS:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO vd_meta (key, value) VALUES ('schema', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (SCHEMA_VERSION,),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _retokenize(conn: sqlite3.Connection) -> None:
    """Compute every row's ``search_tokens`` (a new column, or another tokeniser); no seq change.

    The lexical index is rebuilt after this anyway: its saved copy names the
    tokeniser it was built with.
    """
    for table in ("case_memory", "case_history"):
        rows = conn.execute(
            f"SELECT rowid, alert_text, dtc_codes, root_cause, fix_action, summary FROM {table}"
        ).fetchall()
        conn.executemany(
            f"UPDATE {table} SET search_tokens = ? WHERE rowid = ?",
            [(search_tokens(alert, json.loads(codes), cause, fix, summary), rowid)
             for rowid, alert, codes, cause, fix, summary in rows],
        )  # fmt: skip


def no_priority_marker(conn: sqlite3.Connection) -> str | None:
    """How this file writes "no priority yet": NULL, or '' where the column predates it (NOT NULL)."""
    info = list(conn.execute("PRAGMA table_info(case_memory)"))
    return LEGACY_NO_PRIORITY if any(r[1] == "priority" and r[3] for r in info) else None


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";\n") if s.strip()]

-- Event-time-true recall (issue 13): the event times of each record, and the
-- versions a record replaced, so that a session opening at event time T sees
-- each record as it was at T. DESIGN.md section 3.3, README "Recall in event time".
-- Applied by: vdoctor memory init (after 001). Idempotent: ADD COLUMN statements
-- are skipped when the column exists (MySQL 8 has no ADD COLUMN IF NOT EXISTS),
-- the backfill only touches rows without a version start, the table is IF NOT EXISTS.
-- concluded_at keeps its name: it already is the conclusion's event time.
-- The key facts a summary left out (001 has it; databases made before it get it here).
ALTER TABLE case_memory ADD COLUMN omitted TEXT NOT NULL DEFAULT ('[]');
ALTER TABLE case_memory ADD COLUMN opened_ts DATETIME NULL;
ALTER TABLE case_memory ADD COLUMN verified_ts DATETIME NULL;
ALTER TABLE case_memory ADD COLUMN invalid_ts DATETIME NULL;
ALTER TABLE case_memory ADD COLUMN version_from DATETIME NULL;
-- Rows written before event times were kept become one version from their
-- conclusion; the recheck's event time was not kept, so a verdict counts from
-- the row's last write (the latest it can have been applied: never verified
-- too early); soft-deleted rows count as invalid from their conclusion (never
-- recalled, as before). opened_ts stays NULL (not recorded).
UPDATE case_memory SET
    verified_ts = CASE WHEN recheck_ok IS NULL THEN NULL ELSE GREATEST(concluded_at, updated_at) END,
    invalid_ts = CASE WHEN valid THEN NULL ELSE concluded_at END,
    version_from = concluded_at
WHERE version_from IS NULL;
-- The versions a write replaced (a merge's new conclusion, an overturned
-- recheck): the record's columns but the summary source, and the span
-- [version_from, version_to) of event time in which the version held.
CREATE TABLE IF NOT EXISTS case_history (
    vin VARCHAR(32) NOT NULL,
    session_id VARCHAR(128) NOT NULL,
    version_from DATETIME NOT NULL,
    version_to DATETIME NOT NULL,
    series VARCHAR(64) NOT NULL,
    concluded_at DATETIME NOT NULL,
    summary VARCHAR(300) NOT NULL,
    summary_vec MEDIUMBLOB NOT NULL,
    root_cause TEXT NOT NULL,
    fix_action TEXT NOT NULL,
    priority VARCHAR(2) NULL,
    dtc_codes TEXT NOT NULL,
    recheck_ok BOOLEAN NULL,
    prompt_version VARCHAR(255) NOT NULL,
    valid BOOLEAN NOT NULL,
    updated_at DATETIME NOT NULL,
    kind VARCHAR(16) NOT NULL DEFAULT 'final',
    merged_sessions TEXT NOT NULL,
    omitted TEXT NOT NULL,
    opened_ts DATETIME NULL,
    verified_ts DATETIME NULL,
    invalid_ts DATETIME NULL,
    PRIMARY KEY (vin, session_id, version_from),
    KEY idx_history_similar (series, recheck_ok),
    KEY idx_history_own (vin, concluded_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

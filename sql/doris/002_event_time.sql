-- Event-time-true recall (issue 13) on Apache Doris >= 4.1.4: the event times
-- of each record, and the versions a record replaced, so that a session opening
-- at event time T sees each record as it was at T. DESIGN.md section 3.3,
-- README "Recall in event time".
-- Applied by: vdoctor memory init (after 001). Idempotent: ADD COLUMN statements
-- are skipped when the column exists (Doris has no ADD COLUMN IF NOT EXISTS),
-- indexes and the table are IF NOT EXISTS, the backfill only touches rows
-- without a version start.
-- Adding nullable value columns to a UNIQUE KEY merge-on-write table is a light
-- schema change (metadata only, milliseconds; the data files and the ANN index
-- on summary_vec are left as they are). concluded_at keeps its name: it already
-- is the conclusion's event time.
-- The key facts a summary left out (001 has it; databases made before it get it here).
ALTER TABLE case_memory ADD COLUMN omitted STRING NOT NULL DEFAULT "[]";
ALTER TABLE case_memory ADD COLUMN opened_ts DATETIME NULL;
ALTER TABLE case_memory ADD COLUMN verified_ts DATETIME NULL;
ALTER TABLE case_memory ADD COLUMN invalid_ts DATETIME NULL;
ALTER TABLE case_memory ADD COLUMN version_from DATETIME NULL;
-- Similar-case search filters on these before its ANN top-k; Doris filters
-- before the top-k through an index only where every filter column has one
-- (an unindexed filter makes it fall back to an exact scan: correct, slower).
CREATE INDEX IF NOT EXISTS idx_concluded_at ON case_memory (concluded_at) USING INVERTED;
CREATE INDEX IF NOT EXISTS idx_verified_ts ON case_memory (verified_ts) USING INVERTED;
CREATE INDEX IF NOT EXISTS idx_invalid_ts ON case_memory (invalid_ts) USING INVERTED;
CREATE INDEX IF NOT EXISTS idx_version_from ON case_memory (version_from) USING INVERTED;
-- Rows written before event times were kept become one version from their
-- conclusion; the recheck's event time was not kept, so a verdict counts from
-- the row's last write (the latest it can have been applied: never verified
-- too early); soft-deleted rows count as invalid from their conclusion (never
-- recalled, as before). opened_ts stays NULL (not recorded). The UPDATE
-- rewrites those rows, so their new segments carry the indexes above.
UPDATE case_memory SET
    verified_ts = CASE WHEN recheck_ok IS NULL THEN NULL ELSE GREATEST(concluded_at, updated_at) END,
    invalid_ts = CASE WHEN valid THEN NULL ELSE concluded_at END,
    version_from = concluded_at
WHERE version_from IS NULL;
-- The versions a write replaced (a merge's new conclusion, an overturned
-- recheck): the record's columns but the summary source, keyed by the start of
-- the span [version_from, version_to) of event time in which the version held.
CREATE TABLE IF NOT EXISTS case_history (
    vin VARCHAR(32) NOT NULL,
    session_id VARCHAR(128) NOT NULL,
    version_from DATETIME NOT NULL,
    version_to DATETIME NOT NULL,
    series VARCHAR(64) NOT NULL,
    concluded_at DATETIME NOT NULL,
    summary VARCHAR(1200) NOT NULL,
    summary_vec ARRAY<FLOAT> NOT NULL,
    root_cause STRING NOT NULL,
    fix_action STRING NOT NULL,
    priority VARCHAR(2) NULL,
    dtc_codes STRING NOT NULL,
    recheck_ok BOOLEAN NULL,
    prompt_version VARCHAR(255) NOT NULL,
    valid BOOLEAN NOT NULL,
    updated_at DATETIME NOT NULL,
    kind VARCHAR(16) NOT NULL DEFAULT "final",
    merged_sessions STRING NOT NULL,
    omitted STRING NOT NULL,
    opened_ts DATETIME NULL,
    verified_ts DATETIME NULL,
    invalid_ts DATETIME NULL,
    INDEX idx_vin (vin) USING INVERTED,
    INDEX idx_series (series) USING INVERTED,
    INDEX idx_version_from (version_from) USING INVERTED,
    INDEX idx_version_to (version_to) USING INVERTED,
    INDEX idx_concluded_at (concluded_at) USING INVERTED,
    INDEX idx_verified_ts (verified_ts) USING INVERTED,
    INDEX idx_invalid_ts (invalid_ts) USING INVERTED,
    INDEX idx_vec (summary_vec) USING ANN PROPERTIES (
        "index_type" = "hnsw",
        "metric_type" = "inner_product",
        "dim" = "256"
    )
) ENGINE = OLAP
UNIQUE KEY (vin, session_id, version_from)
DISTRIBUTED BY HASH (vin) BUCKETS 16
PROPERTIES (
    "enable_unique_key_merge_on_write" = "true",
    "replication_num" = "1"
);

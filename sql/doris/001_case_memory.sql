-- L3 long-term memory on Apache Doris >= 4.1.4 (DESIGN.md section 3.3).
-- Applied by: vdoctor memory init --memory doris://user:password@host:9030/db
-- Idempotent: every statement may run again on an initialised database.
-- priority is NULL for a milestone with no priority yet; omitted lists (JSON)
-- the key facts that did not fit in the summary. A database initialised before
-- these two changes is brought up to date by hand, once:
--   ALTER TABLE case_memory MODIFY COLUMN priority VARCHAR(2) NULL;
--   ALTER TABLE case_memory ADD COLUMN omitted STRING NOT NULL DEFAULT "[]";
-- UNIQUE KEY (vin, session_id) with merge-on-write: an INSERT with the same key
-- replaces the row; a partial-update INSERT changes recheck_ok or valid alone.
-- Key columns come first, as Doris requires. Strings are sized in bytes (UTF-8).
-- summary_vec: the normalised embedding; "dim" must equal the embedder's
-- dimension (256: the offline embedder, and the OpenAI embedder asks for 256).
-- replication_num 1 suits a single-BE cluster; raise it on a real cluster.
CREATE TABLE IF NOT EXISTS case_memory (
    vin VARCHAR(32) NOT NULL,
    session_id VARCHAR(128) NOT NULL,
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
    source STRING NOT NULL,
    omitted STRING NOT NULL,
    INDEX idx_vin (vin) USING INVERTED,
    INDEX idx_series (series) USING INVERTED,
    INDEX idx_vec (summary_vec) USING ANN PROPERTIES (
        "index_type" = "hnsw",
        "metric_type" = "inner_product",
        "dim" = "256"
    )
) ENGINE = OLAP
UNIQUE KEY (vin, session_id)
DISTRIBUTED BY HASH (vin) BUCKETS 16
PROPERTIES (
    "enable_unique_key_merge_on_write" = "true",
    "replication_num" = "1"
);

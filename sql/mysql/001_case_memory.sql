-- L3 long-term memory on MySQL 8 / MariaDB 10.11 (DESIGN.md section 3.3).
-- Applied by: vdoctor memory init --memory mysql://user:password@host:3306/db
-- Idempotent: every statement may run again on an initialised database.
-- priority is NULL for a milestone with no priority yet; omitted lists (JSON)
-- the key facts that did not fit in the summary. A database initialised before
-- these two changes is brought up to date by hand, once:
--   ALTER TABLE case_memory MODIFY COLUMN priority VARCHAR(2) NULL;
--   ALTER TABLE case_memory ADD COLUMN omitted TEXT NOT NULL DEFAULT ('[]');
-- summary_vec holds the normalised embedding as little-endian float32 bytes;
-- similar-case search filters on idx_similar and scores vectors in the client.
CREATE TABLE IF NOT EXISTS case_memory (
    vin VARCHAR(32) NOT NULL,
    session_id VARCHAR(128) NOT NULL,
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
    source MEDIUMTEXT NOT NULL,
    omitted TEXT NOT NULL,
    PRIMARY KEY (vin, session_id),
    KEY idx_similar (series, recheck_ok, valid),
    KEY idx_own (vin, concluded_at),
    KEY idx_prompt (prompt_version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

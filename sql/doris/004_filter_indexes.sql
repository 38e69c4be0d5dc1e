-- Every column the similar-case search filters on has an index, on Apache
-- Doris >= 4.1.4. Applied by: vdoctor memory init (after 003). Idempotent:
-- the indexes are IF NOT EXISTS.
-- Doris applies a search's filters before its ANN top-k through the indexes
-- only where every filter column has one; one column without an index makes
-- it fall back to an exact scan of the series (correct, slower). The search
-- asks for verified cases (recheck_ok = TRUE, vdoctor/stores/sqlbase.py
-- VERIFIED), and recheck_ok had no index in either table.
-- A new index covers the rows written after it. On a database that already
-- holds cases, build it once, by hand, for the rows stored before:
--   BUILD INDEX idx_recheck_ok ON case_memory;
--   BUILD INDEX idx_recheck_ok ON case_history;
CREATE INDEX IF NOT EXISTS idx_recheck_ok ON case_memory (recheck_ok) USING INVERTED;
CREATE INDEX IF NOT EXISTS idx_recheck_ok ON case_history (recheck_ok) USING INVERTED;

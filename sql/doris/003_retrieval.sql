-- What a record is found by, and which embedder made its vector (issue 15), on
-- Apache Doris >= 4.1.4. Applied by: vdoctor memory init (after 002).
-- Idempotent: ADD COLUMN statements are skipped when the column exists; the
-- analyzer and the indexes are IF NOT EXISTS.
-- alert_text: the symptom as reported (the opening alert's text, at most 500
-- characters); with the codes, root cause, fix and summary it is the record's
-- indexed text (vdoctor/retrieval/text.py). search_tokens: that text's tokens
-- (English words, Chinese characters and character pairs), space-joined,
-- written by the store, so that every backend's lexical channel sees the same
-- tokens: its inverted index splits on whitespace only (a char_group
-- tokenizer), and the lexical channel is
--   search_tokens MATCH_ANY '<query tokens>' ... ORDER BY score() DESC LIMIT k
-- (score() is BM25). embedder: <name>/<dim> of the model that made
-- summary_vec; "" for rows written before this file (unknown): vdoctor memory
-- reembed re-embeds them and writes their tokens; their rewritten rows carry
-- the new indexes (no BUILD INDEX needed for them).
-- Doris syncs a new analyzer to the BEs within about 10 s: loads right after a
-- first init may fail until then (retried by the job's writes).
CREATE INVERTED INDEX TOKENIZER IF NOT EXISTS vdoctor_whitespace PROPERTIES (
    "type" = "char_group",
    "tokenize_on_chars" = "[whitespace]"
);
CREATE INVERTED INDEX ANALYZER IF NOT EXISTS vdoctor_tokens PROPERTIES (
    "tokenizer" = "vdoctor_whitespace"
);
ALTER TABLE case_memory ADD COLUMN alert_text STRING NOT NULL DEFAULT "";
ALTER TABLE case_memory ADD COLUMN embedder VARCHAR(128) NOT NULL DEFAULT "";
ALTER TABLE case_memory ADD COLUMN search_tokens STRING NOT NULL DEFAULT "";
CREATE INDEX IF NOT EXISTS idx_search_tokens ON case_memory (search_tokens) USING INVERTED PROPERTIES (
    "analyzer" = "vdoctor_tokens"
);
CREATE INDEX IF NOT EXISTS idx_embedder ON case_memory (embedder) USING INVERTED;
ALTER TABLE case_history ADD COLUMN alert_text STRING NOT NULL DEFAULT "";
ALTER TABLE case_history ADD COLUMN embedder VARCHAR(128) NOT NULL DEFAULT "";
ALTER TABLE case_history ADD COLUMN search_tokens STRING NOT NULL DEFAULT "";
CREATE INDEX IF NOT EXISTS idx_search_tokens ON case_history (search_tokens) USING INVERTED PROPERTIES (
    "analyzer" = "vdoctor_tokens"
);
CREATE INDEX IF NOT EXISTS idx_embedder ON case_history (embedder) USING INVERTED;

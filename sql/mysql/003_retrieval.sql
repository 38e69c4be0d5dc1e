-- What a record is found by, and which embedder made its vector (issue 15).
-- Applied by: vdoctor memory init (after 002). Idempotent: ADD COLUMN statements
-- are skipped when the column exists.
-- alert_text: the symptom as reported (the opening alert's text, at most 500
-- characters); with the codes, root cause, fix and summary it is the record's
-- indexed text (vdoctor/retrieval/text.py). search_tokens: that text's tokens
-- (English words, Chinese characters and character pairs), space-joined,
-- written by the store; the lexical channel scores them with BM25 in the
-- client over the filtered candidates. embedder: <name>/<dim> of the model
-- that made summary_vec; "" for rows written before this file (unknown):
-- vdoctor memory reembed re-embeds them and writes their tokens.
ALTER TABLE case_memory ADD COLUMN alert_text TEXT NOT NULL DEFAULT ('');
ALTER TABLE case_memory ADD COLUMN embedder VARCHAR(128) NOT NULL DEFAULT '';
ALTER TABLE case_memory ADD COLUMN search_tokens MEDIUMTEXT NOT NULL DEFAULT ('');
ALTER TABLE case_history ADD COLUMN alert_text TEXT NOT NULL DEFAULT ('');
ALTER TABLE case_history ADD COLUMN embedder VARCHAR(128) NOT NULL DEFAULT '';
ALTER TABLE case_history ADD COLUMN search_tokens MEDIUMTEXT NOT NULL DEFAULT ('');

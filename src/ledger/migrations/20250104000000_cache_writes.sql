-- Prompt tokens written to the provider's cache (Anthropic's cache_creation_input_tokens),
-- priced apart from fresh input and from cache reads. Rows written before this are zero.
ALTER TABLE ledger_records ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;

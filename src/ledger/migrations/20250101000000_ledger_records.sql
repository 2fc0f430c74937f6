-- One row per request. Portable across SQLite and PostgreSQL: integers are BIGINT, time is
-- unix milliseconds (UTC), money is decimal text, and `id` makes retried inserts idempotent.
CREATE TABLE ledger_records (
    id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    task TEXT NOT NULL,
    client_key TEXT,
    affinity_hash TEXT,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    node TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    error_class TEXT,
    input_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    ttft_ms BIGINT,
    duration_ms BIGINT NOT NULL,
    cost_usd TEXT
);

CREATE INDEX ledger_records_at_ms ON ledger_records (at_ms);

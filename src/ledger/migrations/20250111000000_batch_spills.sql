-- A job's plan (fleet, hosted batch, hosted realtime) and its reason, as JSON; and the lines
-- sent to a provider's batch API: one row per provider batch, whose lines are claimed in
-- `batch_lines` under `claim` until it has ended. Time is unix milliseconds.
ALTER TABLE batch_jobs ADD COLUMN plan TEXT;

CREATE TABLE batch_spills (
    id TEXT PRIMARY KEY,
    batch_id TEXT NOT NULL,
    backend TEXT NOT NULL,
    claim TEXT NOT NULL,
    state TEXT NOT NULL,
    lines BIGINT NOT NULL,
    created_ms BIGINT NOT NULL,
    ended_ms BIGINT
);

CREATE INDEX batch_spills_state ON batch_spills (state);

-- Batch jobs (OpenAI Files and Batches, Anthropic Message Batches), shared by every replica.
-- Time is unix milliseconds.

-- An uploaded input file (`purpose = batch`), its JSONL text as sent. A job's output and error
-- files are rows too, with no content: their lines are read from `batch_lines`.
CREATE TABLE batch_files (
    id TEXT PRIMARY KEY,
    purpose TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    owner TEXT,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT,
    content TEXT,
    batch_id TEXT
);

-- A job: its dialect (`openai`, `anthropic`), the endpoint its lines go to, its status as the
-- providers name them, and when it entered each.
CREATE TABLE batch_jobs (
    id TEXT PRIMARY KEY,
    dialect TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    input_file_id TEXT,
    output_file_id TEXT,
    error_file_id TEXT,
    status TEXT NOT NULL,
    owner TEXT,
    metadata TEXT,
    errors TEXT,
    window_ms BIGINT NOT NULL,
    created_ms BIGINT NOT NULL,
    in_progress_ms BIGINT,
    finalizing_ms BIGINT,
    completed_ms BIGINT,
    failed_ms BIGINT,
    expired_ms BIGINT,
    cancelling_ms BIGINT,
    cancelled_ms BIGINT,
    total BIGINT NOT NULL
);

CREATE INDEX batch_jobs_status ON batch_jobs (status);

-- One line of a job. `state`: queued, running (claimed by `claimed_by` until `claim_until_ms`),
-- succeeded, errored, canceled, expired. A line's result is written with its state, in one
-- statement, by the replica whose claim it is: a line is done exactly once.
CREATE TABLE batch_lines (
    batch_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    custom_id TEXT NOT NULL,
    request TEXT NOT NULL,
    state TEXT NOT NULL,
    claimed_by TEXT,
    claim_until_ms BIGINT,
    status_code BIGINT,
    result TEXT,
    backend TEXT,
    finished_ms BIGINT,
    PRIMARY KEY (batch_id, idx)
);

CREATE INDEX batch_lines_state ON batch_lines (batch_id, state);

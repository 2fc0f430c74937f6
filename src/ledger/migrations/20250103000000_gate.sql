-- The evaluation gate's results: one row per run of a task's golden set on one backend (or one
-- node of it) with one fingerprint. Time is unix milliseconds, money decimal text.
CREATE TABLE gate_results (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    backend TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    node TEXT,
    trigger_kind TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    finished_ms BIGINT NOT NULL,
    items BIGINT NOT NULL,
    passed_items BIGINT NOT NULL,
    errors BIGINT NOT NULL,
    p50_ms BIGINT,
    p95_ms BIGINT,
    cost_usd TEXT,
    passed BIGINT NOT NULL,
    why TEXT NOT NULL
);

CREATE INDEX gate_results_key ON gate_results (task, backend, fingerprint);

-- Pins a self-hosted pool took on after its new fingerprint passed the gate.
CREATE TABLE gate_pins (
    backend TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    weights TEXT,
    quantization TEXT,
    engine TEXT,
    accepted_ms BIGINT NOT NULL,
    PRIMARY KEY (backend, fingerprint)
);

-- Shadow traffic: a live request's copy sent to another backend, and how its answer graded
-- against the primary's. Prompts are not stored; answers are, for offline grading.
CREATE TABLE shadow_results (
    id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    task TEXT NOT NULL,
    request_id TEXT NOT NULL,
    primary_backend TEXT NOT NULL,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    error_class TEXT,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    cost_usd TEXT,
    primary_answer TEXT,
    answer TEXT NOT NULL,
    verdict TEXT,
    why TEXT
);

CREATE INDEX shadow_results_at_ms ON shadow_results (at_ms);

-- One row per self-hosted node and minute: was it serving, and what did its GPUs cost. Many
-- router replicas may report the same node-minute: the key keeps one row and `busy` is the OR
-- of what they saw. Money is decimal text; NULL price: the node is unpriced.
CREATE TABLE node_minutes (
    node TEXT NOT NULL,
    minute_ms BIGINT NOT NULL,
    backend TEXT NOT NULL,
    gpu_count BIGINT NOT NULL,
    gpu_hourly_usd TEXT,
    busy BIGINT NOT NULL,
    PRIMARY KEY (node, minute_ms)
);

CREATE INDEX node_minutes_minute_ms ON node_minutes (minute_ms);

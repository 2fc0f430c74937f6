-- How much of each node's sequence capacity a minute used: running sequences x milliseconds and
-- slots x milliseconds, summed from the router's samples (sequence-milliseconds, BIGINT).
-- Rows written before this have NULL in both: reports fall back to the busy-minute share.
ALTER TABLE node_minutes ADD COLUMN running_seq_ms BIGINT;
ALTER TABLE node_minutes ADD COLUMN capacity_seq_ms BIGINT;

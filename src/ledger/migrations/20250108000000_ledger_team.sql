-- The team a request's spend is counted to: an issued key's owner team. NULL for static keys
-- (they have no team), for requests without a key, and for rows written before this column.
ALTER TABLE ledger_records ADD COLUMN team TEXT;

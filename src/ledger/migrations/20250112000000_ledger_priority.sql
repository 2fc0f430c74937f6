-- Each request row's priority (interactive, standard, batch), so a report can show what batch
-- jobs spent and which GPU hours they used. NULL for rows written before.
ALTER TABLE ledger_records ADD COLUMN priority TEXT;

-- Limits given to an issued key at creation (`spillway keys create --rpm 60 --usd-per-day 5`,
-- `"limits"` of POST /admin/keys): JSON of {rpm, tpm, concurrent, usd_per_day, usd_per_month},
-- dollars as decimal strings. NULL: none (the config's `budgets.keys.<id>` may still set some).
ALTER TABLE client_keys ADD COLUMN limits TEXT;

-- Client keys issued through `spillway keys` or `/admin/keys`. The secret is never stored: only
-- a per-key salt and SHA-256(salt || secret), both hex. `id` is the non-secret part of the key
-- the router looks it up by. `tasks` is a JSON array of task names (empty: every open task).
-- Time is unix milliseconds; NULL expires_ms: never expires; NULL revoked_ms: not revoked.
CREATE TABLE client_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    team TEXT NOT NULL,
    tasks TEXT NOT NULL,
    salt TEXT NOT NULL,
    hash TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT,
    revoked_ms BIGINT,
    rotated_ms BIGINT
);

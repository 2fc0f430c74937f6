-- Operator state shared by every router replica: holds, forced breakers, canary results, the
-- gate's verdicts on kept-out nodes and accepted pins. One row per (kind, scope); `value` is
-- JSON; `version` is the state version at which the row last changed. Time is unix ms.
CREATE TABLE operator_state (
    kind TEXT NOT NULL,
    scope TEXT NOT NULL,
    value TEXT NOT NULL,
    set_by TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    version BIGINT NOT NULL,
    PRIMARY KEY (kind, scope)
);

-- One row: the version of the whole state, raised by every change (a replica that has read this
-- version has nothing new to read).
CREATE TABLE operator_version (
    id BIGINT PRIMARY KEY,
    version BIGINT NOT NULL
);

INSERT INTO operator_version (id, version) VALUES (1, 0);

-- Every change, append-only: who, what, when, and the value before and after (NULL: none).
CREATE TABLE operator_audit (
    version BIGINT NOT NULL,
    kind TEXT NOT NULL,
    scope TEXT NOT NULL,
    action TEXT NOT NULL,
    set_by TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    old_value TEXT,
    new_value TEXT,
    PRIMARY KEY (version, kind, scope)
);

CREATE INDEX operator_audit_at_ms ON operator_audit (at_ms);

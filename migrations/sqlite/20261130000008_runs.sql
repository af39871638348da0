-- The `runs` read model (see the Postgres twin). Times are RFC 3339 text, as elsewhere in this backend.
CREATE TABLE runs (
    run_id        TEXT    PRIMARY KEY,
    task_id       TEXT    NOT NULL,
    attempt       INTEGER NOT NULL,
    state         TEXT    NOT NULL,
    worker        TEXT,
    profile       TEXT,
    log_path      TEXT,
    started_at    TEXT,
    last_seen_at  TEXT    NOT NULL,
    ended_at      TEXT,
    failure       TEXT,
    detail        TEXT,
    branch        TEXT,
    commit_sha    TEXT,
    duration_s    REAL,
    output_bytes  INTEGER NOT NULL DEFAULT 0,
    tail          TEXT,
    version       INTEGER NOT NULL,
    last_position INTEGER NOT NULL
);

CREATE INDEX runs_running ON runs (last_seen_at) WHERE state = 'running';
CREATE INDEX runs_by_task ON runs (task_id, attempt);
CREATE INDEX runs_recent ON runs (last_position);

-- The `usage` read model (see the Postgres twin). Times are RFC 3339 text, as elsewhere in this backend.
CREATE TABLE usage_daily (
    day                TEXT    NOT NULL,
    repo               TEXT    NOT NULL,
    profile            TEXT    NOT NULL,
    runs               INTEGER NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_usd           REAL    NOT NULL,
    costed_runs        INTEGER NOT NULL,
    turns              INTEGER NOT NULL,
    PRIMARY KEY (day, repo, profile)
);

CREATE TABLE usage_tasks (
    task_id            TEXT    PRIMARY KEY,
    repo               TEXT    NOT NULL,
    runs               INTEGER NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_usd           REAL    NOT NULL,
    costed_runs        INTEGER NOT NULL,
    turns              INTEGER NOT NULL,
    last_at            TEXT    NOT NULL
);

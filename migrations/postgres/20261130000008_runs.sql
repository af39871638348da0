-- The `runs` read model, built by the `runs` projector from the `run:<id>` streams: one row per agent run (one
-- attempt), so the watchdog finds silent runs with an index lookup and the API lists runs without a log scan.
CREATE TABLE runs (
    run_id        text             PRIMARY KEY,
    task_id       text             NOT NULL,
    attempt       bigint           NOT NULL,
    -- running | succeeded | failed
    state         text             NOT NULL,
    worker        text,
    profile       text,
    log_path      text,
    started_at    timestamptz,
    -- The last sign of life: started, a heartbeat, or the outcome.
    last_seen_at  timestamptz      NOT NULL,
    ended_at      timestamptz,
    -- The failure kind (`exit`, `timeout`, `lost`, …); null while running and on success.
    failure       text,
    detail        text,
    branch        text,
    commit_sha    text,
    duration_s    double precision,
    output_bytes  bigint           NOT NULL DEFAULT 0,
    tail          text,
    version       bigint           NOT NULL,
    last_position bigint           NOT NULL
);

CREATE INDEX runs_running ON runs (last_seen_at) WHERE state = 'running';
CREATE INDEX runs_by_task ON runs (task_id, attempt);
CREATE INDEX runs_recent ON runs (last_position);

-- The task board's read models (see the Postgres twin). Times are RFC 3339 text, as elsewhere in this backend.
CREATE TABLE tasks (
    task_id            TEXT    PRIMARY KEY,
    number             INTEGER NOT NULL,
    board_column       TEXT    NOT NULL,
    title              TEXT    NOT NULL,
    repo               TEXT    NOT NULL,
    priority           TEXT    NOT NULL,
    priority_rank      INTEGER NOT NULL,
    needs_human        BOOLEAN NOT NULL,
    needs_human_reason TEXT,
    attempts           INTEGER NOT NULL,
    max_attempts       INTEGER NOT NULL,
    source             TEXT    NOT NULL,
    links              TEXT    NOT NULL,
    created_at         TEXT    NOT NULL,
    updated_at         TEXT    NOT NULL,
    version            INTEGER NOT NULL,
    last_position      INTEGER NOT NULL,
    state              TEXT    NOT NULL
);

CREATE INDEX tasks_by_column ON tasks (board_column, priority_rank, created_at, number);
CREATE INDEX tasks_needing_human ON tasks (priority_rank, created_at, number) WHERE needs_human;

CREATE TABLE task_timeline (
    position       INTEGER NOT NULL,
    task_id        TEXT    NOT NULL,
    stream_version INTEGER NOT NULL,
    event_type     TEXT    NOT NULL,
    at             TEXT    NOT NULL,
    summary        TEXT    NOT NULL,
    cause_event_id TEXT,
    actor          TEXT,
    PRIMARY KEY (task_id, stream_version)
);

CREATE TABLE task_links (
    kind     TEXT    NOT NULL,
    value    TEXT    NOT NULL,
    task_id  TEXT    NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (kind, value)
);
CREATE INDEX task_links_by_task ON task_links (task_id);

-- The task board's read models, built by the `tasks` projector from the `task:<id>` streams (one checkpoint for
-- all three tables, so a task's row, its timeline and its links always agree).

-- One row per task: the columns the board filters and sorts on, and the whole state (`Task` as JSON) for `show`.
CREATE TABLE tasks (
    task_id            text        PRIMARY KEY,
    number             bigint      NOT NULL,
    board_column       text        NOT NULL,
    title              text        NOT NULL,
    repo               text        NOT NULL,
    priority           text        NOT NULL,
    -- 0 urgent .. 3 low: the board's sort order.
    priority_rank      smallint    NOT NULL,
    needs_human        boolean     NOT NULL,
    needs_human_reason text,
    attempts           bigint      NOT NULL,
    max_attempts       bigint      NOT NULL,
    source             text        NOT NULL,
    links              text        NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    -- The stream version and log position of the last event applied.
    version            bigint      NOT NULL,
    last_position      bigint      NOT NULL,
    state              text        NOT NULL
);

-- Every index here is paid on each of a rebuild's upserts (docs/benchmarks.md, "Tasks rebuild"), so only the
-- board's main views get one, ending in the list's order: by column, and the needs-human queue. Repo and source
-- filters scan the table: it holds one row per task, not per event.
CREATE INDEX tasks_by_column ON tasks (board_column, priority_rank, created_at, number);
CREATE INDEX tasks_needing_human ON tasks (priority_rank, created_at, number) WHERE needs_human;

-- Every event of every task, in log order (within a stream, version order is log order). One index: the key.
CREATE TABLE task_timeline (
    position       bigint      NOT NULL,
    task_id        text        NOT NULL,
    stream_version bigint      NOT NULL,
    event_type     text        NOT NULL,
    at             timestamptz NOT NULL,
    summary        text        NOT NULL,
    -- As the command side put them in `meta`; kept as given (a reader's pointer, not a key).
    cause_event_id text,
    actor          text,
    PRIMARY KEY (task_id, stream_version)
);

-- External ids -> task, for webhooks about a task's issue, pull request or message. A link once seen stays
-- (a superseded pull request still leads to its task); the first task to claim a value keeps it.
CREATE TABLE task_links (
    kind    text   NOT NULL,
    value   text   NOT NULL,
    task_id text   NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (kind, value)
);
CREATE INDEX task_links_by_task ON task_links (task_id);

-- The state is rewritten on every batch that touches a task; lz4 compresses it several times faster than pglz.
DO $$
BEGIN
    ALTER TABLE tasks ALTER COLUMN state SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 is not available; task states use the default compression';
END
$$;

-- The task board's read models, built by the `tasks` projector from the `task:<id>` streams (one checkpoint for
-- all three tables, so a task's row, its timeline and its links always agree).

-- One row per task: the columns the board filters and sorts on, and the whole state (`Task` as JSON) for `show`.
CREATE TABLE tasks (
    task_id            text        PRIMARY KEY,
    number             bigint      NOT NULL UNIQUE,
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

-- The board's filters, each ending in the list's order so a filtered page needs no sort.
CREATE INDEX tasks_by_order ON tasks (priority_rank, created_at, number);
CREATE INDEX tasks_by_column ON tasks (board_column, priority_rank, created_at, number);
CREATE INDEX tasks_by_repo ON tasks (repo, priority_rank, created_at, number);
CREATE INDEX tasks_by_source ON tasks (source, priority_rank, created_at, number);
CREATE INDEX tasks_needing_human ON tasks (priority_rank, created_at, number) WHERE needs_human;

-- Every event of every task, in log order.
CREATE TABLE task_timeline (
    position       bigint      PRIMARY KEY,
    task_id        text        NOT NULL,
    stream_version bigint      NOT NULL,
    event_type     text        NOT NULL,
    at             timestamptz NOT NULL,
    summary        text        NOT NULL,
    -- As the command side put them in `meta`; kept as given (a reader's pointer, not a key).
    cause_event_id text,
    actor          text,
    UNIQUE (task_id, stream_version)
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

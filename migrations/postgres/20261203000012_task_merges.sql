-- Which tasks' pull requests were merged, and when: written by the `tasks` projector (version 3) on each
-- `task.completed` (a task is completed only when its pull request, or its combined plan's, was merged), in the
-- same transaction as the task's row. The dashboard's spend page divides a range's cost by the pull requests
-- merged in it; the `tasks` row cannot say that: its column says `done` but not since when, and an archived
-- task's says `archived`.
CREATE TABLE task_merges (
    task_id      text        PRIMARY KEY,
    repo         text        NOT NULL,
    -- The pull request merged: `owner/name#12`; for an item of a combined plan (which opens none of its own),
    -- `plan:<plan id>`, so the plan's one pull request counts once however many items it completes.
    pull_request text        NOT NULL,
    day          text        NOT NULL,  -- YYYY-MM-DD, UTC, of the completion
    merged_at    timestamptz NOT NULL
);
-- One row per merged task, written once: the index costs nothing on the log's appends, and a range's count reads
-- only its days.
CREATE INDEX task_merges_by_day ON task_merges (day, repo);

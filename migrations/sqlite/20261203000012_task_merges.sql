-- Which tasks' pull requests were merged, and when (see the Postgres twin). Times are RFC 3339 text, as elsewhere
-- in this backend.
CREATE TABLE task_merges (
    task_id      TEXT PRIMARY KEY,
    repo         TEXT NOT NULL,
    pull_request TEXT NOT NULL,
    day          TEXT NOT NULL,
    merged_at    TEXT NOT NULL
);
CREATE INDEX task_merges_by_day ON task_merges (day, repo);

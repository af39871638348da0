-- The board's search text of each task, lower case (see the Postgres twin).
ALTER TABLE tasks ADD COLUMN search_text TEXT NOT NULL DEFAULT '';

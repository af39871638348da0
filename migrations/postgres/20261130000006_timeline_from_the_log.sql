-- A task's timeline is read from its stream in the log (through `events_stream_version`), not copied: the copy
-- cost every rebuild a row per task event and was never more than the log already indexes.
DROP TABLE IF EXISTS task_timeline;

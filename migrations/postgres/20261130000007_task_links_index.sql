-- Nothing looks links up by task (a task's links are in its row's `links`); the index only slowed every link
-- written (tasksbench: links were the most expensive write of a rebuild).
DROP INDEX IF EXISTS task_links_by_task;

-- A task's review request its host finds behind its base or in conflict with it (`refresh.due`: GitHub's behind /
-- dirty, GitLab's need_rebase / conflict, recorded as behind / dirty) at head `behind_head`, since its last push: written
-- by the tasks projector (version 6 rebuilds every row with it), cleared by the task's next refresh or submission.
ALTER TABLE tasks ADD COLUMN behind text;
ALTER TABLE tasks ADD COLUMN behind_head text;

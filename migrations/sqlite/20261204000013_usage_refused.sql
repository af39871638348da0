-- Which runs' usage figures were refused, per row of the `usage` read model (see the Postgres twin).
ALTER TABLE usage_daily ADD COLUMN refused_runs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN refused_position INTEGER;
ALTER TABLE usage_tasks ADD COLUMN refused_runs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_tasks ADD COLUMN refused_position INTEGER;

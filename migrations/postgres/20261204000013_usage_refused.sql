-- Which runs' usage figures were refused (out of bounds, not numbers: `refused` on the outcome's usage), per row
-- of the `usage` read model: what those runs spent is unknown, so a budget whose scope holds one counts as over
-- its limit (fail closed) until a person raises it (a `budget.raised` recorded after the run's outcome) or its
-- day ends. `refused_position` is the log position of the last such outcome: a raise after it lifts the hold.
-- The `usage` projector (version 3) rebuilds the rows, so outcomes already in the log are counted.
ALTER TABLE usage_daily
    ADD COLUMN refused_runs     bigint NOT NULL DEFAULT 0,
    ADD COLUMN refused_position bigint;
ALTER TABLE usage_tasks
    ADD COLUMN refused_runs     bigint NOT NULL DEFAULT 0,
    ADD COLUMN refused_position bigint;

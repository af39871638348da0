-- The `usage` read model, built by the `usage` projector from the runs' outcomes (`run.succeeded`, `run.failed`,
-- `run.proposed` carry what the agent spent, with its repository and profile): totals per UTC day, repository
-- and profile, and per task. Rolled up as the outcomes are applied, so a report reads a few rows, never the log.
CREATE TABLE usage_daily (
    day                text             NOT NULL,  -- YYYY-MM-DD, UTC, of the run's outcome
    repo               text             NOT NULL,
    profile            text             NOT NULL,
    runs               bigint           NOT NULL,
    input_tokens       bigint           NOT NULL,
    output_tokens      bigint           NOT NULL,
    cache_read_tokens  bigint           NOT NULL,
    cache_write_tokens bigint           NOT NULL,
    -- Summed over the runs whose CLI reported a cost (`costed_runs` of `runs`).
    cost_usd           double precision NOT NULL,
    costed_runs        bigint           NOT NULL,
    turns              bigint           NOT NULL,
    PRIMARY KEY (day, repo, profile)
);

CREATE TABLE usage_tasks (
    task_id            text             PRIMARY KEY,
    repo               text             NOT NULL,
    runs               bigint           NOT NULL,
    input_tokens       bigint           NOT NULL,
    output_tokens      bigint           NOT NULL,
    cache_read_tokens  bigint           NOT NULL,
    cache_write_tokens bigint           NOT NULL,
    cost_usd           double precision NOT NULL,
    costed_runs        bigint           NOT NULL,
    turns              bigint           NOT NULL,
    last_at            timestamptz      NOT NULL
);

-- See the Postgres twin: the limited runs the dispatcher reads every tick.
CREATE INDEX runs_limited ON runs (ended_at) WHERE failure = 'limited';

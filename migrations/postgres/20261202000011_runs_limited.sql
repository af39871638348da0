-- The dispatcher asks every tick which runs ended on their provider's limit lately (a profile paused until its
-- reset): a partial index keeps that a lookup of the few such runs, not a scan of every run.
CREATE INDEX runs_limited ON runs (ended_at) WHERE failure = 'limited';

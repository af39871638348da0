-- Where each consumer of the log (the relay, later the projectors) has got to. A checkpoint only moves forward:
-- a second instance, or a late writer after a failover, can never move it back.
CREATE TABLE checkpoints (
    name       text        PRIMARY KEY,
    position   bigint      NOT NULL CHECK (position >= 0),
    updated_at timestamptz NOT NULL
);

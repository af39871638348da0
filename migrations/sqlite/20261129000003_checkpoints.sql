-- Where each consumer of the log (the relay, later the projectors) has got to; only ever moves forward.
CREATE TABLE checkpoints (
    name       TEXT    PRIMARY KEY,
    position   INTEGER NOT NULL CHECK (position >= 0),
    updated_at TEXT    NOT NULL
);

-- Projectors: where each read model has got to and which version of its code built it (see the Postgres twin).
CREATE TABLE projections (
    name       TEXT    PRIMARY KEY,
    version    INTEGER NOT NULL,
    position   INTEGER NOT NULL CHECK (position >= 0),
    updated_at TEXT    NOT NULL
);

-- The `sources` read model: per source and event type, how many events arrived and when the last one did.
CREATE TABLE source_activity (
    source         TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    events         INTEGER NOT NULL,
    first_at       TEXT    NOT NULL,
    first_position INTEGER NOT NULL,
    last_at        TEXT    NOT NULL,
    last_position  INTEGER NOT NULL,
    PRIMARY KEY (source, event_type)
);

-- Singleton-loop leases. Times are Unix milliseconds: the embedded backend runs on one machine, so one clock.
CREATE TABLE leases (
    name        TEXT    PRIMARY KEY,
    holder      TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    renewed_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

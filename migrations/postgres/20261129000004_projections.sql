-- Projectors: where each read model has got to, and which version of its code built it. A projector writes its
-- read model and moves its row here in the same transaction, under a compare-and-set on (version, position), so
-- a second instance can neither move it backwards nor apply a batch twice. A version bump rebuilds from 0.
CREATE TABLE projections (
    name       text        PRIMARY KEY,
    version    bigint      NOT NULL,
    position   bigint      NOT NULL CHECK (position >= 0),
    updated_at timestamptz NOT NULL
);

-- The `sources` read model: per source and event type, how many events arrived and when the last one did.
CREATE TABLE source_activity (
    source        text        NOT NULL,
    event_type    text        NOT NULL,
    events        bigint      NOT NULL,
    first_at      timestamptz NOT NULL,
    first_position bigint     NOT NULL,
    last_at       timestamptz NOT NULL,
    last_position bigint      NOT NULL,
    PRIMARY KEY (source, event_type)
);

-- Singleton loops run on one replica at a time: the replica that holds the lease. Expiry uses the database's
-- clock, so replicas with skewed clocks still agree. `token` grows with every change of holder (a fencing token).
CREATE TABLE leases (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    token       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- The event log (embedded backend). SQLite has one writer at a time by construction, and the appender opens its
-- transactions with BEGIN IMMEDIATE, so positions assigned as max(position) + 1 become visible in commit order.
CREATE TABLE events (
    position       INTEGER PRIMARY KEY CHECK (position > 0),
    id             TEXT    NOT NULL UNIQUE,
    source         TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    dedup_key      TEXT    NOT NULL,
    stream         TEXT,
    stream_version INTEGER,
    occurred_at    TEXT    NOT NULL,
    recorded_at    TEXT    NOT NULL,
    action         TEXT,
    repository     TEXT,
    number         INTEGER,
    reference      TEXT,
    content_type   TEXT    NOT NULL,
    body           BLOB    NOT NULL,
    meta           TEXT    NOT NULL DEFAULT '{}',
    CONSTRAINT events_dedup UNIQUE (source, dedup_key),
    CHECK ((stream IS NULL) = (stream_version IS NULL))
);

-- The same indexes as the Postgres backend: only what a query or a rule needs.
CREATE UNIQUE INDEX events_stream_version ON events (stream, stream_version) WHERE stream IS NOT NULL;

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'the events table is append-only (UPDATE refused)');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'the events table is append-only (DELETE refused)');
END;

-- The event log: append-only, ordered, the source of truth.
--
-- `position` is assigned by the appender as max(position) + 1 while it holds the writer lock below, so positions
-- become visible in commit order and a reader polling `position > last` never skips an event that commits late.
-- The body is stored as raw bytes (the exact request body): parsing 28 KB into jsonb on every append would roughly
-- halve the insert rate, and the bytes are the record. Only what queries need is extracted into columns.
CREATE TABLE events (
    position       bigint      PRIMARY KEY,
    id             uuid        NOT NULL UNIQUE,
    source         text        NOT NULL,
    event_type     text        NOT NULL,
    dedup_key      text        NOT NULL,
    stream         text,
    stream_version bigint,
    occurred_at    timestamptz NOT NULL,
    recorded_at    timestamptz NOT NULL,
    action         text,
    repository     text,
    number         bigint,
    reference      text,
    content_type   text        NOT NULL,
    body           bytea       NOT NULL,
    meta           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT events_position_positive CHECK (position > 0),
    CONSTRAINT events_dedup UNIQUE (source, dedup_key),
    CONSTRAINT events_stream_pair CHECK ((stream IS NULL) = (stream_version IS NULL))
);

-- Every index is paid for on every append, under the writer lock: only the ones a query or a rule needs. Provider
-- events have no stream, so the stream index leaves them out. Indexes for the extracted columns (event_type,
-- repository, number) come with the first query that reads them.
CREATE UNIQUE INDEX events_stream_version ON events (stream, stream_version) WHERE stream IS NOT NULL;

-- Cheap compression for bodies where the server supports it (the official images and Debian's do).
DO $$
BEGIN
    ALTER TABLE events ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 is not available; event bodies use the default compression';
END
$$;

-- Every insert, from any process, takes the same transaction-scoped lock before its rows get positions. The
-- appender takes it explicitly first (to read max(position) under it); this trigger makes the rule hold for any
-- other writer too.
CREATE FUNCTION pidevops_events_serialize() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7420113000001);
    RETURN NULL;
END
$$;

CREATE TRIGGER events_serialize_writers
    BEFORE INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION pidevops_events_serialize();

-- Append-only: history is never rewritten.
CREATE FUNCTION pidevops_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the events table is append-only (% refused)', TG_OP;
END
$$;

CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION pidevops_events_append_only();

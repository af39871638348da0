-- One batch of appends in one statement: one round trip and, run outside an explicit transaction, one commit.
--
-- Everything between taking the writer lock and COMMIT is serialised across the whole deployment, so the work
-- done there is what limits ingest. Doing it server-side removes the five extra round trips (BEGIN, lock, lookup,
-- head, COMMIT) the appender used to make while holding the lock.
--
-- Semantics are exactly those of appending the events one at a time, in order (the SQLite backend's plan_batch
-- does the same in Rust; the conformance suite holds both to it):
--   * an event whose (source, dedup_key) is already stored, earlier in the log or earlier in this batch, is a
--     duplicate and returns the stored id and position;
--   * an event on a stream must carry the stream's current version + 1, else it is a conflict (stream_actual);
--   * otherwise it gets the next position.
--
-- enable_seqscan = off: plpgsql caches generic plans, and a plan made while the table was small (or never
-- analysed, e.g. with autovacuum off) would scan the whole log on every lookup forever after. Every lookup here
-- has a unique index, so an index scan is always right, and with seq scans off the cached generic plans (cheap:
-- planned once per connection, not per row) are index scans. Connections default to custom plans (see
-- postgres.rs), which this function overrides for itself.
CREATE FUNCTION pidevops_append(
    p_id             uuid[],
    p_source         text[],
    p_event_type     text[],
    p_dedup_key      text[],
    p_stream         text[],
    p_stream_version bigint[],
    p_occurred_at    timestamptz[],
    p_recorded_at    timestamptz,
    p_action         text[],
    p_repository     text[],
    p_number         bigint[],
    p_reference      text[],
    p_content_type   text[],
    p_body           bytea[],
    p_meta           text[]
) RETURNS TABLE (idx integer, event_id uuid, event_position bigint, duplicate boolean, stream_actual bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_head     bigint;
    v_found_id uuid;
    v_found_at bigint;
    v_current  bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(7420113000001);
    SELECT coalesce(max(e.position), 0) INTO v_head FROM events e;
    FOR i IN 1 .. coalesce(array_length(p_id, 1), 0) LOOP
        SELECT e.id, e.position INTO v_found_id, v_found_at
          FROM events e
         WHERE e.source = p_source[i] AND e.dedup_key = p_dedup_key[i];
        IF FOUND THEN
            idx := i; event_id := v_found_id; event_position := v_found_at; duplicate := true; stream_actual := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF p_stream[i] IS NOT NULL THEN
            SELECT coalesce(max(e.stream_version), 0) INTO v_current FROM events e WHERE e.stream = p_stream[i];
            IF p_stream_version[i] IS DISTINCT FROM v_current + 1 THEN
                idx := i; event_id := NULL; event_position := NULL; duplicate := false; stream_actual := v_current;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        v_head := v_head + 1;
        INSERT INTO events (position, id, source, event_type, dedup_key, stream, stream_version, occurred_at,
                            recorded_at, action, repository, number, reference, content_type, body, meta)
        VALUES (v_head, p_id[i], p_source[i], p_event_type[i], p_dedup_key[i], p_stream[i], p_stream_version[i],
                p_occurred_at[i], p_recorded_at, p_action[i], p_repository[i], p_number[i], p_reference[i],
                p_content_type[i], p_body[i], p_meta[i]::jsonb);
        idx := i; event_id := p_id[i]; event_position := v_head; duplicate := false; stream_actual := NULL;
        RETURN NEXT;
    END LOOP;
END
$$;

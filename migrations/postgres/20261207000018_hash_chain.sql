-- The hash chain (src/eventlog/chain.rs): each event stores the SHA-256 of its content (computed by the appender,
-- before the writer lock) and its link in the chain, sha256(domain || the previous event's link || position ||
-- content hash), computed here under the writer lock where the previous event is known. Rows written before this
-- migration keep NULL in both: `pidevops verify` reports them as written before the chain, and the first chained
-- event links to the genesis (all zero) hash. Adding nullable columns without a default rewrites nothing.
ALTER TABLE events ADD COLUMN content_hash bytea, ADD COLUMN chain_hash bytea;

-- pidevops_append takes the content hashes (a new parameter: the old function is dropped).
DROP FUNCTION pidevops_append(uuid[], text[], text[], text[], text[], bigint[], timestamptz[], timestamptz, text[],
                              text[], bigint[], text[], text[], bytea[], text[], bytea[]);

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
    p_meta           text[],
    p_body_digest    bytea[],
    p_content_hash   bytea[]
) RETURNS TABLE (idx integer, event_id uuid, event_position bigint, duplicate boolean, stream_actual bigint,
                 different_body bytea)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    n           integer := coalesce(array_length(p_id, 1), 0);
    v_head      bigint;
    v_found_id  uuid;
    v_found_at  bigint;
    v_found_dg  bytea;
    v_current   bigint;
    v_key       text;
    v_j         integer;
    -- Events inserted by this batch so far: their keys, batch indexes and positions.
    v_keys      text[] := '{}';
    v_idx       integer[] := '{}';
    v_pos       bigint[] := '{}';
    v_digests   bytea[] := '{}';
    -- Streams written by this batch so far, and the version each is at now.
    v_streams   text[] := '{}';
    v_versions  bigint[] := '{}';
    -- The outcome of each event.
    v_out_id    uuid[] := array_fill(NULL::uuid, ARRAY[n]);
    v_out_pos   bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_out_dup   boolean[] := array_fill(false, ARRAY[n]);
    v_out_act   bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_out_diff  bytea[] := array_fill(NULL::bytea, ARRAY[n]);
    -- The chain: the last event's link, and the links of the events this batch inserts.
    v_chain     bytea;
    v_links     bytea[] := '{}';
BEGIN
    PERFORM pg_advisory_xact_lock(7420113000001);
    SELECT coalesce(max(e.position), 0) INTO v_head FROM events e;
    -- The event before the first this batch writes; none (an empty log) or one written before the chain (NULL)
    -- starts it from the genesis link.
    SELECT e.chain_hash INTO v_chain FROM events e WHERE e.position = v_head;
    v_chain := coalesce(v_chain, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea);

    -- Decide every event first (lookups only), then insert the new ones with one statement.
    FOR i IN 1 .. n LOOP
        v_key := p_source[i] || chr(1) || p_dedup_key[i];
        v_j := array_position(v_keys, v_key);
        IF v_j IS NOT NULL THEN
            v_out_id[i] := p_id[v_idx[v_j]]; v_out_pos[i] := v_pos[v_j];
            IF v_digests[v_j] IS NOT NULL AND p_body_digest[i] IS NOT NULL
               AND v_digests[v_j] <> p_body_digest[i] THEN
                v_out_diff[i] := v_digests[v_j];
            ELSE
                v_out_dup[i] := true;
            END IF;
            CONTINUE;
        END IF;
        SELECT e.id, e.position, e.body_digest INTO v_found_id, v_found_at, v_found_dg
          FROM events e
         WHERE e.source = p_source[i] AND e.dedup_key = p_dedup_key[i];
        IF FOUND THEN
            v_out_id[i] := v_found_id; v_out_pos[i] := v_found_at;
            IF v_found_dg IS NOT NULL AND p_body_digest[i] IS NOT NULL AND v_found_dg <> p_body_digest[i] THEN
                v_out_diff[i] := v_found_dg;
            ELSE
                v_out_dup[i] := true;
            END IF;
            CONTINUE;
        END IF;
        IF p_stream[i] IS NOT NULL THEN
            v_j := array_position(v_streams, p_stream[i]);
            IF v_j IS NOT NULL THEN
                v_current := v_versions[v_j];
            ELSE
                SELECT coalesce(max(e.stream_version), 0) INTO v_current
                  FROM events e
                 WHERE e.stream = p_stream[i];
            END IF;
            IF p_stream_version[i] IS DISTINCT FROM v_current + 1 THEN
                v_out_act[i] := v_current;
                CONTINUE;
            END IF;
            IF v_j IS NOT NULL THEN
                v_versions[v_j] := p_stream_version[i];
            ELSE
                v_streams := v_streams || p_stream[i];
                v_versions := v_versions || p_stream_version[i];
            END IF;
        END IF;
        v_head := v_head + 1;
        IF p_content_hash[i] IS NULL OR length(p_content_hash[i]) <> 32 THEN
            RAISE EXCEPTION 'event % of the batch has no 32-byte content hash', i;
        END IF;
        -- chain.rs `link`: sha256(CHAIN_DOMAIN || previous link || position || content hash).
        v_chain := sha256(convert_to(E'pidevops/event-chain/v1\n', 'UTF8') || v_chain || int8send(v_head)
                          || p_content_hash[i]);
        v_links := array_append(v_links, v_chain);
        v_keys := v_keys || v_key;
        v_idx := v_idx || i;
        v_pos := v_pos || v_head;
        v_digests := array_append(v_digests, p_body_digest[i]);  -- keeps a NULL digest in its slot
        v_out_id[i] := p_id[i]; v_out_pos[i] := v_head;
    END LOOP;

    IF array_length(v_idx, 1) > 0 THEN
        INSERT INTO events (position, id, source, event_type, dedup_key, stream, stream_version, occurred_at,
                            recorded_at, action, repository, number, reference, content_type, body, meta,
                            body_digest, content_hash, chain_hash)
        SELECT w.pos, p_id[w.i], p_source[w.i], p_event_type[w.i], p_dedup_key[w.i], p_stream[w.i],
               p_stream_version[w.i], p_occurred_at[w.i], p_recorded_at, p_action[w.i], p_repository[w.i],
               p_number[w.i], p_reference[w.i], p_content_type[w.i], p_body[w.i], p_meta[w.i]::jsonb,
               p_body_digest[w.i], p_content_hash[w.i], w.link
          FROM unnest(v_idx, v_pos, v_links) AS w(i, pos, link);
    END IF;

    RETURN QUERY
        SELECT o.i, v_out_id[o.i], v_out_pos[o.i], v_out_dup[o.i], v_out_act[o.i], v_out_diff[o.i]
          FROM generate_series(1, n) AS o(i);
END
$$;

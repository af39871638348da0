-- The reference for docs/benchmarks.md: one durable single-row insert of the same webhook payload.
--
-- pgbench runs each script as one transaction in autocommit, so this is one INSERT + COMMIT (one WAL flush) per
-- row. The body comes from the one-row `payload` table rather than over the wire: that spares the reference the
-- transfer and hex decoding the service pays for, so the reference is faster and the comparison stricter.
-- scripts/bench.sh creates both tables (ref_events mirrors the events table's lz4 body compression).
INSERT INTO ref_events (delivery, body) SELECT gen_random_uuid(), body FROM payload;

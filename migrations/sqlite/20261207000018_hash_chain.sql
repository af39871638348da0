-- The hash chain (src/eventlog/chain.rs): each event's content hash and its link in the chain, both written by the
-- append transaction (BEGIN IMMEDIATE: the previous event is known). NULL in rows written before this migration:
-- `pidevops verify` reports them as written before the chain.
ALTER TABLE events ADD COLUMN content_hash BLOB;
ALTER TABLE events ADD COLUMN chain_hash BLOB;

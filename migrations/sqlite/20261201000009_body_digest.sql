-- SHA-256 of the body for keys pinned to their body (a provider's delivery id): the same key with another body is
-- then refused instead of answered as a duplicate. NULL for unpinned keys and every row from before: those keep
-- deduplicating on the key alone. No index: it is read from the row the (source, dedup_key) lookup already finds.
ALTER TABLE events ADD COLUMN body_digest BLOB;

//! `plan_batch`: a batch's outcomes decided as if its events were appended one at a time, in order (the SQLite
//! append; Postgres decides the same in `pidevops_append`).

use uuid::Uuid;

use super::{Appended, BatchOutcome};
use crate::domain::{NewEvent, Source};

/// A key's stored event as `plan_batch` needs it: id, position and body digest (if pinned).
pub(crate) type KeyHolder = (Uuid, i64, Option<[u8; 32]>);

/// Decides, under the writer lock, the outcome of each event exactly as if the events were appended one at a time,
/// in order: a key already stored (in the log or earlier in this batch) is a duplicate of that event, unless both
/// carry a body digest and the digests differ (then it is refused as a different body, and nothing is written for
/// it); an event on a stream must carry the stream's version + 1; anything else takes the next position.
///
/// `existing(i)` is the stored `(id, position, body digest)` for event i's key, `stream_head(name)` the stream's
/// version in the log. Returns the outcomes and the events to insert with their positions, in order. The Postgres
/// backend does the same in `pidevops_append`; the conformance suite holds both to it.
pub(crate) fn plan_batch(
    events: &[NewEvent],
    mut existing: impl FnMut(usize) -> Option<KeyHolder>,
    mut stream_head: impl FnMut(&str) -> i64,
    head: i64,
) -> (Vec<BatchOutcome>, Vec<(usize, i64)>) {
    use std::collections::HashMap;
    let mut outcomes = Vec::with_capacity(events.len());
    let mut inserts = Vec::new();
    let mut next = head;
    let mut inserted: HashMap<(Source, &str), KeyHolder> = HashMap::new();
    let mut heads: HashMap<&str, i64> = HashMap::new();
    for (i, event) in events.iter().enumerate() {
        let key = (event.source, event.dedup_key.as_str());
        if let Some((event_id, position, digest)) =
            inserted.get(&key).copied().or_else(|| existing(i))
        {
            outcomes.push(match (digest, event.body_digest) {
                // Rows without a digest (older ones, unpinned keys) keep deduplicating as they always did.
                (Some(stored), Some(received)) if stored != received => {
                    BatchOutcome::DifferentBody {
                        event_id,
                        position,
                        stored,
                    }
                }
                _ => BatchOutcome::Appended(Appended {
                    event_id,
                    position,
                    duplicate: true,
                }),
            });
            continue;
        }
        if let Some((stream, version)) = &event.stream {
            let current = *heads
                .entry(stream.as_str())
                .or_insert_with(|| stream_head(stream));
            if *version != current + 1 {
                outcomes.push(BatchOutcome::Conflict {
                    stream: stream.clone(),
                    expected: *version,
                    actual: current,
                });
                continue;
            }
            heads.insert(stream.as_str(), *version);
        }
        next += 1;
        inserts.push((i, next));
        inserted.insert(key, (event.id, next, event.body_digest));
        outcomes.push(BatchOutcome::Appended(Appended {
            event_id: event.id,
            position: next,
            duplicate: false,
        }));
    }
    (outcomes, inserts)
}

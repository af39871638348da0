use super::*;
use crate::domain::EventType;
use bytes::Bytes;

fn event(key: &str) -> NewEvent {
    NewEvent::new(
        Source::Github,
        EventType::new(Source::Github, &["push"]),
        key,
        "application/json",
        Bytes::from_static(b"{}"),
    )
}

fn streamed(key: &str, stream: &str, version: i64) -> NewEvent {
    let mut e = event(key);
    e.source = Source::Pidevops;
    e.stream = Some((stream.into(), version));
    e
}

fn positions(outcomes: &[BatchOutcome]) -> Vec<(i64, bool)> {
    outcomes
        .iter()
        .map(|o| match o {
            BatchOutcome::Appended(a) => (a.position, a.duplicate),
            BatchOutcome::Conflict { .. } => (-1, false),
            BatchOutcome::DifferentBody { .. } => (-2, false),
        })
        .collect()
}

#[test]
fn new_events_take_consecutive_positions_after_the_head() {
    let events = vec![event("a"), event("b"), event("c")];
    let (outcomes, inserts) = plan_batch(&events, |_| None, |_| 0, 41);
    assert_eq!(
        positions(&outcomes),
        vec![(42, false), (43, false), (44, false)]
    );
    assert_eq!(inserts, vec![(0, 42), (1, 43), (2, 44)]);
}

#[test]
fn a_key_repeated_within_a_batch_is_stored_once() {
    let events = vec![event("a"), event("a"), event("b")];
    let (outcomes, inserts) = plan_batch(&events, |_| None, |_| 0, 0);
    assert_eq!(
        positions(&outcomes),
        vec![(1, false), (1, true), (2, false)]
    );
    assert_eq!(inserts.len(), 2);
    let (BatchOutcome::Appended(a), BatchOutcome::Appended(b)) = (&outcomes[0], &outcomes[1])
    else {
        panic!("both appended");
    };
    assert_eq!(
        a.event_id, b.event_id,
        "the duplicate reports the original id"
    );
}

#[test]
fn a_key_already_stored_returns_the_original() {
    let original = Uuid::now_v7();
    let events = vec![event("old"), event("new")];
    let (outcomes, inserts) = plan_batch(
        &events,
        |i| (i == 0).then_some((original, 7, None)),
        |_| 0,
        10,
    );
    assert_eq!(positions(&outcomes), vec![(7, true), (11, false)]);
    assert_eq!(inserts, vec![(1, 11)]);
}

#[test]
fn stream_versions_must_follow_the_head() {
    let events = vec![
        streamed("k1", "task:T-1", 3),
        streamed("k2", "task:T-1", 4),
        streamed("k3", "task:T-1", 4),
        streamed("k4", "task:T-2", 2),
    ];
    let (outcomes, inserts) = plan_batch(
        &events,
        |_| None,
        |s| if s == "task:T-1" { 2 } else { 0 },
        0,
    );
    assert_eq!(
        positions(&outcomes),
        vec![(1, false), (2, false), (-1, false), (-1, false)]
    );
    assert_eq!(inserts, vec![(0, 1), (1, 2)]);
    match &outcomes[2] {
        BatchOutcome::Conflict {
            expected, actual, ..
        } => assert_eq!((*expected, *actual), (4, 4)),
        other => panic!("{other:?}"),
    }
}

fn pinned(key: &str, body: &'static [u8]) -> NewEvent {
    let mut e = event(key);
    e.body = Bytes::from_static(body);
    e.pinned()
}

#[test]
fn a_pinned_key_with_another_body_is_refused_not_a_duplicate() {
    let events = vec![
        pinned("a", b"1"),
        pinned("a", b"1"),
        pinned("a", b"2"),
        pinned("b", b"3"),
    ];
    let (outcomes, inserts) = plan_batch(&events, |_| None, |_| 0, 0);
    assert_eq!(
        positions(&outcomes),
        vec![(1, false), (1, true), (-2, false), (2, false)]
    );
    assert_eq!(inserts, vec![(0, 1), (3, 2)]);
    let BatchOutcome::DifferentBody {
        event_id,
        position,
        stored,
    } = &outcomes[2]
    else {
        panic!("{:?}", outcomes[2]);
    };
    assert_eq!((*event_id, *position), (events[0].id, 1));
    assert_eq!(Some(*stored), events[0].body_digest);
}

#[test]
fn a_key_stored_without_a_digest_or_appended_unpinned_stays_a_duplicate() {
    let original = Uuid::now_v7();
    let digest = pinned("x", b"1").body_digest;
    let events = vec![
        pinned("legacy", b"2"),
        event("unpinned"),
        pinned("same", b"1"),
    ];
    let (outcomes, inserts) = plan_batch(
        &events,
        |i| match i {
            0 => Some((original, 3, None)),
            1 => Some((original, 4, digest)),
            _ => Some((original, 5, digest)),
        },
        |_| 0,
        10,
    );
    assert_eq!(positions(&outcomes), vec![(3, true), (4, true), (5, true)]);
    assert!(inserts.is_empty());
}

//! The cap on noise: per task, at most `[effects] max_per_task_per_hour` outbound calls in any hour (default 20;
//! `0` turns the cap off). Past it the task is flagged needs-human and nothing more is sent for it; each effect
//! held back is recorded in its own stream as `effect.withheld` with the reason, never dropped in silence.
//!
//! **What is counted.** Every call an `effects:<provider>` loop makes for a task (a request with a task: comments,
//! pull requests and their merges, state moves, agent activities, Telegram notices), each attempt once, a retry
//! after a 5xx too: the cap is on calls made, whatever came of them. Effects that are no task's (bot replies to
//! commands, button answers, the command menu, digests, a plan's Linear checklist) are not counted nor held.
//!
//! **Counted from the log, in one stream per task.** Before a call, its loop appends `outbound.call` to the task's
//! stream `outbound:<task>` at that stream's next version, and only then `effect.started`. The count is what that
//! stream holds, so it survives a restart; and the append is a compare-and-set on the stream's version, so the
//! three provider loops of a replica, or the loops of several replicas, can never both take the last call the
//! cap allows: the loser reads the stream again and decides again. (A per-task stream is read through the log's
//! `(stream, stream_version)` index; counting the `effect:<key>` streams by task would need another index on
//! `events`, paid by every append.) A loop that takes a call and dies before `effect.started` leaves one call
//! counted that was never made: the cap errs towards silence.
//!
//! **What lifts it.** The call past the cap appends `outbound.capped` (once: the same compare-and-set) and flags
//! the task needs-human with the count. From then on everything for the task is held until a person clears that
//! flag (`retry` on the board, the CLI, the API or Telegram's button, i.e. `task.needs_human_cleared` after the
//! trip); the hour passing does not lift it. A task that hit the cap is most likely a runaway, and a runaway is
//! not fixed by the clock: lifting on time would let it post the cap again every hour, which is the noise the cap
//! is there to stop. Once a person cleared it, calls are counted from that moment (the hour before is forgiven,
//! or the next call would trip the cap again at once). What was held back stays held (recorded, not sent later):
//! news from an hour ago posted in a burst is noise too. Positions, not clocks, order a trip and a clearing, so
//! replicas with skewed clocks agree.

use std::num::NonZeroU32;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::tasks::TaskId;

/// The stream of a task's outbound calls: `outbound:<task>`.
pub const OUTBOUND_STREAM_PREFIX: &str = "outbound:";
/// `[effects] max_per_task_per_hour` when absent.
pub const DEFAULT_PER_HOUR: u32 = 20;
/// The highest cap the file accepts: above one call a second for the whole hour it would hold nothing back.
pub const MAX_PER_HOUR: i64 = 3600;

/// The window calls are counted in.
pub fn window() -> chrono::Duration {
    chrono::Duration::hours(1)
}

pub fn stream(task: TaskId) -> String {
    format!("{OUTBOUND_STREAM_PREFIX}{task}")
}

/// At most this many outbound calls per task in any hour; `None`: no cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectCap(Option<NonZeroU32>);

impl Default for EffectCap {
    fn default() -> Self {
        Self(NonZeroU32::new(DEFAULT_PER_HOUR))
    }
}

impl EffectCap {
    /// No cap: every call is made.
    pub fn off() -> Self {
        Self(None)
    }

    /// At most `calls` per task per hour; 0 is no cap.
    pub fn per_hour(calls: u32) -> Self {
        Self(NonZeroU32::new(calls))
    }

    pub fn limit(self) -> Option<u32> {
        self.0.map(NonZeroU32::get)
    }
}

/// One fact in a task's `outbound:<task>` stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutboundEvent {
    /// A call about to be made for the task: effect `key`'s next attempt (appended before its `effect.started`).
    Call {
        at: DateTime<Utc>,
        key: String,
        action: String,
    },
    /// The cap tripped: `calls` were made within the hour and the cap is `cap`. Everything for the task is held
    /// from here until a person clears its needs-human flag.
    Capped {
        at: DateTime<Utc>,
        calls: u32,
        cap: u32,
        /// The effect that was one too many.
        key: String,
    },
}

impl OutboundEvent {
    pub fn kind(&self) -> &'static str {
        match self {
            OutboundEvent::Call { .. } => "outbound.call",
            OutboundEvent::Capped { .. } => "outbound.capped",
        }
    }

    pub fn at(&self) -> DateTime<Utc> {
        match self {
            OutboundEvent::Call { at, .. } | OutboundEvent::Capped { at, .. } => *at,
        }
    }
}

/// Whether a call for a task may be made now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// The call past the cap: `calls` were made within the hour, the cap is `cap`. The trip is recorded
    /// (`outbound.capped`), the task flagged, and this call held back, for `reason`.
    Trip {
        calls: u32,
        cap: u32,
        reason: String,
    },
    /// The cap tripped before and no person has cleared it since: held back, for `reason`.
    Held {
        reason: String,
    },
}

/// THE decision: may `task` make one more outbound call at `now`, under `cap`, given its `outbound:<task>` stream
/// (`ledger`: each event with its log position) and the position of the task's last `task.needs_human_cleared`
/// (`cleared`)? Pure.
pub fn verdict(
    cap: EffectCap,
    task: TaskId,
    ledger: &[(i64, OutboundEvent)],
    cleared: Option<i64>,
    now: DateTime<Utc>,
) -> Verdict {
    let Some(limit) = cap.limit() else {
        return Verdict::Send;
    };
    let last_trip = ledger
        .iter()
        .rev()
        .find_map(|(position, event)| match event {
            OutboundEvent::Capped { at, calls, .. } => Some((*position, *at, *calls)),
            OutboundEvent::Call { .. } => None,
        });
    // Calls before a person's clearing of the trip are forgiven; a trip not cleared holds everything.
    let counted_after = match (last_trip, cleared) {
        (Some((trip, _, _)), Some(cleared)) if cleared > trip => cleared,
        (Some((_, at, calls)), _) => {
            return Verdict::Held {
                reason: format!(
                    "effect cap: {calls} outbound calls for {task} within an hour (at most {limit}), reached at \
                     {}; nothing more is sent for it until a person clears its needs-human flag (retry)",
                    at.to_rfc3339_opts(SecondsFormat::Secs, true)
                ),
            }
        }
        (None, _) => 0,
    };
    let since = now - window();
    let calls = ledger
        .iter()
        .filter(|(position, event)| {
            *position > counted_after
                && matches!(event, OutboundEvent::Call { at, .. } if *at > since)
        })
        .count();
    let calls = u32::try_from(calls).unwrap_or(u32::MAX);
    if calls < limit {
        return Verdict::Send;
    }
    Verdict::Trip {
        calls,
        cap: limit,
        reason: format!(
            "effect cap: {calls} outbound calls for {task} in the last hour (at most {limit}); nothing more is \
             sent for it until a person clears its needs-human flag (retry)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_750_000_000 + seconds, 0)
            .single()
            .expect("a valid time")
    }

    fn t7() -> TaskId {
        "T-7".parse().expect("a task id")
    }

    fn call(position: i64, seconds: i64) -> (i64, OutboundEvent) {
        (
            position,
            OutboundEvent::Call {
                at: at(seconds),
                key: format!("telegram:notify:1:{position}"),
                action: "telegram_send".into(),
            },
        )
    }

    fn capped(position: i64, seconds: i64) -> (i64, OutboundEvent) {
        (
            position,
            OutboundEvent::Capped {
                at: at(seconds),
                calls: 3,
                cap: 3,
                key: format!("telegram:notify:1:{position}"),
            },
        )
    }

    /// `None`: sent; `Some(true)`: the trip; `Some(false)`: held after an earlier trip.
    fn trips(verdict: &Verdict) -> Option<bool> {
        match verdict {
            Verdict::Send => None,
            Verdict::Trip { .. } => Some(true),
            Verdict::Held { .. } => Some(false),
        }
    }

    #[test]
    fn calls_go_until_the_cap_and_the_one_past_it_trips() {
        let cap = EffectCap::per_hour(3);
        let mut ledger = Vec::new();
        for n in 0..3 {
            assert_eq!(verdict(cap, t7(), &ledger, None, at(n)), Verdict::Send);
            ledger.push(call(10 + n, n));
        }
        let Verdict::Trip { calls, cap, reason } = verdict(cap, t7(), &ledger, None, at(3)) else {
            panic!("the fourth call trips the cap")
        };
        assert_eq!((calls, cap), (3, 3));
        assert!(
            reason.starts_with("effect cap: 3 outbound calls for T-7 in the last hour (at most 3)"),
            "{reason}"
        );
    }

    #[test]
    fn only_the_last_hour_counts_before_any_trip() {
        let cap = EffectCap::per_hour(2);
        let ledger = vec![call(1, 0), call(2, 10)];
        assert_eq!(
            trips(&verdict(cap, t7(), &ledger, None, at(3599))),
            Some(true)
        );
        // The first call is an hour old: one of two left.
        assert_eq!(verdict(cap, t7(), &ledger, None, at(3600)), Verdict::Send);
    }

    #[test]
    fn a_trip_holds_everything_past_the_hour_until_a_person_clears_it() {
        let cap = EffectCap::per_hour(3);
        let ledger = vec![call(1, 0), call(2, 1), call(3, 2), capped(5, 3)];
        for now in [4, 3600, 86_400] {
            let held = verdict(cap, t7(), &ledger, None, at(now));
            assert_eq!(trips(&held), Some(false), "at {now}: {held:?}");
        }
        // A clearing before the trip (another episode) lifts nothing.
        assert_eq!(
            trips(&verdict(cap, t7(), &ledger, Some(4), at(10))),
            Some(false)
        );
        // Cleared after it: the calls before are forgiven, however recent.
        assert_eq!(verdict(cap, t7(), &ledger, Some(6), at(10)), Verdict::Send);
        let mut after = ledger.clone();
        after.extend([call(7, 11), call(8, 12)]);
        assert_eq!(verdict(cap, t7(), &after, Some(6), at(13)), Verdict::Send);
        after.push(call(9, 13));
        assert_eq!(
            trips(&verdict(cap, t7(), &after, Some(6), at(14))),
            Some(true)
        );
        // And a second trip holds again, until a second clearing.
        after.push(capped(10, 14));
        assert_eq!(
            trips(&verdict(cap, t7(), &after, Some(6), at(15))),
            Some(false)
        );
        assert_eq!(verdict(cap, t7(), &after, Some(11), at(15)), Verdict::Send);
    }

    #[test]
    fn no_cap_sends_everything_even_after_a_trip() {
        let ledger: Vec<_> = (1..=100)
            .map(|n| call(n, n))
            .chain([capped(101, 101)])
            .collect();
        assert_eq!(
            verdict(EffectCap::off(), t7(), &ledger, None, at(102)),
            Verdict::Send
        );
        assert_eq!(EffectCap::per_hour(0), EffectCap::off());
        assert_eq!(EffectCap::default().limit(), Some(DEFAULT_PER_HOUR));
    }

    #[test]
    fn the_events_are_tagged_by_their_kind() {
        for (_, event) in [call(1, 0), capped(2, 1)] {
            let json = serde_json::to_value(&event).expect("encodes");
            assert_eq!(json["type"], event.kind().trim_start_matches("outbound."));
            let back: OutboundEvent = serde_json::from_value(json).expect("decodes");
            assert_eq!(back, event);
        }
        assert_eq!(stream(t7()), "outbound:T-7");
    }
}

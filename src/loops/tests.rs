use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

async fn wait_for(
    registry: &LoopRegistry,
    name: &str,
    pred: impl Fn(&LoopReport) -> bool,
) -> LoopReport {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(report) = registry.report().get(name) {
            if pred(report) {
                return report.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting on loop {name}: {:?}",
            registry.report()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_panicking_tick_is_counted_and_the_loop_goes_on() {
    let registry = LoopRegistry::default();
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    spawn(
        &registry,
        &tracker,
        cancel.clone(),
        // Long enough that a loaded CI machine never makes it look stale (3 intervals without a tick).
        LoopSpec::new("flaky", Duration::from_millis(100), Duration::ZERO),
        move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                match n % 3 {
                    0 => panic!("boom {n}"),
                    1 => anyhow::bail!("plain error {n}"),
                    _ => Ok(Pace::Rest),
                }
            }
        },
    );
    let report = wait_for(&registry, "flaky", |r| r.ticks >= 6).await;
    assert!(report.errors >= 4, "{report:?}");
    assert!(report.last_ok_at.is_some());
    assert!(!report.stale);
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
    // The panic text itself is what an operator sees.
    let registry2 = LoopRegistry::default();
    let tracker2 = TaskTracker::new();
    let cancel2 = CancellationToken::new();
    spawn(
        &registry2,
        &tracker2,
        cancel2.clone(),
        LoopSpec::new("p", Duration::from_secs(60), Duration::ZERO),
        || async { panic!("the disk is on fire") },
    );
    let report = wait_for(&registry2, "p", |r| r.errors == 1).await;
    assert_eq!(
        report.last_error.as_deref(),
        Some("tick panicked: the disk is on fire")
    );
    assert!(report.failing);
    cancel2.cancel();
}

#[tokio::test]
async fn a_loop_that_stops_finishing_ticks_turns_stale() {
    let registry = LoopRegistry::default();
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    spawn(
        &registry,
        &tracker,
        cancel.clone(),
        LoopSpec::new("hangs", Duration::from_millis(30), Duration::ZERO)
            .with_fail_after(Duration::from_millis(100)),
        move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if n >= 2 {
                    std::future::pending::<()>().await;
                }
                Ok(Pace::Rest)
            }
        },
    );
    let report = wait_for(&registry, "hangs", |r| r.stale).await;
    assert_eq!(report.ticks, 2);
    cancel.cancel();
}

#[tokio::test]
async fn a_tick_with_work_left_goes_again_without_resting() {
    let registry = LoopRegistry::default();
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    // An interval of an hour: only `Pace::Again` can get the loop past its first tick.
    spawn(
        &registry,
        &tracker,
        cancel.clone(),
        LoopSpec::new("backlog", Duration::from_secs(3600), Duration::ZERO),
        move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok(Pace::again_if(n < 4)) }
        },
    );
    let report = wait_for(&registry, "backlog", |r| r.ticks >= 5).await;
    assert_eq!(report.errors, 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 5, "caught up: it rests");
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

#[test]
fn disabled_and_unarmed_loops_are_never_stale_and_keep_their_reason() {
    let registry = LoopRegistry::default();
    registry.disable("linear_poller", "LINEAR_API_KEY is not set");
    registry.unarm(
        "github_poller",
        "GITHUB_TOKEN is not set but repos are configured",
    );
    let report = registry.report();
    assert_eq!(report["linear_poller"].state, LoopState::Disabled);
    assert_eq!(
        report["linear_poller"].reason.as_deref(),
        Some("LINEAR_API_KEY is not set")
    );
    assert_eq!(report["github_poller"].state, LoopState::Unarmed);
    assert!(!report["github_poller"].stale);
}

#[test]
fn an_armed_loop_that_never_ticked_is_stale_after_its_grace() {
    let registry = LoopRegistry::with_fail_after(BTreeMap::from([
        ("never".to_owned(), Duration::from_millis(1)),
        ("patient".to_owned(), Duration::from_millis(1)),
    ]));
    registry.arm("never", Duration::from_millis(1), Duration::ZERO);
    std::thread::sleep(Duration::from_millis(10));
    assert!(registry.report()["never"].stale);
    registry.arm("patient", Duration::from_millis(1), Duration::from_secs(60));
    assert!(!registry.report()["patient"].stale);
}

#[tokio::test]
async fn a_loop_that_ticks_and_fails_every_time_turns_stale_with_its_error() {
    let registry = LoopRegistry::default();
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    spawn(
        &registry,
        &tracker,
        cancel.clone(),
        LoopSpec::new("poller", Duration::from_millis(20), Duration::ZERO)
            .with_fail_after(Duration::from_millis(300)),
        || async { anyhow::bail!("Linear answered 500") },
    );
    let failing = wait_for(&registry, "poller", |r| r.errors >= 1).await;
    assert!(failing.failing);
    let stale = wait_for(&registry, "poller", |r| r.stale).await;
    assert!(
        stale.ticks >= 2,
        "it kept finishing ticks and is stale all the same: {stale:?}"
    );
    assert_eq!(stale.last_error.as_deref(), Some("Linear answered 500"));
    assert_eq!(stale.last_ok_at, None);
    assert_eq!(stale.fail_after_s, Some(0.3));
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

#[tokio::test]
async fn a_success_keeps_a_loop_fresh_between_failures() {
    let registry = LoopRegistry::default();
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    // Every other tick fails; a threshold of many intervals is never reached between two successes.
    spawn(
        &registry,
        &tracker,
        cancel.clone(),
        LoopSpec::new("bumpy", Duration::from_millis(10), Duration::ZERO)
            .with_fail_after(Duration::from_secs(30)),
        move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if n.is_multiple_of(2) {
                    anyhow::bail!("transient {n}");
                }
                Ok(Pace::Rest)
            }
        },
    );
    let report = wait_for(&registry, "bumpy", |r| r.ticks >= 6).await;
    assert!(
        report.errors >= 3 && report.last_ok_at.is_some(),
        "{report:?}"
    );
    assert!(!report.stale);
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

#[test]
fn the_default_threshold_is_three_intervals_and_at_least_a_minute() {
    assert_eq!(default_fail_after(Duration::from_secs(1)), MIN_FAIL_AFTER);
    assert_eq!(
        default_fail_after(Duration::from_secs(300)),
        Duration::from_secs(900)
    );
    let registry = LoopRegistry::with_fail_after(BTreeMap::from([(
        "linear_poller".to_owned(),
        Duration::from_secs(120),
    )]));
    registry.arm("linear_poller", Duration::from_secs(300), Duration::ZERO);
    registry.arm("relay", Duration::from_secs(1), Duration::ZERO);
    let report = registry.report();
    assert_eq!(report["linear_poller"].fail_after_s, Some(120.0));
    assert_eq!(report["relay"].fail_after_s, Some(60.0));
}

#[test]
fn every_outbound_client_gives_up_before_a_loop_could_turn_stale() {
    // A hung call must end a tick as a failure (recorded, retried) well before its loop is declared dead.
    let github = crate::providers::github::CONNECT_TIMEOUT + crate::providers::github::READ_TIMEOUT;
    let slowest = [
        github,
        crate::providers::linear::TIMEOUT,
        crate::providers::telegram::TIMEOUT,
    ];
    for timeout in slowest {
        assert!(timeout < MIN_FAIL_AFTER, "{timeout:?}");
    }
    assert!(
        Duration::from_secs(crate::startup::catalog::TELEGRAM_LONG_POLL_S)
            < crate::providers::telegram::TIMEOUT,
        "a long poll ends before its client's timeout"
    );
}

#[test]
fn fail_after_is_read_per_loop_and_bad_entries_are_refused() {
    let parse = |text: &str| {
        text.parse::<crate::config::FileConfig>()
            .map(|file| file.loop_fail_after)
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        parse("[loops.linear_poller]\nfail_after_s = 1.5\n[loops.cron]\nfail_after_s = 600")
            .unwrap(),
        BTreeMap::from([
            ("cron".to_owned(), Duration::from_secs(600)),
            ("linear_poller".to_owned(), Duration::from_millis(1500)),
        ])
    );
    assert!(parse("").unwrap().is_empty());
    assert_eq!(
        parse("[loops.cron]\nfail_after = 5").unwrap_err(),
        "[loops.cron] fail_after: unknown key; did you mean fail_after_s?"
    );
    assert_eq!(
        parse("[loops.cron]\nfail_after_s = -1").unwrap_err(),
        "[loops.cron] fail_after_s: expected a positive number of seconds"
    );
    assert!(parse("loops = 3").is_err());
}

/// A loop that follows the log rests until something is committed, not its whole interval: with an hour's
/// interval, each commit brings a tick; after the log's writer is gone, it rests on its interval (no spin).
#[tokio::test]
async fn a_commit_wakes_a_resting_follower_and_a_closed_log_does_not_spin_it() {
    let registry = LoopRegistry::default();
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    let (committed, watching) = watch::channel(0i64);
    spawn(
        &registry,
        &tracker,
        cancel.clone(),
        LoopSpec::new("follower", Duration::from_secs(3600), Duration::ZERO).woken_by(watching),
        || async { Ok(Pace::Rest) },
    );
    wait_for(&registry, "follower", |r| r.ticks == 1).await;
    for position in 1..=3 {
        committed.send_replace(position);
        wait_for(&registry, "follower", |r| r.ticks == 1 + position as u64).await;
    }
    drop(committed);
    // Closed: no more ticks for an hour. A spin would make thousands in this time.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ticks = registry.report()["follower"].ticks;
    assert!(
        ticks <= 5,
        "the loop spun after the log closed: {ticks} ticks"
    );
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

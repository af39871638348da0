//! `/health` tells the truth: a real database round trip, and every loop's state. `/metrics` renders from memory.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;

use super::AppState;
use crate::dispatch::dispatcher::DispatchStatus;
use crate::loops::{LoopReport, LoopState};

const DATABASE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

/// What `/health` says; the dashboard's health page renders the same value.
#[derive(Clone, Debug, Serialize)]
pub struct HealthBody {
    pub status: Status,
    pub version: &'static str,
    /// This replica, as named in lease holders.
    pub instance: String,
    pub uptime_s: u64,
    pub checks: BTreeMap<&'static str, serde_json::Value>,
    pub loops: BTreeMap<String, LoopReport>,
    /// Why the status is not `pass`, one line per cause, naming the part (empty when it passes).
    pub problems: Vec<String>,
}

/// The overall status from the parts: any failing part fails the whole. Returns the causes too, so `/health`
/// names the loop and its last error instead of leaving an operator to search the JSON.
pub fn overall(database_ok: bool, loops: &BTreeMap<String, LoopReport>) -> (Status, Vec<String>) {
    let mut status = Status::Pass;
    let mut problems = Vec::new();
    if !database_ok {
        status = Status::Fail;
        problems.push("database: failing (see checks.database)".to_owned());
    }
    for (name, report) in loops {
        let (loop_status, problem) = loop_status(name, report);
        status = status.max(loop_status);
        problems.extend(problem);
    }
    (status, problems)
}

/// What one loop does to the overall status, and the problem line it adds (the dashboard colours its row by it).
pub fn loop_status(name: &str, report: &LoopReport) -> (Status, Option<String>) {
    let last_error = || {
        report
            .last_error
            .as_deref()
            .map_or(String::new(), |e| format!("; last error: {e}"))
    };
    match report.state {
        LoopState::Unarmed => (
            Status::Fail,
            Some(format!(
                "loop {name} is unarmed: {}",
                report.reason.as_deref().unwrap_or("no reason given")
            )),
        ),
        LoopState::Armed if report.stale => (
            Status::Fail,
            Some(format!(
                "loop {name} is stale: no successful tick within {}{}",
                report
                    .fail_after_s
                    .map_or("its threshold".to_owned(), |s| format!("{s} s")),
                last_error()
            )),
        ),
        LoopState::Armed if report.failing => (
            Status::Warn,
            Some(format!("loop {name}: its last tick failed{}", last_error())),
        ),
        LoopState::Armed => match DispatchStatus::of(report.detail.as_ref())
            .and_then(|status| dispatcher_warning(&status))
        {
            Some(problem) => (Status::Warn, Some(format!("loop {name}: {problem}"))),
            None => (Status::Pass, None),
        },
        LoopState::Disabled => (Status::Pass, None),
    }
}

/// What the dispatcher's status warns of, the first that holds: nothing is broken, and nothing (or not all)
/// starts. Read typed, so a renamed field fails to compile here instead of quietly dropping a warning.
fn dispatcher_warning(status: &DispatchStatus) -> Option<String> {
    disk_low(status)
        .or_else(|| paused_with_work(status))
        .or_else(|| unready_profiles(status))
        .or_else(|| limited_profiles(status))
        .or_else(|| budgets(status))
}

/// A deliberate pause is not a fault, but with work waiting behind it nothing moves: that is worth a warning.
fn paused_with_work(status: &DispatchStatus) -> Option<String> {
    let queued = status.queue + status.backing_off;
    (status.paused && queued > 0).then(|| {
        format!(
            "dispatch is paused ({}) with {queued} task(s) waiting",
            status.paused_reason.as_deref().unwrap_or("no reason given")
        )
    })
}

/// Claims held back for lack of disk on the workspace volume: nothing is broken yet, and nothing starts.
fn disk_low(status: &DispatchStatus) -> Option<String> {
    status.disk_low.clone()
}

/// A budget spent (nothing starts in it) or past its soft limit: a person decides whether to raise it.
fn budgets(status: &DispatchStatus) -> Option<String> {
    (!status.budgets.is_empty()).then(|| status.budgets.join("; "))
}

/// A profile that fails its preflight (its program, git, its credential, the workspace volume): nothing on it
/// starts, and its tasks wait with no attempt spent until the machine is fixed.
fn unready_profiles(status: &DispatchStatus) -> Option<String> {
    if status.unready_profiles.is_empty() {
        return None;
    }
    let lines: Vec<String> = status
        .unready_profiles
        .iter()
        .map(|(profile, why)| format!("agent profile {profile} cannot run here: {why}"))
        .collect();
    Some(format!(
        "{} ({} task(s) waiting)",
        lines.join("; "),
        status.unready
    ))
}

/// A profile paused by its provider's usage or rate limit (or on probation after one run's unverified report):
/// nothing is broken, and nothing on it moves until then. Says whose word it is (`domain::limits::Hold`).
fn limited_profiles(status: &DispatchStatus) -> Option<String> {
    if status.limit_holds.is_empty() {
        return None;
    }
    let profiles: Vec<String> = status
        .limit_holds
        .iter()
        .map(|(profile, hold)| hold.describe(profile))
        .collect();
    Some(format!(
        "{} ({} task(s) waiting)",
        profiles.join("; "),
        status.limited
    ))
}

pub async fn health(State(state): State<AppState>) -> Response {
    let body = snapshot(&state).await;
    log_change(&state, &body);
    let code = if body.status == Status::Fail {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, [(header::CACHE_CONTROL, "no-store")], Json(body)).into_response()
}

/// The truth about this replica now: a database round trip, the webhooks, the bus, the sources and every loop.
pub async fn snapshot(state: &AppState) -> HealthBody {
    let started = Instant::now();
    let ping = tokio::time::timeout(DATABASE_CHECK_TIMEOUT, state.log.store().ping()).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut database = match ping {
        Ok(Ok(())) => {
            json!({ "status": Status::Pass, "kind": state.log.store().kind(), "latency_ms": round(latency_ms) })
        }
        Ok(Err(ref error)) => {
            json!({ "status": Status::Fail, "kind": state.log.store().kind(), "error": error.to_string() })
        }
        Err(_) => json!({ "status": Status::Fail, "kind": state.log.store().kind(),
                          "error": format!("no answer within {} ms", DATABASE_CHECK_TIMEOUT.as_millis()) }),
    };
    let reachable = matches!(ping, Ok(Ok(())));
    let mut database_ok = reachable;
    // A database can answer pings and still refuse every commit (a full disk): appends are the real test.
    if let Some(failure) = state.log.stats().failing() {
        database_ok = false;
        database["status"] = json!(Status::Fail);
        database["appends"] = json!({
            "status": Status::Fail,
            "failing_since": failure.since,
            "error": format!("appends are failing: {}", failure.error),
        });
    }

    let settings = &state.settings;
    let webhooks: serde_json::Map<String, serde_json::Value> = crate::domain::registry::PROVIDERS
        .iter()
        .filter_map(|p| Some((p.name, settings.webhook_secret(p.source)?)))
    .map(|(name, secret)| {
        let value = if secret.is_set() {
            json!({ "configured": true })
        } else {
            json!({ "configured": false, "reason": format!("{} is not set; deliveries get 503", secret.variable) })
        };
        (name.to_owned(), value)
    })
    .collect();

    let mut loops = state.loops.report();
    for (name, view) in state.leases.views() {
        if let Some(report) = loops.get_mut(&name) {
            report.lease = Some(view);
        }
    }
    let (status, problems) = overall(database_ok, &loops);
    metrics::gauge!("pidevops_health_status").set(match status {
        Status::Pass => 1.0,
        Status::Warn => 0.5,
        Status::Fail => 0.0,
    });

    let mut checks = BTreeMap::new();
    checks.insert("database", database);
    checks.insert(
        "webhooks",
        json!({ "status": Status::Pass, "sources": webhooks }),
    );
    // The bus is fan-out: when it is down ingest goes on, so its trouble warns rather than fails.
    let relay = loops.get(crate::bus::relay::RELAY);
    let bus_status = if relay.is_some_and(|r| r.failing) {
        Status::Warn
    } else {
        Status::Pass
    };
    let open = settings
        .nats_url
        .as_deref()
        .and_then(crate::bus::credentials::open_to_strangers);
    let bus_status = if open.is_some() {
        Status::Warn
    } else {
        bus_status
    };
    let mut bus = json!({ "status": bus_status, "kind": state.bus_kind });
    if let Some(why) = open {
        bus["credentials"] = json!({ "status": Status::Warn, "reason": why });
    }
    if let Some(detail) = relay.and_then(|r| r.detail.clone()) {
        bus["relay"] = detail;
    }
    checks.insert("bus", bus);
    if reachable {
        checks.insert("sources", sources_check(state).await);
    }
    HealthBody {
        status,
        version: env!("CARGO_PKG_VERSION"),
        instance: state.leases.holder().to_owned(),
        uptime_s: state.started.elapsed().as_secs(),
        checks,
        loops,
        problems,
    }
}

/// Logs when the status changes, not on every probe: a platform probing a failing replica every few seconds
/// would otherwise bury everything else in the log under the same ERROR.
fn log_change(state: &AppState, body: &HealthBody) {
    let code = body.status as u8;
    let previous = state
        .last_health
        .swap(code, std::sync::atomic::Ordering::Relaxed);
    if previous == code {
        return;
    }
    let problems = body.problems.join(" | ");
    match body.status {
        Status::Pass => tracing::info!(status = "pass", "health recovered"),
        Status::Warn => tracing::warn!(status = "warn", %problems, "health changed"),
        Status::Fail => tracing::error!(status = "fail", %problems, "health changed"),
    }
}

/// When each source last delivered, from the `sources` read model: informational (a quiet source is not a fault
/// pidevops can judge), so it always passes, and says how current the read model is.
async fn sources_check(state: &AppState) -> serde_json::Value {
    let store = state.log.store();
    let read = async {
        let rows = crate::projectors::sources::activity(store).await?;
        let head = store.head().await?;
        let projected = crate::projectors::read_row(store, crate::projectors::sources::NAME)
            .await?
            .map_or(0, |(_, position)| position);
        Ok::<_, crate::eventlog::StoreError>((rows, head, projected))
    };
    match tokio::time::timeout(DATABASE_CHECK_TIMEOUT, read).await {
        Ok(Ok((rows, head, projected))) => {
            let now = chrono::Utc::now();
            let sources: serde_json::Map<String, serde_json::Value> =
                crate::projectors::sources::summarize(&rows)
                    .into_iter()
                    .map(|s| {
                        let ago = (now - s.last_at).num_seconds().max(0);
                        (
                            s.source.clone(),
                            json!({ "events": s.events, "last_delivery_at": s.last_at,
                                    "last_delivery_ago_s": ago, "last_type": s.last_type }),
                        )
                    })
                    .collect();
            json!({ "status": Status::Pass, "sources": sources, "as_of_position": projected, "head": head })
        }
        Ok(Err(error)) => json!({ "status": Status::Pass, "error": error.to_string() }),
        Err(_) => {
            json!({ "status": Status::Pass, "error": "the sources read model did not answer in time" })
        }
    }
}

fn round(ms: f64) -> f64 {
    (ms * 100.0).round() / 100.0
}

pub async fn live() -> Response {
    (StatusCode::OK, Json(json!({ "status": "pass" }))).into_response()
}

/// Prometheus text, rendered from memory: scraping never touches the database.
pub async fn metrics(State(state): State<AppState>) -> Response {
    state.loops.publish_gauges();
    metrics::gauge!("pidevops_uptime_seconds").set(state.started.elapsed().as_secs_f64());
    let mut body = state.metrics.render();
    // Usage counters come from the read model, not the process: true across restarts and replicas. A database
    // that cannot answer leaves them out (an absent series, never a wrong one).
    match crate::projectors::usage::by_repo_and_profile(state.log.store()).await {
        Ok(rows) => body.push_str(&crate::projectors::usage::prometheus_text(&rows)),
        Err(error) => tracing::warn!(%error, "/metrics: the usage read model cannot be read"),
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(state: LoopState, stale: bool, failing: bool) -> LoopReport {
        LoopReport {
            state,
            reason: None,
            interval_s: Some(1.0),
            fail_after_s: Some(60.0),
            last_tick_at: None,
            last_ok_at: None,
            last_error: None,
            ticks: 0,
            errors: 0,
            stale,
            detail: None,
            lease: None,
            failing,
        }
    }

    #[test]
    fn status_is_the_worst_of_its_parts() {
        let status = |db, loops: &BTreeMap<String, LoopReport>| overall(db, loops).0;
        let mut loops = BTreeMap::new();
        assert_eq!(overall(true, &loops), (Status::Pass, vec![]));
        assert_eq!(status(false, &loops), Status::Fail);
        loops.insert("a".into(), report(LoopState::Disabled, false, false));
        assert_eq!(
            status(true, &loops),
            Status::Pass,
            "disabled loops do not fail health"
        );
        loops.insert("b".into(), report(LoopState::Armed, false, true));
        assert_eq!(status(true, &loops), Status::Warn);
        loops.insert("c".into(), report(LoopState::Armed, true, false));
        assert_eq!(status(true, &loops), Status::Fail);
        loops.clear();
        loops.insert("d".into(), report(LoopState::Unarmed, false, false));
        assert_eq!(status(true, &loops), Status::Fail);
    }

    #[test]
    fn a_stale_loop_is_named_with_its_last_error() {
        let mut poller = report(LoopState::Armed, true, true);
        poller.last_error = Some("Linear answered 500".into());
        poller.fail_after_s = Some(900.0);
        let loops = BTreeMap::from([("linear_poller".to_owned(), poller)]);
        assert_eq!(
            overall(true, &loops),
            (
                Status::Fail,
                vec![
                    "loop linear_poller is stale: no successful tick within 900 s; last error: Linear answered 500"
                        .to_owned()
                ]
            )
        );
    }

    #[test]
    fn a_pause_warns_only_with_work_waiting() {
        let dispatcher = |paused: bool, queue: usize, backing_off: usize| {
            let r = dispatcher_report(DispatchStatus {
                paused,
                paused_reason: Some("paused by api: deploy".to_owned()),
                queue,
                backing_off,
                ..DispatchStatus::default()
            });
            BTreeMap::from([("dispatcher".to_owned(), r)])
        };
        assert_eq!(
            overall(true, &dispatcher(true, 0, 0)),
            (Status::Pass, vec![])
        );
        assert_eq!(
            overall(true, &dispatcher(false, 5, 0)),
            (Status::Pass, vec![])
        );
        assert_eq!(
            overall(true, &dispatcher(true, 2, 1)),
            (
                Status::Warn,
                vec!["loop dispatcher: dispatch is paused (paused by api: deploy) with 3 task(s) waiting".to_owned()]
            )
        );
    }

    #[test]
    fn a_full_workspace_volume_warns_with_its_reason() {
        let r = dispatcher_report(DispatchStatus {
            disk_low: Some("claims wait: low".to_owned()),
            ..DispatchStatus::default()
        });
        let loops = BTreeMap::from([("dispatcher".to_owned(), r)]);
        assert_eq!(
            overall(true, &loops),
            (
                Status::Warn,
                vec!["loop dispatcher: claims wait: low".to_owned()]
            )
        );
    }

    /// The dispatcher's loop reports its status as its detail (JSON), as `startup` stores it.
    fn dispatcher_report(status: DispatchStatus) -> LoopReport {
        let mut r = report(LoopState::Armed, false, false);
        r.detail = Some(serde_json::to_value(status).expect("encodes"));
        r
    }

    /// The warnings read the detail back typed: every field must survive the round trip, or a warning would
    /// vanish with no error (a `skip_serializing` without its `default`, a field that cannot be read back).
    #[test]
    fn the_dispatcher_status_reads_back_whole_and_every_warning_shows() {
        let hold = crate::domain::limits::Hold::Paused {
            until: chrono::DateTime::from_timestamp(1_900_000_000, 0).expect("a time"),
            tasks: 2,
            verified: true,
        };
        let status = DispatchStatus {
            paused: true,
            paused_reason: Some("paused by api: deploy".to_owned()),
            queue: 1,
            backing_off: 2,
            waiting_on_dependencies: 3,
            limited_profiles: BTreeMap::from([("claude".to_owned(), chrono::DateTime::UNIX_EPOCH)]),
            limit_holds: BTreeMap::from([("claude".to_owned(), hold)]),
            limited: 4,
            unready_profiles: BTreeMap::from([(
                "codex".to_owned(),
                "codex is not installed".to_owned(),
            )]),
            unready: 5,
            over_budget: 6,
            budgets: vec!["budget team spent".to_owned()],
            running: 7,
            slots: 8,
            started: 9,
            executor: "local".to_owned(),
            containment: "namespaces".to_owned(),
            confinement: "bubblewrap".to_owned(),
            disk_low: Some("claims wait: low".to_owned()),
            workspace_free_bytes: Some(10),
            memory: "4 GiB".to_owned(),
            scratch: "512 MiB".to_owned(),
        };
        let detail = serde_json::to_value(&status).expect("encodes");
        assert_eq!(DispatchStatus::of(Some(&detail)), Some(status.clone()));
        // Empty maps and lists are left out of the JSON: they must read back empty.
        let quiet = DispatchStatus::default();
        let detail = serde_json::to_value(&quiet).expect("encodes");
        assert_eq!(DispatchStatus::of(Some(&detail)), Some(quiet));
        assert_eq!(
            DispatchStatus::of(Some(&json!({ "lag": 3 }))),
            None,
            "another loop's detail"
        );
        assert_eq!(DispatchStatus::of(None), None);
        // Each warning in turn, the first that holds first.
        let mut status = status;
        let warning = |s: &DispatchStatus| dispatcher_warning(s);
        assert_eq!(warning(&status).as_deref(), Some("claims wait: low"));
        status.disk_low = None;
        assert_eq!(
            warning(&status).as_deref(),
            Some("dispatch is paused (paused by api: deploy) with 3 task(s) waiting")
        );
        status.paused = false;
        assert_eq!(
            warning(&status).as_deref(),
            Some("agent profile codex cannot run here: codex is not installed (5 task(s) waiting)")
        );
        status.unready_profiles.clear();
        let held = warning(&status).expect("a limit warning");
        assert!(
            held.starts_with("agent profile claude") && held.ends_with("(4 task(s) waiting)"),
            "{held}"
        );
        status.limit_holds.clear();
        assert_eq!(warning(&status).as_deref(), Some("budget team spent"));
        status.budgets.clear();
        assert_eq!(warning(&status), None);
    }
}

//! `GET /whatif` and `POST /whatif`: what-if on the past from the dashboard. A person pastes a candidate
//! `pidevops.toml` (the page starts with the service's own) and a range; the log is replayed under it
//! (`crate::whatif::replay_log`, the same replay as `pidevops whatif --config`) and the differences shown, task by
//! task. Reads only. A candidate that is not a configuration is refused with every error named and nothing read;
//! one replay runs at a time (it reads the whole log), a second is told to wait.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::Utc;
use maud::{html, Markup};

use super::session::{Key, Session};
use super::{frame, page, pages, unavailable, SignedIn};
use crate::http::AppState;
use crate::whatif::{change_words, ConfigReport, MAX_CANDIDATE_BYTES, MAX_DAYS};

/// One replay at a time across the process: each reads the whole log into memory.
static REPLAYING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// The default range, in days.
const DEFAULT_DAYS: i64 = 30;

/// What the form holds: shown again with the report or the refusal.
struct Asked {
    candidate: String,
    days: String,
}

pub(super) async fn whatif_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
) -> Response {
    // The service's own configuration as the starting point, where it has a file and it is of a size the form takes.
    let candidate = match &state.settings.config_file {
        Some(path) => tokio::fs::read_to_string(path).await.ok(),
        None => None,
    }
    .filter(|text| text.len() <= MAX_CANDIDATE_BYTES)
    .unwrap_or_default();
    let asked = Asked {
        candidate,
        days: DEFAULT_DAYS.to_string(),
    };
    shown(&key, &session, StatusCode::OK, &asked, html! {})
}

pub(super) async fn replay(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    // Form encoding can triple a TOML's bytes (quotes, brackets, newlines): the limit is on the decoded candidate.
    let Some(form) = super::parse_form(&body, 3 * MAX_CANDIDATE_BYTES + 1024) else {
        return super::too_large();
    };
    let (key, session) = match super::require_post(&state, &headers, &form).await {
        super::Access::Granted(key, session) => (key, session),
        super::Access::Denied(response) => return response,
    };
    let asked = Asked {
        candidate: super::field(&form, "candidate").unwrap_or_default(),
        days: super::field(&form, "days").unwrap_or_default(),
    };
    if asked.candidate.len() > MAX_CANDIDATE_BYTES {
        return super::too_large();
    }
    let refused = |why: Markup| shown(&key, &session, StatusCode::BAD_REQUEST, &asked, why);
    let days = match asked.days.trim().parse::<i64>() {
        Ok(days) if (1..=MAX_DAYS).contains(&days) => days,
        _ => {
            return refused(html! {
                p.refused { "The range is a whole number of days, 1 to " (MAX_DAYS) "." }
            })
        }
    };
    let label = std::path::Path::new("the candidate");
    let file = match crate::config::parse_config_text(&asked.candidate, label) {
        Ok(file) => file,
        Err(error) => {
            return refused(html! {
                p.refused { "The candidate is not a configuration pidevops would start with; nothing was replayed." }
                pre.refused { (error.to_string()) }
            })
        }
    };
    let Ok(_one) = REPLAYING.try_acquire() else {
        return shown(
            &key,
            &session,
            StatusCode::TOO_MANY_REQUESTS,
            &asked,
            html! { p.refused { "Another replay is running: try again when it has finished." } },
        );
    };
    let rules = crate::providers::intake_rules(&crate::config::Settings {
        file: file.clone(),
        ..state.settings.as_ref().clone()
    });
    let service_rules = crate::providers::intake_rules(&state.settings);
    let since = Utc::now() - chrono::Duration::days(days);
    match crate::whatif::replay_log(state.log.store(), &file, &rules, &service_rules, since).await {
        Ok(report) => shown(&key, &session, StatusCode::OK, &asked, report_view(&report)),
        Err(e) => unavailable(format!("{e:#}")),
    }
}

fn shown(
    key: &Key,
    session: &Session,
    status: StatusCode,
    asked: &Asked,
    below: Markup,
) -> Response {
    let frame = frame(key, session, "What if", pages::Nav::Whatif, None);
    let body = html! {
        h1 { "What if" }
        p {
            "The recorded log replayed under a candidate configuration: each task made in the range decided again "
            "by pidevops's own rules (intake and the allow-list, approval, budgets, landing, the effect cap), "
            "with no outbound call and no agent run. Nothing is written."
        }
        form.whatif method="post" action="/whatif" {
            input type="hidden" name="csrf" value=(frame.csrf);
            label for="candidate" { "Candidate pidevops.toml" }
            textarea id="candidate" name="candidate" rows="18" spellcheck="false" { (asked.candidate) }
            label for="days" { "Days back" }
            input id="days" name="days" type="number" min="1" max=(MAX_DAYS) value=(asked.days);
            button type="submit" { "Replay" }
        }
        (below)
    };
    page(status, pages::layout(&frame, body))
}

/// The report: the totals, then each task that would differ, then what cannot be known. Every text from a ticket is
/// escaped by maud.
fn report_view(report: &ConfigReport) -> Markup {
    let money = crate::whatif::Spend::words;
    html! {
        section.whatif-report {
            p.summary {
                (report.events_read) " events replayed since " (report.since.format("%Y-%m-%d %H:%M UTC")) ": "
                (report.tasks_compared) " tasks and " (report.tickets_refused_compared) " refused tickets decided again. "
                "Spent: " (money(&report.recorded)) "; under the candidate: " (money(&report.candidate)) "."
            }
            @if report.differences.is_empty() {
                p.same { "No differences: the candidate decides as the service did." }
            } @else {
                table {
                    thead { tr { th { "Task" } th { "Title" } th { "Would differ" } th { "Spent" } th { "Under the candidate" } } }
                    tbody {
                        @for line in &report.differences {
                            tr {
                                td {
                                    @match &line.task {
                                        Some(task) => a href={ "/tasks/" (task) } { (task) },
                                        None => (line.key.as_deref().unwrap_or("a refused ticket")),
                                    }
                                }
                                td { (line.title) }
                                td { ul { @for change in &line.changes { li { (change_words(change)) } } } }
                                td { (money(&line.recorded)) }
                                td { (money(&line.candidate)) }
                            }
                        }
                    }
                }
            }
            @if !report.unknowns.is_empty() {
                h2 { "Not known" }
                ul { @for unknown in &report.unknowns { li { (unknown) } } }
            }
        }
    }
}

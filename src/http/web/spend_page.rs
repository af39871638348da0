//! `GET /spend?days=30&repo=o/n`: the spend page's handler. Reads the `usage` read model (the range's rows, the
//! tasks that spent most), the `tasks` read model's `task_merges` (pull requests merged in the range) and titles,
//! then renders `spend.rs`. A query it does not take (a range not offered, a repository that is no `owner/name`, a
//! field it does not know) is a 400 page saying so, and nothing else is read.

use std::collections::BTreeSet;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{Duration, Utc};
use serde::Deserialize;

use super::session::{Key, Session};
use super::spend::{self, SpendView, TOP_TASKS};
use super::{frame, page, pages, timed, unavailable, SignedIn};
use crate::http::AppState;
use crate::projectors::tasks as task_rows;
use crate::projectors::usage::{self, UsageFilter};
use crate::tasks::{RepoName, TaskId};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SpendParams {
    days: Option<String>,
    repo: Option<String>,
}

fn refused(key: &Key, session: &Session, why: &str) -> Response {
    page(
        StatusCode::BAD_REQUEST,
        pages::layout(
            &frame(key, session, "Spend", pages::Nav::Spend, None),
            pages::message("Not a spend query", why),
        ),
    )
}

pub(super) async fn spend_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
    params: Result<Query<SpendParams>, QueryRejection>,
) -> Response {
    let started = std::time::Instant::now();
    let Query(params) = match params {
        Ok(params) => params,
        Err(rejection) => {
            return refused(
                &key,
                &session,
                &format!(
                    "The page takes days (7, 30 or 90) and repo (owner/name), once each: {}.",
                    rejection.body_text()
                ),
            )
        }
    };
    let asked = match spend::query(params.days.as_deref(), params.repo.as_deref()) {
        Ok(asked) => asked,
        Err(why) => return refused(&key, &session, &why),
    };
    let since = Utc::now().date_naive() - Duration::days(asked.days - 1);
    let repo = asked.repo.as_ref().map(|r| r.as_str().to_owned());
    let store = state.log.store();
    let read = async {
        let filter = UsageFilter {
            since: Some(since),
            repo: repo.clone(),
        };
        let rows = usage::days(store, &filter).await?;
        let since_midnight = since.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
        let top = usage::top_tasks_since(store, repo.as_deref(), since_midnight, TOP_TASKS).await?;
        let ids: Vec<TaskId> = top.iter().filter_map(|t| t.task_id.parse().ok()).collect();
        let titles = task_rows::get_many(store, &ids).await?;
        let merged = task_rows::merged_pull_requests(store, since, repo.as_deref()).await?;
        // Offered in the filter: the repositories with spend or tasks, as far as they are names (a recorded one
        // that is not could not be asked for).
        let mut repos: BTreeSet<String> = usage::repos(store).await?.into_iter().collect();
        repos.extend(task_rows::repos(store).await?);
        repos.retain(|r| r.parse::<RepoName>().is_ok());
        let tasks = top
            .into_iter()
            .map(|t| {
                let title = titles
                    .iter()
                    .find(|row| row.id.to_string() == t.task_id)
                    .map(|row| row.title.clone());
                (t, title)
            })
            .collect();
        Ok::<_, anyhow::Error>(SpendView {
            days: asked.days,
            repo,
            since,
            repos: repos.into_iter().collect(),
            rows,
            merged,
            tasks,
            raise: state
                .settings
                .file
                .dispatch
                .budgets
                .any()
                .then(|| session.csrf(&key)),
        })
    };
    match read.await {
        Ok(view) => timed(
            started,
            page(
                StatusCode::OK,
                pages::layout(
                    &frame(&key, &session, "Spend", pages::Nav::Spend, None),
                    spend::spend(&view),
                ),
            ),
        ),
        Err(e) => unavailable(format!("{e:#}")),
    }
}

/// `POST /spend/raise`: a person raises a budget from the spend page — the same `budget.raised` event as the API's
/// and the CLI's. A form that asks for nothing to raise is refused, saying why, and nothing is raised.
pub(super) async fn raise(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let Some(form) = super::parse_form(&body, super::FORM_LIMIT) else {
        return super::too_large();
    };
    if let super::Access::Denied(response) = super::require_post(&state, &headers, &form).await {
        return response;
    }
    let text = |name: &str| {
        super::field(&form, name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let scope = text("scope").unwrap_or_default();
    let target = text("target");
    let usd = match text("usd").map(|v| v.parse::<f64>()) {
        None => None,
        Some(Ok(usd)) => Some(usd),
        Some(Err(_)) => return not_raised("the amount in US dollars is not a number"),
    };
    let tokens = match text("tokens").map(|v| v.parse::<u64>()) {
        None => None,
        Some(Ok(tokens)) => Some(tokens),
        Some(Err(_)) => return not_raised("the tokens are not a whole number"),
    };
    let request = crate::budgets::RaiseRequest {
        task: (scope == "task").then(|| target.clone()).flatten(),
        repo: (scope == "repo").then(|| target.clone()).flatten(),
        scope,
        usd,
        tokens,
        request_id: None,
    };
    let config = &state.settings.file.dispatch.budgets;
    let raise = match crate::budgets::raise_of_request(
        &request,
        config,
        Utc::now().date_naive(),
        "dashboard",
    ) {
        Ok(raise) => raise,
        Err(why) => return not_raised(&why),
    };
    if let crate::budgets::Scope::Repo { repo, .. } = &raise.scope {
        if let Ok(name) = repo.parse::<RepoName>() {
            if let Err(refused) = state.board.config().allowed.check(&name) {
                return not_raised(&refused.to_string());
            }
        }
    }
    match crate::budgets::raise(&state.log, &raise, None).await {
        Ok(_) => {
            axum::response::IntoResponse::into_response(axum::response::Redirect::to("/spend"))
        }
        Err(e) => unavailable(format!("{e:#}")),
    }
}

fn not_raised(why: &str) -> Response {
    page(
        StatusCode::BAD_REQUEST,
        pages::message("Not raised", &format!("Nothing was raised: {why}.")),
    )
}

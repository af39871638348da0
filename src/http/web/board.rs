//! The board at `/`: its columns, the needs-a-human lane above them, and the filters and search box, from the
//! tasks read model (`board_view`, the handler) and as HTML (`board`, pure).

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use super::pages::{self, source_badge, Nav};
use super::plan::{self, card_family, Related};
use super::words::{age, column_label};
use super::{caught_up, frame, page, rendered_at, timed, unavailable, SignedIn};
use crate::domain::registry;
use crate::http::AppState;
use crate::projectors::tasks::{self as task_rows, TaskFilter, TaskRow};
use crate::tasks::{Column, Links};

/// Cards shown per column; the header counts them all.
pub const CARDS_PER_COLUMN: usize = 60;

/// The columns the board shows, in order; archived and cancelled are behind the filter.
pub const BOARD_COLUMNS: [Column; 5] = [
    Column::Triage,
    Column::Todo,
    Column::InProgress,
    Column::InReview,
    Column::Done,
];

/// What the board's filters ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoardFilter {
    pub repo: Option<String>,
    pub source: Option<String>,
    pub needs_human: bool,
    pub archived: bool,
    /// Text in a task's title or spec.
    pub q: Option<String>,
}

pub struct BoardView {
    /// Tasks per column (under the filters), for the headers.
    pub counts: BTreeMap<Column, usize>,
    /// The cards shown per column (at most [`CARDS_PER_COLUMN`]).
    pub columns: Vec<(Column, Vec<TaskRow>)>,
    /// The tasks waiting for a person, out of their columns (empty when the filter shows only those).
    pub flagged: Lane,
    pub filter: BoardFilter,
    pub repos: Vec<String>,
    /// The rows the cards' plans and items refer to (their items, their dependencies).
    pub related: Related,
    pub now: DateTime<Utc>,
}

/// The board's lane of tasks that need a person: the first cards, and how many there are.
#[derive(Clone, Debug, Default)]
pub struct Lane {
    pub rows: Vec<TaskRow>,
    pub count: usize,
}

pub fn board(view: &BoardView) -> Markup {
    let f = &view.filter;
    html! {
        div.heading {
            h1 { "Board" }
            a.button data-action="new-task" href="/tasks/new" { "New task" }
        }
        form.filters method="get" action="/" {
            input type="search" name="q" placeholder="search titles and specs" aria-label="search"
                maxlength=(crate::projectors::tasks::MAX_SEARCH) value=[f.q.as_deref()];
            select name="repo" {
                option value="" { "every repository" }
                @for repo in &view.repos {
                    option value=(repo) selected[f.repo.as_deref() == Some(repo.as_str())] { (repo) }
                }
            }
            select name="source" {
                option value="" { "every source" }
                @for source in registry::names().chain(["api", "cli", "cron"]) {
                    option value=(source) selected[f.source.as_deref() == Some(source)] { (source) }
                }
            }
            label { input type="checkbox" name="needs_human" value="1" checked[f.needs_human]; " needs a human" }
            label { input type="checkbox" name="archived" value="1" checked[f.archived]; " archived and cancelled" }
            button type="submit" { "Filter" }
        }
        @if view.flagged.count > 0 {
            section.lane.flagged {
                h2 { span { "needs a human" } " " span.count { (view.flagged.count) } }
                div.lane-cards {
                    @for row in &view.flagged.rows { (card(row, &view.related, view.now)) }
                }
                @if view.flagged.count > view.flagged.rows.len() {
                    p.muted { "and " (view.flagged.count - view.flagged.rows.len()) " more" }
                }
            }
        }
        div.board {
            @for (column, rows) in &view.columns {
                @let count = view.counts.get(column).copied().unwrap_or(0);
                section.column data-column=(column.as_str()) {
                    h2 { span { (column_label(*column)) } span.count { (count) } }
                    @for row in rows { (card(row, &view.related, view.now)) }
                    @if count > rows.len() {
                        p.muted { "and " (count - rows.len()) " more" }
                    }
                }
            }
        }
    }
}

fn card(row: &TaskRow, related: &Related, now: DateTime<Utc>) -> Markup {
    html! {
        article.card data-task=(row.id) {
            div {
                a href={ "/tasks/" (row.id) } { strong { (row.id) } } " " (row.title)
            }
            div.meta {
                (source_badge(&row.source)) " " (row.repo)
                " · " (age(now - row.created_at))
                " · attempt " (row.attempts) "/" (row.max_attempts)
                @if let Some(link) = source_link(&row.links) { " · " (link) }
            }
            (card_family(row, related))
            @if row.is_behind() {
                div {
                    span.badge.warn data-behind="1" title=(super::pages::behind_title(row)) {
                        "behind"
                    }
                }
            }
            @if let Some(since) = row.stale_since() {
                div {
                    span.badge.warn data-stale="1" title={ "no activity in review since " (since.format("%Y-%m-%d %H:%M UTC")) } {
                        "stale"
                    }
                }
            }
            @if row.needs_human {
                div {
                    span.badge.bad { "needs a human" } " "
                    span.badge data-column=(row.column.as_str()) { (column_label(row.column)) }
                }
                @if let Some(reason) = &row.needs_human_reason { p.reason { (reason) } }
            }
        }
    }
}

/// The ticket the task came from, linked where the address is known (the provider table's `card_link`).
fn source_link(links: &Links) -> Option<Markup> {
    registry::card_link(links).map(|line| match line.url {
        Some(url) => html! { a href=(url) { (line.text) } },
        None => html! { span { (line.text) } },
    })
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct BoardQuery {
    repo: Option<String>,
    source: Option<String>,
    needs_human: Option<String>,
    archived: Option<String>,
    q: Option<String>,
    at: Option<i64>,
}

/// The board's data: counts per column and the first cards of each, from the tasks read model.
pub async fn board_view(
    state: &AppState,
    filter: BoardFilter,
) -> Result<BoardView, task_rows::TasksError> {
    let store = state.log.store();
    // Trouble first: unless the filter asks for flagged tasks only, they leave their columns for a lane of their
    // own above the board, each with its reason, instead of sitting among queued work.
    let lane = !filter.needs_human;
    let base = TaskFilter {
        repo: filter.repo.clone(),
        source: filter.source.clone(),
        q: filter.q.clone(),
        needs_human: Some(false)
            .filter(|_| lane)
            .or(filter.needs_human.then_some(true)),
        ..TaskFilter::default()
    };
    let counts = task_rows::counts(store, &base).await?;
    let mut shown: Vec<Column> = BOARD_COLUMNS.to_vec();
    if filter.archived {
        shown.extend([Column::Cancelled, Column::Archived]);
    }
    let mut flagged = Lane::default();
    if lane {
        let only_flagged = TaskFilter {
            needs_human: Some(true),
            ..base.clone()
        };
        let flagged_counts = task_rows::counts(store, &only_flagged).await?;
        for column in &shown {
            let count = flagged_counts.get(column).copied().unwrap_or(0);
            flagged.count += count;
            let room = CARDS_PER_COLUMN.saturating_sub(flagged.rows.len());
            if count > 0 && room > 0 {
                flagged.rows.extend(
                    task_rows::list(
                        store,
                        &TaskFilter {
                            column: Some(*column),
                            limit: Some(room as u32),
                            ..only_flagged.clone()
                        },
                    )
                    .await?,
                );
            }
        }
    }
    let mut columns = Vec::new();
    for column in shown {
        let rows = if counts.get(&column).copied().unwrap_or(0) == 0 {
            Vec::new()
        } else {
            task_rows::list(
                store,
                &TaskFilter {
                    column: Some(column),
                    limit: Some(CARDS_PER_COLUMN as u32),
                    ..base.clone()
                },
            )
            .await?
        };
        columns.push((column, rows));
    }
    // The plans' items and the items' dependencies the cards name, in one read for those not on the board.
    let mut related = plan::Related::default();
    let cards = || columns.iter().flat_map(|(_, rows)| rows);
    let cards = || cards().chain(&flagged.rows);
    related.add(cards());
    let missing = related.missing(cards());
    if !missing.is_empty() {
        related.add(&task_rows::get_many(store, &missing).await?);
    }
    Ok(BoardView {
        counts,
        columns,
        flagged,
        filter,
        repos: task_rows::repos(store).await?,
        related,
        now: Utc::now(),
    })
}

pub(super) async fn board_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
    Query(query): Query<BoardQuery>,
) -> Response {
    caught_up(&state, query.at).await;
    let started = std::time::Instant::now();
    let nonempty = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let filter = BoardFilter {
        repo: nonempty(query.repo),
        source: nonempty(query.source),
        needs_human: query.needs_human.is_some(),
        archived: query.archived.is_some(),
        // Longer than a search takes: cut, not refused (a page, not an API; the box says what it searched).
        q: nonempty(query.q).map(|q| q.chars().take(task_rows::MAX_SEARCH).collect()),
    };
    let head = match rendered_at(&state).await {
        Ok(at) => at,
        Err(e) => return unavailable(e),
    };
    match board_view(&state, filter).await {
        Ok(view) => timed(
            started,
            page(
                StatusCode::OK,
                pages::layout(
                    &frame(&key, &session, "Board", Nav::Board, Some(head)),
                    board(&view),
                ),
            ),
        ),
        Err(e) => unavailable(e),
    }
}

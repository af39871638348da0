//! The board's queries: lists, counts, one task, its timeline (read from its stream), a link's task; the pull
//! requests merged in a range (the spend page's).

use std::collections::BTreeMap;
use std::str::FromStr;

use anyhow::{anyhow, Context};
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::Row;

use super::{decode_body, summarize, LinkKind, TaskFilter, TaskRow, TasksError, TimelineEntry};
use crate::eventlog::{sql, EventStore, StoredEvent};
use crate::tasks::{Column, Priority, TaskId};

const ROW_COLUMNS: &str = "task_id, number, board_column, title, repo, priority, needs_human,
    needs_human_reason, attempts, max_attempts, source, links, created_at, updated_at, version, last_position,
    state, behind, behind_head";

fn task_row<R>(row: &R) -> Result<TaskRow, TasksError>
where
    R: Row,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> DateTime<Utc>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let id: String = row.try_get("task_id")?;
    let corrupt = |why: String| TasksError::Corrupt {
        task: id.clone(),
        why,
    };
    let column: String = row.try_get("board_column")?;
    let priority: String = row.try_get("priority")?;
    let links: String = row.try_get("links")?;
    let state: String = row.try_get("state")?;
    let state: serde_json::Value =
        serde_json::from_str(&state).map_err(|e| corrupt(e.to_string()))?;
    let behind: Option<String> = row.try_get("behind")?;
    let behind_head: Option<String> = row.try_get("behind_head")?;
    // The host's word about a head the task was refreshed from since is old news (the poller read it late).
    let refreshed = state.get("refreshed").and_then(|r| r.as_str());
    let behind = behind.filter(|_| {
        refreshed.is_none_or(|to| {
            behind_head
                .as_deref()
                .is_some_and(|h| h.eq_ignore_ascii_case(to))
        })
    });
    Ok(TaskRow {
        id: TaskId::from_str(&id).map_err(|e| corrupt(e.to_string()))?,
        number: row.try_get("number")?,
        column: Column::from_str(&column).map_err(|e| corrupt(e.to_string()))?,
        title: row.try_get("title")?,
        repo: row.try_get("repo")?,
        priority: Priority::from_str(&priority).map_err(|e| corrupt(e.to_string()))?,
        needs_human: row.try_get("needs_human")?,
        needs_human_reason: row.try_get("needs_human_reason")?,
        attempts: row.try_get("attempts")?,
        max_attempts: row.try_get("max_attempts")?,
        source: row.try_get("source")?,
        links: serde_json::from_str(&links).map_err(|e| corrupt(e.to_string()))?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        version: row.try_get("version")?,
        last_position: row.try_get("last_position")?,
        state,
        behind,
    })
}

/// Tasks matching `filter`, most urgent first, then oldest first.
/// The search's condition on parameter `$n`: the task's search text (its title and spec, lower case, written by
/// the projector: `write::search_text`) holds the text.
fn search(n: u8) -> String {
    format!("(CAST(${n} AS text) IS NULL OR search_text LIKE ${n} ESCAPE '\\')")
}

/// A search's text as the LIKE pattern [`search`] binds: lower case, its own `%`, `_` and `\` taken literally.
pub(super) fn like_pattern(q: Option<&str>) -> Option<String> {
    let q = q.map(str::trim).filter(|q| !q.is_empty())?;
    let mut pattern = String::with_capacity(q.len() + 2);
    pattern.push('%');
    for c in q.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    Some(pattern)
}

pub async fn list(store: &EventStore, filter: &TaskFilter) -> Result<Vec<TaskRow>, TasksError> {
    let column = filter.column.map(|c| c.as_str());
    let pattern = like_pattern(filter.q.as_deref());
    crate::on_store!(store, |pool, backend| {
        // CAST(... AS text) rather than `$1::text`: the one spelling both accept, so a NULL filter matches all.
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM tasks
             WHERE (CAST($1 AS text) IS NULL OR board_column = $1) AND (CAST($2 AS text) IS NULL OR repo = $2)
               AND (CAST($3 AS text) IS NULL OR source = $3) AND (CAST($4 AS boolean) IS NULL OR needs_human = $4)
               AND {}
             ORDER BY priority_rank, created_at, number {}",
            search(5),
            if filter.limit.is_some() { "LIMIT $6" } else { "" }
        );
        let query = sqlx::query(&sql)
            .bind(column)
            .bind(&filter.repo)
            .bind(&filter.source)
            .bind(filter.needs_human)
            .bind(&pattern);
        let query = match filter.limit {
            Some(limit) => query.bind(i64::from(limit)),
            None => query,
        };
        query.fetch_all(pool).await?.iter().map(task_row).collect()
    })
}

/// How many tasks each column holds under `filter` (its `column` and `limit` ignored): one grouped query, for the
/// dashboard's column headers.
pub async fn counts(
    store: &EventStore,
    filter: &TaskFilter,
) -> Result<std::collections::BTreeMap<Column, usize>, TasksError> {
    let pattern = like_pattern(filter.q.as_deref());
    let rows: Vec<(String, i64)> = crate::on_store!(store, |pool, backend| {
        let sql = format!(
            "SELECT board_column, COUNT(*) FROM tasks
             WHERE (CAST($1 AS text) IS NULL OR repo = $1) AND (CAST($2 AS text) IS NULL OR source = $2)
               AND (CAST($3 AS boolean) IS NULL OR needs_human = $3) AND {}
             GROUP BY board_column",
            search(4)
        );
        sqlx::query_as(&sql)
            .bind(&filter.repo)
            .bind(&filter.source)
            .bind(filter.needs_human)
            .bind(&pattern)
            .fetch_all(pool)
            .await?
    });
    rows.into_iter()
        .map(|(column, n)| {
            let column = Column::ALL
                .into_iter()
                .find(|c| c.as_str() == column)
                .ok_or_else(|| TasksError::Corrupt {
                    task: "?".to_owned(),
                    why: format!("unknown column {column:?}"),
                })?;
            Ok((column, usize::try_from(n).unwrap_or(0)))
        })
        .collect()
}

/// The repositories that have tasks, sorted.
pub async fn repos(store: &EventStore) -> Result<Vec<String>, TasksError> {
    let sql = "SELECT DISTINCT repo FROM tasks ORDER BY repo";
    Ok(crate::on_store!(store, |pool, backend| sqlx::query_scalar(
        sql
    )
    .fetch_all(pool)
    .await?))
}

/// The pull requests merged per repository from the UTC day `since` on (of `repo`, or of every repository): each
/// counted once, however many tasks it completed (a combined plan's one pull request completes all its items).
pub async fn merged_pull_requests(
    store: &EventStore,
    since: NaiveDate,
    repo: Option<&str>,
) -> Result<BTreeMap<String, i64>, TasksError> {
    let since = since.format("%Y-%m-%d").to_string();
    let repo = repo.unwrap_or_default();
    let rows: Vec<(String, i64)> = crate::on_store!(store, |pool, backend| {
        sqlx::query_as(
            "SELECT repo, COUNT(DISTINCT pull_request) FROM task_merges
             WHERE day >= $1 AND ($2 = '' OR repo = $2) GROUP BY repo",
        )
        .bind(&since)
        .bind(repo)
        .fetch_all(pool)
        .await?
    });
    Ok(rows.into_iter().collect())
}

/// The pull requests merged from the UTC day `since` on, per agent profile: each merged task's pull request
/// counted for the profile of its last succeeded run (the `runs` read model's), once per profile however many
/// tasks it completed. A task with no succeeded run on record (landed by hand) counts for none.
pub async fn merged_by_profile(
    store: &EventStore,
    since: NaiveDate,
) -> Result<BTreeMap<String, i64>, TasksError> {
    let since = since.format("%Y-%m-%d").to_string();
    let rows: Vec<(String, i64)> = crate::on_store!(store, |pool, backend| {
        sqlx::query_as(
            "SELECT r.profile, COUNT(DISTINCT m.pull_request) FROM task_merges m
             JOIN runs r ON r.task_id = m.task_id AND r.state = 'succeeded' AND r.profile IS NOT NULL
             WHERE m.day >= $1 AND r.run_id = (
                 SELECT r2.run_id FROM runs r2 WHERE r2.task_id = m.task_id AND r2.state = 'succeeded'
                 ORDER BY r2.ended_at DESC, r2.run_id DESC LIMIT 1)
             GROUP BY r.profile",
        )
        .bind(&since)
        .fetch_all(pool)
        .await?
    });
    Ok(rows.into_iter().collect())
}

/// One task's row.
pub async fn get(store: &EventStore, id: TaskId) -> Result<Option<TaskRow>, TasksError> {
    let sql = format!("SELECT {ROW_COLUMNS} FROM tasks WHERE task_id = $1");
    let row = crate::on_store!(store, |pool, backend| sqlx::query(&sql)
        .bind(id.to_string())
        .fetch_optional(pool)
        .await?
        .map(|r| task_row(&r)));
    row.transpose()
}

/// The rows of `ids` that exist, in no particular order: one statement per [`sql::MAX_PARAMS`] ids (a page that
/// names a plan's items or a card's dependencies reads them at once, not one by one).
pub async fn get_many(store: &EventStore, ids: &[TaskId]) -> Result<Vec<TaskRow>, TasksError> {
    let keys: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let mut rows = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(sql::MAX_PARAMS) {
        let statement = format!(
            "SELECT {ROW_COLUMNS} FROM tasks WHERE task_id IN ({})",
            sql::list(1, chunk.len())
        );
        let found: Vec<TaskRow> = crate::on_store!(store, sql = statement, |pool, backend| {
            let mut query = sqlx::query(&statement).persistent(false);
            for key in chunk {
                query = query.bind(key.as_str());
            }
            query
                .fetch_all(pool)
                .await?
                .iter()
                .map(task_row)
                .collect::<Result<_, _>>()?
        });
        rows.extend(found);
    }
    Ok(rows)
}

/// Every event of a task, in log order, up to the version its row is at (so the timeline and the row agree);
/// empty for a task without a row. Read from the task's stream in the log, summarised here.
pub async fn timeline(store: &EventStore, id: TaskId) -> Result<Vec<TimelineEntry>, TasksError> {
    let Some(row) = get(store, id).await? else {
        return Ok(Vec::new());
    };
    store
        .read_stream(&id.stream())
        .await?
        .iter()
        .take_while(|e| e.stream_version.is_some_and(|v| v <= row.version))
        .map(|e| {
            timeline_entry(e).map_err(|e| TasksError::Corrupt {
                task: id.to_string(),
                why: format!("{e:#}"),
            })
        })
        .collect()
}

/// One task event as a timeline entry: what happened, when, who did it and what caused it.
pub fn timeline_entry(event: &StoredEvent) -> anyhow::Result<TimelineEntry> {
    let stream = event.stream.as_deref().unwrap_or_default();
    let stream_version = event
        .stream_version
        .ok_or_else(|| anyhow!("event at position {} is in no stream", event.position))?;
    let decoded = decode_body(stream, &event.event_type, &event.body)
        .with_context(|| format!("event at position {}", event.position))?;
    Ok(TimelineEntry {
        position: event.position,
        stream_version,
        event_type: event.event_type.clone(),
        at: decoded.at(),
        summary: summarize(&decoded),
        cause_event_id: event.meta.text("cause_event_id"),
        actor: event.meta.text("actor"),
    })
}

/// The task an external id belongs to (the first task that claimed it). A GitHub link (`owner/name#12`) is found
/// in any case too, as GitHub finds repositories: a webhook spells the repository as GitHub does, the link as the
/// configuration did. The exact spelling is looked up first (the key's index); any case only when it misses.
pub async fn task_for_link(
    store: &EventStore,
    kind: LinkKind,
    value: &str,
) -> Result<Option<TaskId>, TasksError> {
    let mut id: Option<String> = crate::on_store!(store, |pool, _backend| sqlx::query_scalar(
        "SELECT task_id FROM task_links WHERE kind = $1 AND value = $2"
    )
    .bind(kind.as_str())
    .bind(value)
    .fetch_optional(pool)
    .await?);
    if id.is_none()
        && matches!(
            kind,
            LinkKind::GithubIssue | LinkKind::GithubPr | LinkKind::GitlabMr
        )
    {
        id = crate::on_store!(store, |pool, _backend| sqlx::query_scalar(
            "SELECT task_id FROM task_links WHERE kind = $1 AND lower(value) = lower($2) \
             ORDER BY position LIMIT 1"
        )
        .bind(kind.as_str())
        .bind(value)
        .fetch_optional(pool)
        .await?);
    }
    id.map(|id| {
        TaskId::from_str(&id).map_err(|e| TasksError::Corrupt {
            task: id.clone(),
            why: e.to_string(),
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::like_pattern;

    #[test]
    fn a_search_is_lower_case_text_with_its_wildcards_escaped() {
        assert_eq!(
            like_pattern(Some("  Redirect ")).as_deref(),
            Some("%redirect%")
        );
        assert_eq!(
            like_pattern(Some(r"50%_a\b")).as_deref(),
            Some(r"%50\%\_a\\b%")
        );
        assert_eq!(like_pattern(Some("   ")), None);
        assert_eq!(like_pattern(None), None);
    }
}

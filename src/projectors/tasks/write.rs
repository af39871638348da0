//! Writing a batch's task rows and links. SQLite: multi-row `INSERT … VALUES` statements
//! (`eventlog::sql::values_rows`), as many rows to a statement as its parameter limit allows. Postgres: the same
//! rows as one column array each through `unnest`, the one batch write kept per backend because it is measurably
//! faster there (docs/benchmarks.md, "Tasks rebuild": the multi-row statement rebuilt ~10 % slower).

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::{BatchWrites, LinkWrite, MergeWrite, Write};
use crate::eventlog::sql::{rows_per_statement, values_rows};
use crate::projectors::ProjectorTx;
use crate::tasks::{Priority, Task};

pub(super) fn priority_rank(priority: Priority) -> i16 {
    match priority {
        Priority::Urgent => 0,
        Priority::High => 1,
        Priority::Normal => 2,
        Priority::Low => 3,
    }
}

/// The columns of a task row that come from its state.
pub(super) struct RowValues {
    pub(super) id: String,
    pub(super) number: i64,
    pub(super) column: &'static str,
    pub(super) title: String,
    pub(super) repo: String,
    pub(super) priority: &'static str,
    pub(super) rank: i16,
    pub(super) needs_human: bool,
    pub(super) reason: Option<String>,
    pub(super) attempts: i64,
    pub(super) max_attempts: i64,
    pub(super) links: String,
    pub(super) created_at: DateTime<Utc>,
    pub(super) updated_at: DateTime<Utc>,
    pub(super) state: String,
    pub(super) search_text: String,
}

pub(super) fn row_values(task: &Task) -> anyhow::Result<RowValues> {
    Ok(RowValues {
        id: task.id().to_string(),
        number: i64::try_from(task.id().number()).context("task number out of range")?,
        column: task.column().as_str(),
        title: task.title(),
        repo: task.repo().as_str().to_owned(),
        priority: task.priority().as_str(),
        rank: priority_rank(task.priority()),
        // A plan waits for a person when its own flag is up or one of its items' is.
        needs_human: task.waiting_for_human().is_some(),
        reason: task.waiting_for_human(),
        attempts: i64::from(task.attempts()),
        max_attempts: i64::from(task.max_attempts().get()),
        links: serde_json::to_string(task.links())?,
        created_at: task.created_at(),
        updated_at: task.updated_at(),
        state: serde_json::to_string(task)?,
        search_text: search_text(task),
    })
}

/// What the board's search reads (`read::search`): the title, then the spec's task, scope and done-when, one per
/// line, lower case as the search's pattern is. Never the state's JSON, whose keys would match.
pub(super) fn search_text(task: &Task) -> String {
    let spec = task.spec();
    [
        task.title().as_str(),
        spec.task(),
        spec.scope(),
        spec.done_when(),
    ]
    .join("\n")
    .to_lowercase()
}

/// `source`, `number` and `created_at` are fixed at creation, so an update leaves them.
const UPSERT_SET: &str = "ON CONFLICT (task_id) DO UPDATE SET
    board_column = excluded.board_column, title = excluded.title, repo = excluded.repo,
    priority = excluded.priority, priority_rank = excluded.priority_rank, needs_human = excluded.needs_human,
    needs_human_reason = excluded.needs_human_reason, attempts = excluded.attempts,
    max_attempts = excluded.max_attempts, links = excluded.links, updated_at = excluded.updated_at,
    version = excluded.version, last_position = excluded.last_position, state = excluded.state,
    search_text = excluded.search_text";

/// The `tasks` columns a write sets, in the order `write_tasks` binds them (and `write_postgres_tasks` lists its
/// arrays).
pub(super) const TASK_COLUMNS: &str = "task_id, number, board_column, title, repo, priority, priority_rank, needs_human,
    needs_human_reason, attempts, max_attempts, source, links, created_at, updated_at, version, last_position, state,
    search_text";
pub(super) const TASK_COLUMN_COUNT: usize = 19;

/// The batch's task rows (one per task: `BatchWrites` folds a task's events) and its new links.
pub(super) async fn write(tx: &mut ProjectorTx, w: &BatchWrites) -> anyhow::Result<()> {
    // A value may repeat within a batch (one INSERT cannot touch a row twice on Postgres): links are in log
    // order, so the first one seen is its first claim, which ON CONFLICT keeps across batches too.
    let mut seen = std::collections::HashSet::with_capacity(w.links.len());
    let links: Vec<&LinkWrite> = w
        .links
        .iter()
        .filter(|l| seen.insert((l.kind, l.value.as_str())))
        .collect();
    // A task is completed once (done is closed); were it completed again, its last completion is the one kept, and
    // one INSERT may name it once: the batch's last of each task, in log order.
    let mut last = std::collections::HashMap::with_capacity(w.merges.len());
    for (i, m) in w.merges.iter().enumerate() {
        last.insert(m.task, i);
    }
    let merges: Vec<&MergeWrite> = w
        .merges
        .iter()
        .enumerate()
        .filter(|(i, m)| last.get(&m.task) == Some(i))
        .map(|(_, m)| m)
        .collect();
    // Rare (one row per merged pull request): one multi-row statement on both backends.
    for chunk in merges.chunks(rows_per_statement(5)) {
        write_merges(tx, chunk).await.context("writing merges")?;
    }
    if let ProjectorTx::Postgres(tx) = tx {
        if !w.tasks.is_empty() {
            write_postgres_tasks(tx, &w.tasks).await?;
        }
        if !links.is_empty() {
            write_postgres_links(tx, &links).await?;
        }
        return Ok(());
    }
    let rows = w
        .tasks
        .iter()
        .map(|t| Ok((t, row_values(&t.task)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for chunk in rows.chunks(rows_per_statement(TASK_COLUMN_COUNT)) {
        write_tasks(tx, chunk).await.context("writing tasks")?;
    }
    for chunk in links.chunks(rows_per_statement(4)) {
        write_links(tx, chunk).await.context("writing links")?;
    }
    Ok(())
}

/// One statement for up to `rows_per_statement` rows. Not kept prepared: its text varies with the row count,
/// and a prepared statement per batch size would churn the connection's statement cache.
async fn write_tasks(
    tx: &mut ProjectorTx,
    rows: &[(&Write, RowValues)],
) -> Result<(), sqlx::Error> {
    let statement = format!(
        "INSERT INTO tasks ({TASK_COLUMNS}) VALUES {} {UPSERT_SET}",
        values_rows(rows.len(), TASK_COLUMN_COUNT)
    );
    on_tx!(tx, sql = statement, |conn| {
        let mut query = sqlx::query(&statement).persistent(false);
        for (t, r) in rows {
            query = query
                .bind(r.id.as_str())
                .bind(r.number)
                .bind(r.column)
                .bind(r.title.as_str())
                .bind(r.repo.as_str())
                .bind(r.priority)
                .bind(r.rank)
                .bind(r.needs_human)
                .bind(r.reason.as_deref())
                .bind(r.attempts)
                .bind(r.max_attempts)
                // An update never writes it (UPSERT_SET); a new row always has it.
                .bind(t.source.unwrap_or("api"))
                .bind(r.links.as_str())
                .bind(r.created_at)
                .bind(r.updated_at)
                .bind(t.version)
                .bind(t.last_position)
                .bind(r.state.as_str())
                .bind(r.search_text.as_str());
        }
        query.execute(conn).await.map(|_| ())
    })
}

async fn write_links(tx: &mut ProjectorTx, links: &[&LinkWrite]) -> Result<(), sqlx::Error> {
    let statement = format!(
        "INSERT INTO task_links (kind, value, task_id, position) VALUES {}
         ON CONFLICT (kind, value) DO NOTHING",
        values_rows(links.len(), 4)
    );
    on_tx!(tx, sql = statement, |conn| {
        let mut query = sqlx::query(&statement).persistent(false);
        for l in links {
            query = query
                .bind(l.kind.as_str())
                .bind(l.value.as_str())
                .bind(l.task.to_string())
                .bind(l.position);
        }
        query.execute(conn).await.map(|_| ())
    })
}

async fn write_merges(tx: &mut ProjectorTx, merges: &[&MergeWrite]) -> Result<(), sqlx::Error> {
    let statement = format!(
        "INSERT INTO task_merges (task_id, repo, pull_request, day, merged_at) VALUES {}
         ON CONFLICT (task_id) DO UPDATE SET repo = excluded.repo, pull_request = excluded.pull_request,
            day = excluded.day, merged_at = excluded.merged_at",
        values_rows(merges.len(), 5)
    );
    on_tx!(tx, sql = statement, |conn| {
        let mut query = sqlx::query(&statement).persistent(false);
        for m in merges {
            query = query
                .bind(m.task.to_string())
                .bind(m.repo.as_str())
                .bind(m.pull_request.as_str())
                .bind(m.at.date_naive().format("%Y-%m-%d").to_string())
                .bind(m.at);
        }
        query.execute(conn).await.map(|_| ())
    })
}

/// The batch's task rows, one column array each.
async fn write_postgres_tasks(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    tasks: &[Write],
) -> anyhow::Result<()> {
    let n = tasks.len();
    let mut id = Vec::with_capacity(n);
    let mut number = Vec::with_capacity(n);
    let mut column = Vec::with_capacity(n);
    let mut title = Vec::with_capacity(n);
    let mut repo = Vec::with_capacity(n);
    let mut priority = Vec::with_capacity(n);
    let mut rank = Vec::with_capacity(n);
    let mut needs_human = Vec::with_capacity(n);
    let mut reason = Vec::with_capacity(n);
    let mut attempts = Vec::with_capacity(n);
    let mut max_attempts = Vec::with_capacity(n);
    let mut source = Vec::with_capacity(n);
    let mut links = Vec::with_capacity(n);
    let mut created_at = Vec::with_capacity(n);
    let mut updated_at = Vec::with_capacity(n);
    let mut version = Vec::with_capacity(n);
    let mut last_position = Vec::with_capacity(n);
    let mut state = Vec::with_capacity(n);
    let mut search_text = Vec::with_capacity(n);
    for t in tasks {
        let r = row_values(&t.task)?;
        id.push(r.id);
        number.push(r.number);
        column.push(r.column);
        title.push(r.title);
        repo.push(r.repo);
        priority.push(r.priority);
        rank.push(r.rank);
        needs_human.push(r.needs_human);
        reason.push(r.reason);
        attempts.push(r.attempts);
        max_attempts.push(r.max_attempts);
        // An update never writes it (UPSERT_SET); a new row always has it.
        source.push(t.source.unwrap_or("api"));
        links.push(r.links);
        created_at.push(r.created_at);
        updated_at.push(r.updated_at);
        version.push(t.version);
        last_position.push(t.last_position);
        state.push(r.state);
        search_text.push(r.search_text);
    }
    sqlx::query(&format!(
        "INSERT INTO tasks ({TASK_COLUMNS})
         SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::int2[], $8::bool[], $9::text[], $10::int8[], $11::int8[], $12::text[], $13::text[],
            $14::timestamptz[], $15::timestamptz[], $16::int8[], $17::int8[], $18::text[], $19::text[])
         {UPSERT_SET}"
    ))
    .bind(id)
    .bind(number)
    .bind(column)
    .bind(title)
    .bind(repo)
    .bind(priority)
    .bind(rank)
    .bind(needs_human)
    .bind(reason)
    .bind(attempts)
    .bind(max_attempts)
    .bind(source)
    .bind(links)
    .bind(created_at)
    .bind(updated_at)
    .bind(version)
    .bind(last_position)
    .bind(state)
    .bind(search_text)
    .execute(&mut **tx)
    .await
    .context("writing tasks")?;
    Ok(())
}

/// The batch's new links (each value's first claim only), one column array each.
async fn write_postgres_links(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    links: &[&LinkWrite],
) -> anyhow::Result<()> {
    let n = links.len();
    let mut kind = Vec::with_capacity(n);
    let mut value = Vec::with_capacity(n);
    let mut task = Vec::with_capacity(n);
    let mut position = Vec::with_capacity(n);
    for l in links {
        kind.push(l.kind.as_str());
        value.push(l.value.as_str());
        task.push(l.task.to_string());
        position.push(l.position);
    }
    sqlx::query(
        "INSERT INTO task_links (kind, value, task_id, position)
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[])
         ON CONFLICT (kind, value) DO NOTHING",
    )
    .bind(kind)
    .bind(value)
    .bind(task)
    .bind(position)
    .execute(&mut **tx)
    .await
    .context("writing links")?;
    Ok(())
}

//! A rebuild's rows into the emptied `tasks` and `task_links` on Postgres: `COPY … FROM STDIN` in the text
//! format, each row once (the fold made them), in place of an upsert per batch a task appears in. Values are the
//! batch path's (`write::row_values`); timestamps are written to the microsecond, truncated, as the driver binds
//! them.

use std::collections::HashMap;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::postgres::PgCopyIn;
use sqlx::{PgConnection, Postgres, Transaction};

use super::behind::Mark;
use super::write::{row_values, TASK_COLUMNS};
use super::LinkWrite;
use crate::tasks::{Task, TaskId};

/// Bytes buffered before they are sent.
const CHUNK: usize = 1 << 20;

/// One row of COPY's text format being built.
#[derive(Default)]
struct Rows {
    buf: Vec<u8>,
    fields: usize,
}

impl Rows {
    fn sep(&mut self) {
        if self.fields > 0 {
            self.buf.push(b'\t');
        }
        self.fields += 1;
    }

    /// A text value, with COPY's escapes (UTF-8's multi-byte sequences hold no ASCII byte, so bytewise is exact).
    fn text(&mut self, value: &str) -> &mut Self {
        self.sep();
        for b in value.bytes() {
            match b {
                b'\\' => self.buf.extend_from_slice(b"\\\\"),
                b'\t' => self.buf.extend_from_slice(b"\\t"),
                b'\n' => self.buf.extend_from_slice(b"\\n"),
                b'\r' => self.buf.extend_from_slice(b"\\r"),
                other => self.buf.push(other),
            }
        }
        self
    }

    fn null(&mut self) -> &mut Self {
        self.sep();
        self.buf.extend_from_slice(b"\\N");
        self
    }

    fn opt(&mut self, value: Option<&str>) -> &mut Self {
        match value {
            Some(v) => self.text(v),
            None => self.null(),
        }
    }

    fn int(&mut self, value: impl std::fmt::Display) -> &mut Self {
        self.text(&value.to_string())
    }

    fn at(&mut self, value: DateTime<Utc>) -> &mut Self {
        self.text(&value.to_rfc3339_opts(SecondsFormat::Micros, true))
    }

    fn end(&mut self) {
        self.buf.push(b'\n');
        self.fields = 0;
    }

    /// Sends what is buffered once it is big enough (`all`: whatever there is).
    async fn flush(
        &mut self,
        copy: &mut PgCopyIn<&mut PgConnection>,
        all: bool,
    ) -> Result<(), sqlx::Error> {
        if self.buf.len() >= CHUNK || (all && !self.buf.is_empty()) {
            copy.send(self.buf.as_slice()).await?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// A folded task's row, borrowed from the fold.
pub(super) struct FoldedRow<'a> {
    pub(super) task: &'a Task,
    pub(super) version: i64,
    pub(super) last_position: i64,
    pub(super) source: Option<&'static str>,
}

/// Every folded task's row, with its behind mark.
pub(super) async fn tasks(
    tx: &mut Transaction<'static, Postgres>,
    tasks: &[FoldedRow<'_>],
    marks: &HashMap<TaskId, Mark>,
) -> anyhow::Result<()> {
    let statement = format!("COPY tasks ({TASK_COLUMNS}, behind, behind_head) FROM STDIN");
    let mut copy = (**tx)
        .copy_in_raw(&statement)
        .await
        .context("starting COPY into tasks")?;
    let mut rows = Rows::default();
    for t in tasks {
        let r = row_values(t.task)?;
        let mark = marks.get(&t.task.id());
        rows.text(&r.id)
            .int(r.number)
            .text(r.column)
            .text(&r.title)
            .text(&r.repo)
            .text(r.priority)
            .int(r.rank)
            .text(if r.needs_human { "t" } else { "f" })
            .opt(r.reason.as_deref())
            .int(r.attempts)
            .int(r.max_attempts)
            .text(t.source.unwrap_or("api"))
            .text(&r.links)
            .at(r.created_at)
            .at(r.updated_at)
            .int(t.version)
            .int(t.last_position)
            .text(&r.state)
            .text(&r.search_text)
            .opt(mark.map(|(state, _)| state.as_str()))
            .opt(mark.map(|(_, head)| head.as_str()))
            .end();
        rows.flush(&mut copy, false)
            .await
            .context("copying tasks")?;
    }
    rows.flush(&mut copy, true).await.context("copying tasks")?;
    copy.finish().await.context("finishing COPY into tasks")?;
    Ok(())
}

/// Every link's first claim.
pub(super) async fn links(
    tx: &mut Transaction<'static, Postgres>,
    links: &[LinkWrite],
) -> anyhow::Result<()> {
    let mut copy = (**tx)
        .copy_in_raw("COPY task_links (kind, value, task_id, position) FROM STDIN")
        .await
        .context("starting COPY into task_links")?;
    let mut rows = Rows::default();
    for l in links {
        rows.text(l.kind.as_str())
            .text(&l.value)
            .text(&l.task.to_string())
            .int(l.position)
            .end();
        rows.flush(&mut copy, false)
            .await
            .context("copying links")?;
    }
    rows.flush(&mut copy, true).await.context("copying links")?;
    copy.finish()
        .await
        .context("finishing COPY into task_links")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_values_are_escaped_as_copy_reads_them() {
        let mut rows = Rows::default();
        rows.text("a\\b\tc\nd\re ü").null().int(-7).end();
        assert_eq!(rows.buf, b"a\\\\b\\tc\\nd\\re \xc3\xbc\t\\N\t-7\n".to_vec());
    }
}

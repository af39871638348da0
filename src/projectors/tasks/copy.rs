//! A rebuild's rows into the emptied `tasks` and `task_links` on Postgres: `COPY … FROM STDIN` in the binary
//! format, each row once (the fold made them), in place of an upsert per batch a task appears in. Binary, not
//! text: Postgres spent about half of a text COPY splitting lines and fields (`perf`, 2026-12-07), and the same
//! 98 MB of task rows loaded in 0.8–0.9 s binary against 1.5–1.7 s as text. Values are the batch path's
//! (`write::row_values`), each sent as the type of its column (binary COPY refuses any other); timestamps to the
//! microsecond, truncated, as the driver binds them.

use std::collections::HashMap;

use anyhow::{anyhow, Context};
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::postgres::PgCopyIn;
use sqlx::{PgConnection, Postgres, Transaction};

use super::behind::Mark;
use super::write::{row_values, TASK_COLUMNS, TASK_COLUMN_COUNT};
use super::LinkWrite;
use crate::tasks::{Task, TaskId};

/// Bytes buffered before they are sent.
const CHUNK: usize = 1 << 20;

/// The binary format's header: its signature, then a flags field and a header extension length, both zero.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The binary format's trailer: a tuple whose field count is -1.
const TRAILER: &[u8] = &(-1_i16).to_be_bytes();

/// Rows in COPY's binary format being built: each row its field count, then each field its length and bytes.
struct Rows {
    buf: Vec<u8>,
    /// Fields the current row declared, and how many it has so far.
    declared: usize,
    fields: usize,
    /// Set by a value the format cannot carry (a field of 2 GiB or more, a timestamp out of range): the row is
    /// refused at [`Rows::end`].
    unfit: Option<&'static str>,
}

impl Rows {
    fn new() -> Self {
        let mut buf = Vec::with_capacity(CHUNK + (64 << 10));
        buf.extend_from_slice(HEADER);
        Self {
            buf,
            declared: 0,
            fields: 0,
            unfit: None,
        }
    }

    /// Starts a row of `fields` fields.
    fn row(&mut self, fields: usize) -> &mut Self {
        let count = i16::try_from(fields).unwrap_or_else(|_| {
            self.unfit = Some("more fields than a row may have");
            0
        });
        self.buf.extend_from_slice(&count.to_be_bytes());
        self.declared = fields;
        self.fields = 0;
        self
    }

    fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.fields += 1;
        match i32::try_from(bytes.len()) {
            Ok(len) => {
                self.buf.extend_from_slice(&len.to_be_bytes());
                self.buf.extend_from_slice(bytes);
            }
            Err(_) => self.unfit = Some("a value of 2 GiB or more"),
        }
        self
    }

    /// A `text` value: its UTF-8 bytes, as they are.
    fn text(&mut self, value: &str) -> &mut Self {
        self.field(value.as_bytes())
    }

    fn null(&mut self) -> &mut Self {
        self.fields += 1;
        self.buf.extend_from_slice(&(-1_i32).to_be_bytes());
        self
    }

    fn opt(&mut self, value: Option<&str>) -> &mut Self {
        match value {
            Some(v) => self.text(v),
            None => self.null(),
        }
    }

    /// A `bigint`.
    fn int8(&mut self, value: i64) -> &mut Self {
        self.field(&value.to_be_bytes())
    }

    /// A `smallint`.
    fn int2(&mut self, value: i16) -> &mut Self {
        self.field(&value.to_be_bytes())
    }

    fn bool(&mut self, value: bool) -> &mut Self {
        self.field(&[u8::from(value)])
    }

    /// A `timestamptz`: microseconds since 2000-01-01 UTC, truncated toward zero as the driver's own encoding.
    fn at(&mut self, value: DateTime<Utc>) -> &mut Self {
        let micros = NaiveDate::from_ymd_opt(2000, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .and_then(|epoch| (value.naive_utc() - epoch).num_microseconds());
        match micros {
            Some(micros) => self.int8(micros),
            None => {
                self.unfit = Some("a timestamp out of range");
                self.null()
            }
        }
    }

    /// Ends the row: refused when a value did not fit or the fields are not the ones declared.
    fn end(&mut self) -> anyhow::Result<()> {
        if let Some(unfit) = self.unfit.take() {
            return Err(anyhow!("a row holds {unfit}"));
        }
        if self.fields != self.declared {
            return Err(anyhow!(
                "a row of {} fields declared {}",
                self.fields,
                self.declared
            ));
        }
        Ok(())
    }

    /// Sends what is buffered once it is big enough (`all`: whatever there is, and the trailer).
    async fn flush(
        &mut self,
        copy: &mut PgCopyIn<&mut PgConnection>,
        all: bool,
    ) -> Result<(), sqlx::Error> {
        if all {
            self.buf.extend_from_slice(TRAILER);
        }
        if self.buf.len() >= CHUNK || all {
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
    let statement =
        format!("COPY tasks ({TASK_COLUMNS}, behind, behind_head) FROM STDIN (FORMAT binary)");
    let mut copy = (**tx)
        .copy_in_raw(&statement)
        .await
        .context("starting COPY into tasks")?;
    let mut rows = Rows::new();
    for t in tasks {
        let r = row_values(t.task)?;
        let mark = marks.get(&t.task.id());
        rows.row(TASK_COLUMN_COUNT + 2)
            .text(&r.id)
            .int8(r.number)
            .text(r.column)
            .text(&r.title)
            .text(&r.repo)
            .text(r.priority)
            .int2(r.rank)
            .bool(r.needs_human)
            .opt(r.reason.as_deref())
            .int8(r.attempts)
            .int8(r.max_attempts)
            .text(t.source.unwrap_or("api"))
            .text(&r.links)
            .at(r.created_at)
            .at(r.updated_at)
            .int8(t.version)
            .int8(t.last_position)
            .text(&r.state)
            .text(&r.search_text)
            .opt(mark.map(|(state, _)| state.as_str()))
            .opt(mark.map(|(_, head)| head.as_str()))
            .end()
            .with_context(|| format!("task {}", r.id))?;
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
        .copy_in_raw("COPY task_links (kind, value, task_id, position) FROM STDIN (FORMAT binary)")
        .await
        .context("starting COPY into task_links")?;
    // In the primary key's order: each insert then lands at the index's right edge. Log order put them all over
    // it, and the same 154,000 links loaded in 0.33 s sorted against 0.56–0.78 s (2026-12-07).
    let mut sorted: Vec<&LinkWrite> = links.iter().collect();
    sorted.sort_unstable_by_key(|l| (l.kind.as_str(), l.value.as_str()));
    let mut rows = Rows::new();
    for l in sorted {
        rows.row(4)
            .text(l.kind.as_str())
            .text(&l.value)
            .text(&l.task.to_string())
            .int8(l.position)
            .end()
            .with_context(|| format!("the link {} {:?}", l.kind.as_str(), l.value))?;
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
    fn rows_are_encoded_as_copy_reads_binary_data() {
        let mut rows = Rows::new();
        let at = "2000-01-01T00:00:01.0000019Z"
            .parse::<DateTime<Utc>>()
            .unwrap();
        rows.row(6)
            .text("ü\t")
            .null()
            .int8(-7)
            .int2(3)
            .bool(true)
            .at(at)
            .end()
            .unwrap();
        let mut want = HEADER.to_vec();
        want.extend_from_slice(&[0, 6]);
        // Sent as they are: no escapes in the binary format.
        want.extend_from_slice(&[0, 0, 0, 3, 0xc3, 0xbc, b'\t']);
        want.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        want.extend_from_slice(&[0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf9]);
        want.extend_from_slice(&[0, 0, 0, 2, 0, 3]);
        want.extend_from_slice(&[0, 0, 0, 1, 1]);
        // 1.0000019 s after Postgres's epoch: 1,000,001 µs, the rest truncated.
        want.extend_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0, 0, 0x0f, 0x42, 0x41]);
        assert_eq!(rows.buf, want);
        assert_eq!(HEADER.len(), 19);
    }

    #[test]
    fn a_timestamp_before_postgres_epoch_is_negative() {
        let mut rows = Rows::new();
        let at = "1999-12-31T23:59:59Z".parse::<DateTime<Utc>>().unwrap();
        rows.row(1).at(at).end().unwrap();
        assert_eq!(rows.buf[HEADER.len() + 6..], (-1_000_000_i64).to_be_bytes());
    }

    #[test]
    fn a_row_with_other_fields_than_it_declared_is_refused() {
        let mut rows = Rows::new();
        let error = rows.row(3).text("a").int8(1).end().unwrap_err();
        assert_eq!(error.to_string(), "a row of 2 fields declared 3");
        // The next row starts clean.
        rows.row(1).text("b").end().unwrap();
    }
}

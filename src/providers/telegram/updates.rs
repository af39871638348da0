//! The `telegram_updates` loop: without a public URL (no `TELEGRAM_WEBHOOK_SECRET`, so no webhook), updates are
//! pulled with `getUpdates` instead, and land in the log exactly as webhook deliveries do (same parser, same
//! dedup on `update_id` per bot). The webhook is deleted first: Telegram serves one mode at a time, and so do we.
//!
//! The offset is the checkpoint `telegram_updates` (the last `update_id` appended), moved after the appends, so a
//! crash in between pulls those updates again and the dedup keeps each once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;

use crate::eventlog::EventLog;
use crate::providers::telegram::TelegramClient;

pub const TELEGRAM_UPDATES: &str = "telegram_updates";

/// What one poll did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct UpdatesProgress {
    pub received: u64,
    pub last_update_id: i64,
}

#[derive(Clone, Debug)]
pub struct TelegramUpdates {
    client: TelegramClient,
    log: EventLog,
    bot_id: Option<String>,
    /// How long one `getUpdates` waits for news.
    poll_s: u64,
    webhook_deleted: Arc<AtomicBool>,
}

impl TelegramUpdates {
    pub fn new(client: TelegramClient, log: EventLog, bot_id: Option<String>, poll_s: u64) -> Self {
        Self {
            client,
            log,
            bot_id,
            poll_s,
            webhook_deleted: Arc::default(),
        }
    }

    pub async fn tick(&self) -> anyhow::Result<UpdatesProgress> {
        if !self.webhook_deleted.load(Ordering::Relaxed) {
            self.client
                .delete_webhook()
                .await
                .context("deleting the webhook before polling")?;
            self.webhook_deleted.store(true, Ordering::Relaxed);
        }
        let store = self.log.store();
        let last = store
            .checkpoint(TELEGRAM_UPDATES)
            .await
            .context("reading the updates offset")?;
        let offset = if last > 0 { last + 1 } else { 0 };
        let updates = self
            .client
            .get_updates(offset, u32::try_from(self.poll_s).unwrap_or(25))
            .await
            .context("getUpdates")?;
        let mut progress = UpdatesProgress {
            last_update_id: last,
            ..UpdatesProgress::default()
        };
        for update in updates {
            let Some(id) = update["update_id"].as_i64() else {
                continue;
            };
            let body = Bytes::from(serde_json::to_vec(&update)?);
            let event = super::webhook::parse(body, self.bot_id.as_deref())
                .map_err(|e| anyhow::anyhow!("update {id}: {}", e.0))?;
            self.log
                .append(event)
                .await
                .with_context(|| format!("appending update {id}"))?;
            progress.received += 1;
            progress.last_update_id = progress.last_update_id.max(id);
        }
        if progress.last_update_id > last {
            store
                .advance_checkpoint(TELEGRAM_UPDATES, progress.last_update_id)
                .await
                .context("saving the updates offset")?;
        }
        Ok(progress)
    }
}

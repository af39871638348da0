//! A rebuild reads the log ahead of the transaction that applies it: one page applied, one waiting, one decoded,
//! one read.

use std::sync::Arc;

use super::{Prepared, Projector};
use crate::eventlog::{EventStore, StoreError, StoredEvent};

/// A page of the log read ahead of the transaction that applies it.
pub(super) struct ReadAhead {
    /// The position the page was read after: it is applied only by a transaction that finds the projector there.
    pub(super) after: i64,
    pub(super) events: Vec<StoredEvent>,
    pub(super) prepared: Option<Prepared>,
}

/// Reads the log page after page from position 0 until a page comes back empty (or the rebuild stops
/// listening), handing each on through a channel of one: one page applied, one waiting, one being decoded
/// (`Projector::prepare`, on a task of its own), one being read.
pub(super) async fn read_ahead(
    store: EventStore,
    projector: Arc<dyn Projector>,
    limit: i64,
    pages: tokio::sync::mpsc::Sender<Result<ReadAhead, StoreError>>,
) {
    let (read, to_decode) = tokio::sync::mpsc::channel(1);
    // Ends when the reader does (its sender dropped) or when the rebuild stops listening.
    tokio::spawn(decode(projector.clone(), to_decode, pages));
    let mut after = 0;
    loop {
        let page = store
            .read_after_with(after, limit, projector.bodies())
            .await;
        let next = match &page {
            Ok(events) => events.last().map(|e| e.position),
            Err(_) => None,
        };
        if read.send(page.map(|events| (after, events))).await.is_err() {
            return;
        }
        match next {
            Some(last) => after = last,
            None => return,
        }
    }
}

/// The pages read, decoded in order while the next one is read.
async fn decode(
    projector: Arc<dyn Projector>,
    mut read: tokio::sync::mpsc::Receiver<Result<(i64, Vec<StoredEvent>), StoreError>>,
    pages: tokio::sync::mpsc::Sender<Result<ReadAhead, StoreError>>,
) {
    while let Some(page) = read.recv().await {
        let page = page.map(|(after, events)| ReadAhead {
            after,
            prepared: projector.prepare(&events),
            events,
        });
        if pages.send(page).await.is_err() {
            return;
        }
    }
}

/// Stops the read-ahead task when the rebuild ends early (an error): it must not outlive the rebuild.
pub(super) struct AbortOnDrop(pub(super) tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

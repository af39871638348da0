//! A rebuild that folds the log in memory: a projector that offers a [`Fold`] gets every page of a rebuild from
//! position 0 folded into it, and its read model written once at the end (or when the fold says it holds enough),
//! instead of a transaction per batch that rewrites a row each time a batch touches it.
//!
//! The checkpoint stays truthful: it stays at 0 while the fold runs (the read model is empty, as a projector at 0
//! is), and the rows and the checkpoint's move to the last folded event commit in one transaction, under the
//! same compare-and-set as a batch. A crash mid-fold leaves the projector at 0 with an empty read model; another
//! instance that moved it meanwhile (a running `serve` beside `replay`) wins: the fold is dropped and the rebuild
//! goes on batch by batch from that instance's checkpoint, as it did before folds. What the fold did not take (it
//! was full) goes on batch by batch, as incremental projection does.

use futures::future::BoxFuture;
use tokio::sync::mpsc::Receiver;

use super::{
    commit, compare_and_set, lock_or_create_row, Prepared, ProjectionError, ProjectorTx, ReadAhead,
    RebuildProgress,
};
use crate::eventlog::{StoreError, StoredEvent};

/// A projector's read model folded in memory over a rebuild's pages.
pub trait Fold: Send {
    /// Folds one page (the next in log order) in; an error is an event's that the rebuild stops at.
    fn fold(&mut self, events: &[StoredEvent], prepared: Option<Prepared>) -> anyhow::Result<()>;
    /// Holds as much as it may: write now, and leave the rest to batches.
    fn full(&self) -> bool;
    /// Writes everything folded into the emptied read model, in the transaction that moves the checkpoint.
    fn write<'a>(self: Box<Self>, tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>>;
}

impl super::Projection {
    /// Folds the rebuild's pages from position 0 until the log's head (as the reader found it) or until the fold
    /// is full, then writes the read model and moves the checkpoint in one transaction. `done` is left at what
    /// was committed; the pages after it are still in `ahead`.
    pub(super) async fn fold_from_zero(
        &self,
        mut fold: Box<dyn Fold>,
        ahead: &mut Receiver<Result<ReadAhead, StoreError>>,
        done: &mut RebuildProgress,
        progress: &mut impl FnMut(RebuildProgress),
    ) -> Result<(), ProjectionError> {
        let name = self.projector.name();
        let (mut first, mut last, mut events) = (None, 0, 0_u64);
        while let Some(page) = ahead.recv().await {
            let page = page?;
            let (Some(from), Some(to)) = (page.events.first(), page.events.last()) else {
                // The reader found the head and stopped.
                break;
            };
            let (from, to) = (from.position, to.position);
            fold.fold(&page.events, page.prepared)
                .map_err(|error| ProjectionError::Failed {
                    name,
                    first: from,
                    last: to,
                    error,
                })?;
            first.get_or_insert(from);
            last = to;
            events += page.events.len() as u64;
            // Progress for the bar: folded, not committed yet.
            progress(RebuildProgress {
                position: to,
                head: done.head.max(to),
                events: done.events + events,
            });
            if fold.full() {
                break;
            }
        }
        let Some(first) = first else {
            return Ok(());
        };
        let ours = self.projector.version();
        let mut tx = self.begin().await?;
        if lock_or_create_row(&mut tx, name, ours).await? != (ours, 0) {
            // Another process projected meanwhile (a running `serve` beside `replay`): its batches are the read
            // model now. The fold is dropped and the rebuild goes on batch by batch from where that one stands.
            drop(tx);
            tracing::info!(
                projector = name,
                "the read model moved during the fold; going on batch by batch from its checkpoint"
            );
            return Ok(());
        }
        // Empty already (the rebuild's reset, and a projector at 0 holds nothing): cheap, and certain.
        self.reset_in(&mut tx).await?;
        fold.write(&mut tx)
            .await
            .map_err(|error| ProjectionError::Failed {
                name,
                first,
                last,
                error,
            })?;
        if !compare_and_set(&mut tx, name, ours, 0, last).await? {
            return Err(ProjectionError::Conflict { name, expected: 0 });
        }
        if self
            .inject_failure
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            drop(tx);
            return Err(ProjectionError::Injected { first, last });
        }
        commit(tx).await?;
        metrics::counter!("pidevops_projector_events_total", "projector" => name).increment(events);
        done.position = last;
        done.head = done.head.max(last);
        done.events += events;
        progress(*done);
        Ok(())
    }
}

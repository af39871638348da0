//! A rebuild's fold of the task board (`projectors/fold.rs`): every task event applied in memory with
//! `apply_event` (the batch path's own: `evolve`, the links and the merge it brings), the behind marks kept as
//! the batch path writes them (a mark for a task with no row yet is dropped), and each task's row and each link
//! written once at the end: Postgres with COPY into the emptied tables (`copy.rs`), SQLite with the batch path's
//! multi-row statements. Memory: at most `cap` tasks (the cache's 200,000 by default), checked after each page;
//! the pages after a full fold go batch by batch.

use std::collections::{HashMap, HashSet};

use anyhow::anyhow;
use futures::future::BoxFuture;

use super::behind::Mark;
use super::copy::FoldedRow;
use super::{
    apply_event, behind, decode_all, write, BatchWrites, Cache, Decoded, LinkKind, Write, CACHE_CAP,
};
use crate::eventlog::StoredEvent;
use crate::projectors::{Fold, Prepared, ProjectorTx};
use crate::tasks::{Task, TaskId};

pub(super) struct TaskFold {
    cache: Cache,
    cap: usize,
    /// Each task folded so far, as its row will be written; `order` is first-seen (log) order. Boxed and updated
    /// in place: a task is hundreds of bytes, and the map's growth and a remove and insert per event moved it
    /// (a tenth of the fold's thread, `perf`, 2026-12-06).
    tasks: HashMap<TaskId, Box<Folded>>,
    order: Vec<TaskId>,
    /// The links (each value's first claim, in log order) and merges (all, in log order) of every event so far.
    writes: BatchWrites,
    claimed: HashSet<(LinkKind, String)>,
    marks: HashMap<TaskId, Mark>,
}

/// A task as folded so far: its row's [`Write`] once the fold is written.
#[derive(Default)]
struct Folded {
    /// `None` only while an event is applied to it (`evolve` takes the task by value).
    task: Option<Task>,
    version: i64,
    last_position: i64,
    source: Option<&'static str>,
}

impl TaskFold {
    pub(super) fn new(cache: Cache, cap: usize) -> Self {
        Self {
            cache,
            cap,
            tasks: HashMap::new(),
            order: Vec::new(),
            writes: BatchWrites::default(),
            claimed: HashSet::new(),
            marks: HashMap::new(),
        }
    }

    fn fold_one(&mut self, d: &Decoded) -> anyhow::Result<()> {
        let order = &mut self.order;
        let folded = self.tasks.entry(d.task).or_insert_with(|| {
            order.push(d.task);
            Box::default()
        });
        let links = self.writes.links.len();
        let (task, created) = apply_event(folded.task.take(), folded.version, d, &mut self.writes)?;
        folded.task = Some(task);
        folded.version = d.version;
        folded.last_position = d.position;
        folded.source = created.or(folded.source);
        // Only a value's first claim is kept, as `ON CONFLICT DO NOTHING` keeps it across batches.
        let mut i = links;
        while i < self.writes.links.len() {
            let l = &self.writes.links[i];
            if self.claimed.insert((l.kind, l.value.clone())) {
                i += 1;
            } else {
                self.writes.links.remove(i);
            }
        }
        Ok(())
    }
}

impl Fold for TaskFold {
    fn fold(&mut self, events: &[StoredEvent], prepared: Option<Prepared>) -> anyhow::Result<()> {
        let decoded = match prepared.map(|p| p.downcast::<Vec<anyhow::Result<Decoded>>>()) {
            Some(Ok(decoded)) => *decoded,
            // Not ours or none: decode here.
            Some(Err(_)) | None => decode_all(events),
        };
        for d in decoded {
            self.fold_one(&d?)?;
        }
        // The page's last word per task, written after its events as a batch writes it: on a row that exists.
        for (task, mark) in behind::marks(events) {
            if !self.tasks.contains_key(&task) {
                continue;
            }
            match mark {
                Some(mark) => self.marks.insert(task, mark),
                None => self.marks.remove(&task),
            };
        }
        Ok(())
    }

    fn full(&self) -> bool {
        self.tasks.len() >= self.cap
    }

    fn write<'a>(self: Box<Self>, tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let TaskFold {
                cache,
                mut tasks,
                order,
                mut writes,
                marks,
                ..
            } = *self;
            let postgres = matches!(tx, ProjectorTx::Postgres(_));
            if let ProjectorTx::Postgres(pg) = tx {
                // Rows copied from the tasks where the fold holds them: each task is moved once, into the cache.
                let rows = order
                    .iter()
                    .map(|id| {
                        let folded = tasks.get(id).and_then(|f| {
                            Some(FoldedRow {
                                task: f.task.as_ref()?,
                                version: f.version,
                                last_position: f.last_position,
                                source: f.source,
                            })
                        });
                        folded.ok_or_else(|| anyhow!("{id}: folded but not held"))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                super::copy::tasks(pg, &rows, &marks).await?;
                super::copy::links(pg, &writes.links).await?;
                // Rare (one row per merged pull request): the batch path's statement.
                let merges = BatchWrites {
                    merges: std::mem::take(&mut writes.merges),
                    ..BatchWrites::default()
                };
                write(tx, &merges).await?;
            } else {
                // The batch path's statements, which take the rows they write.
                writes.tasks = order
                    .iter()
                    .map(|id| {
                        let folded = tasks.remove(id).and_then(|f| {
                            let Folded {
                                task,
                                version,
                                last_position,
                                source,
                            } = *f;
                            Some(Write {
                                task: task?,
                                version,
                                last_position,
                                source,
                            })
                        });
                        folded.ok_or_else(|| anyhow!("{id}: folded but not held"))
                    })
                    .collect::<anyhow::Result<_>>()?;
                write(tx, &writes).await?;
                let marks: Vec<(TaskId, Option<Mark>)> =
                    marks.into_iter().map(|(task, m)| (task, Some(m))).collect();
                behind::write(tx, &marks).await?;
            }
            // The next batches find their tasks here, as after a batch (trusted only at the row's version). Sized
            // once: growing a map of whole tasks moved each of them at every doubling.
            let mut cache = cache
                .lock()
                .map_err(|_| anyhow!("the task cache lock is poisoned"))?;
            cache.clear();
            cache.reserve(order.len().min(CACHE_CAP));
            if postgres {
                for id in order.iter().take(CACHE_CAP) {
                    if let Some(Folded {
                        task: Some(task),
                        version,
                        ..
                    }) = tasks.remove(id).map(|f| *f)
                    {
                        cache.insert(*id, (version, task));
                    }
                }
            } else {
                for w in writes.tasks.into_iter().take(CACHE_CAP) {
                    cache.insert(w.task.id(), (w.version, w.task));
                }
            }
            Ok(())
        })
    }
}

//! The follower: the one driver for every loop that applies each new event of the log once, in position order,
//! after its checkpoint — intake, reactions, each `effects:<provider>` loop and the relay. A follower says what
//! one event means ([`Follower::handle`]); this file decides, the same way for all of them:
//!
//! - **what is read**: pages of [`PAGE`] events after the checkpoint, with only the bodies the follower reads
//!   ([`Follower::bodies`]), read (and prepared: the relay encodes its messages there) one page ahead on a task of
//!   its own while the tick handles the page before;
//! - **when the checkpoint moves**: at the end of each page, before an event that must wait ([`Next::Wait`]), and
//!   when the tick hands back; never past an event that was not handled. A move is committed without waiting for
//!   the database's flush: one lost in a database crash hands the follower events again, as an error does;
//! - **what an error does**: it ends the tick and saves nothing more, so the next tick starts again at the saved
//!   checkpoint and handles the failed event again (and the events of its page before it: handlers are
//!   idempotent by key or by the task's state). An event is never skipped;
//! - **how long a tick runs**: [`TICK_BUDGET`], then it hands back, with [`Pace::Again`] when work is left.
//!
//! A tick that hands back at its budget leaves its reader running for the next tick, which follows at once: a long
//! catch-up is one stream of reads rather than one restart per tick. The next tick takes it over only if it starts
//! exactly where this one stopped, short of the log's end (events are immutable and commit in position order, so
//! what was read ahead is what it would read). "Caught up" is decided only by a read made during the tick.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::mpsc;

use super::Pace;
use crate::eventlog::{Bodies, EventStore, StoreError, StoredEvent};

/// Events per read, and per checkpoint move.
pub const PAGE: i64 = 200;

/// How long a tick handles events before it hands the loop back: the 150 ms reactions and effects used (intake and
/// the relay used one interval). Fixed rather than an interval, so it is one policy whatever a loop's interval: a
/// tick ends far inside its loop's stale threshold; a lost lease or a shutdown is noticed between two ticks; each
/// hand-back saves the checkpoint, which bounds what a crash repeats; and a backlog pays little for it, since the
/// next tick follows at once and takes over the reader this one left running.
pub const TICK_BUDGET: Duration = Duration::from_millis(150);

/// What handling one event came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Handled: the checkpoint may move past it.
    Done,
    /// Not yet (a retry time, a run still recording): the tick ends before it, the checkpoint stays before it, and
    /// a later tick handles it again. Says why, for `/health`.
    Wait(String),
}

/// Which bodies a follower reads ([`Follower::bodies`]); every other event arrives with an empty one.
#[derive(Clone)]
pub enum Wanted {
    /// Chosen by the database as it reads the page.
    Filtered(Bodies),
    /// Chosen by an event's source and type once the page's headers are read; the picked bodies follow in one
    /// more read, made only when the page has any.
    Picked(Pick),
}

/// Whether a follower reads the body of an event of this source and type.
pub type Pick = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

impl From<Bodies> for Wanted {
    fn from(bodies: Bodies) -> Self {
        Self::Filtered(bodies)
    }
}

/// The reader's side of a follower: per-event work done ahead of the tick, on the reader task.
pub trait Prepare: Clone + Send + Sync + 'static {
    type Item: Send + 'static;
    fn prepare(&self, event: StoredEvent) -> anyhow::Result<Self::Item>;
}

/// Hands the stored event on as it is: what every follower but the relay reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsStored;

impl Prepare for AsStored {
    type Item = StoredEvent;
    fn prepare(&self, event: StoredEvent) -> anyhow::Result<StoredEvent> {
        Ok(event)
    }
}

/// A loop that applies each new event of the log, checkpointed.
pub trait Follower: Send + Sync {
    type Prepare: Prepare;
    /// What one tick counts (created, ignored, published, …), for its `/health` detail.
    type Tally: Default + Send;

    /// The checkpoint's name.
    fn checkpoint(&self) -> &str;

    fn prepare(&self) -> Self::Prepare;

    /// The bodies [`Follower::handle`] reads; every other event arrives with an empty one. Most followers act on a
    /// few of pidevops's own streams, and shipping every 28 KB webhook body to each of them was a fifth of the
    /// service's CPU under a 64-sender ingest.
    fn bodies(&self) -> Wanted {
        Bodies::All.into()
    }

    /// Handles one event, in position order. An error ends the tick (see the module doc).
    fn handle(
        &self,
        item: &<Self::Prepare as Prepare>::Item,
        tally: &mut Self::Tally,
    ) -> impl Future<Output = anyhow::Result<Next>> + Send;

    /// Where the tick starts: the last position handled. The relay asks the bus instead.
    fn start(&self, store: &EventStore) -> impl Future<Output = anyhow::Result<i64>> + Send {
        async move {
            store
                .checkpoint(self.checkpoint())
                .await
                .with_context(|| format!("reading the {} checkpoint", self.checkpoint()))
        }
    }

    /// Records that everything up to `position` is handled.
    fn save(
        &self,
        store: &EventStore,
        position: i64,
    ) -> impl Future<Output = anyhow::Result<()>> + Send {
        async move {
            // Unflushed: a move lost in a database crash only hands the follower events again (see the module doc).
            store
                .advance_checkpoint_unflushed(self.checkpoint(), position)
                .await
                .with_context(|| format!("saving the {} checkpoint", self.checkpoint()))?;
            Ok(())
        }
    }
}

/// What one tick did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Followed<T> {
    /// The last position handled (and saved).
    pub position: i64,
    pub tally: T,
    /// The tick stopped before an event that must wait, and why.
    pub waiting: Option<String>,
    /// The tick stopped at its budget with work left: the loop goes again without resting.
    pub out_of_time: bool,
}

impl<T> Followed<T> {
    pub fn pace(&self) -> Pace {
        Pace::again_if(self.out_of_time)
    }
}

/// The driver's state for one follower: its budget and the reader a tick left running. Cheap to clone (clones
/// share the reader).
pub struct Follow<I> {
    budget: Duration,
    reading: Arc<Mutex<Option<Reading<I>>>>,
}

impl<I> Clone for Follow<I> {
    fn clone(&self) -> Self {
        Self {
            budget: self.budget,
            reading: self.reading.clone(),
        }
    }
}

impl<I> std::fmt::Debug for Follow<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follow")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl<I> Default for Follow<I> {
    fn default() -> Self {
        Self {
            budget: TICK_BUDGET,
            reading: Arc::default(),
        }
    }
}

/// A page as the reader hands it over.
struct Page<I> {
    items: Vec<(i64, I)>,
    /// Fewer than [`PAGE`] events: the log ended here when it was read.
    short: bool,
    /// When the read began.
    read_at: Instant,
}

/// A reader and what it has handed over but the tick has not handled yet.
struct Reading<I> {
    /// The last position handled: the next item follows it.
    after: i64,
    pending: VecDeque<(i64, I)>,
    /// The page `pending` came from was short (the log's end as of `read_at`): once it is handled, read again.
    short: bool,
    read_at: Instant,
    pages: mpsc::Receiver<anyhow::Result<Page<I>>>,
    _reader: AbortOnDrop,
}

impl<I: Send + 'static> Reading<I> {
    fn spawn<F>(store: &EventStore, follower: &F, after: i64) -> Self
    where
        F: Follower,
        F::Prepare: Prepare<Item = I>,
    {
        // One page ready while the tick handles another and the reader reads a third.
        let (tx, pages) = mpsc::channel(1);
        let reader = tokio::spawn(read_ahead(
            store.clone(),
            follower.prepare(),
            follower.bodies(),
            after,
            tx,
        ));
        Self {
            after,
            pending: VecDeque::new(),
            short: false,
            read_at: Instant::now(),
            pages,
            _reader: AbortOnDrop(reader.abort_handle()),
        }
    }
}

impl<I: Send + 'static> Follow<I> {
    /// A tick hands back once it has worked this long (checked after every event, and while waiting for a read).
    pub fn with_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// The same budget, with no reader left running (for a follower that starts over under another checkpoint).
    pub fn restarted(&self) -> Self {
        Self {
            budget: self.budget,
            reading: Arc::default(),
        }
    }

    /// One tick: handles what was committed after the follower's start, page by page, until it is caught up, an
    /// event must wait, or the budget is spent.
    pub async fn tick<F>(
        &self,
        store: &EventStore,
        follower: &F,
    ) -> anyhow::Result<Followed<F::Tally>>
    where
        F: Follower,
        F::Prepare: Prepare<Item = I>,
    {
        let start = follower.start(store).await?;
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + self.budget);
        // A reader is taken over only in the middle of a backlog: near the end of the log a fresh read costs one
        // page at most, and tells where the end is now.
        let left = self.lock().take().filter(|r| r.after == start && !r.short);
        let mut reading = left.unwrap_or_else(|| Reading::spawn(store, follower, start));
        let mut done = Followed {
            position: start,
            tally: F::Tally::default(),
            waiting: None,
            out_of_time: false,
        };
        let mut saved = start;
        loop {
            if reading.pending.is_empty() {
                if reading.short {
                    // The end of the log as an earlier tick read it: look again.
                    reading = Reading::spawn(store, follower, done.position);
                }
                // A slow read ends the tick at its budget too, once the tick has handled something: every tick
                // that finds work moves on.
                let next = if done.position > start {
                    tokio::time::timeout_at(deadline, reading.pages.recv()).await
                } else {
                    Ok(reading.pages.recv().await)
                };
                let page = match next {
                    Ok(Some(page)) => page?,
                    Ok(None) => {
                        anyhow::bail!("the log reader of {} stopped", follower.checkpoint())
                    }
                    Err(_) => {
                        self.hand_back(store, follower, &mut done, saved, reading)
                            .await?;
                        return Ok(done);
                    }
                };
                reading.pending = page.items.into();
                reading.short = page.short;
                reading.read_at = page.read_at;
            }
            while let Some((position, item)) = reading.pending.pop_front() {
                if let Next::Wait(why) = follower.handle(&item, &mut done.tally).await? {
                    if done.position > saved {
                        follower.save(store, done.position).await?;
                    }
                    done.waiting = Some(why);
                    return Ok(done);
                }
                done.position = position;
                if Instant::now() >= started + self.budget
                    && !(reading.pending.is_empty() && reading.short && reading.read_at >= started)
                {
                    self.hand_back(store, follower, &mut done, saved, reading)
                        .await?;
                    return Ok(done);
                }
            }
            // The end of a page.
            if done.position > saved {
                follower.save(store, done.position).await?;
                saved = done.position;
            }
            // Caught up, as of a read made during this tick; an end read before it is looked at again above.
            if reading.short && reading.read_at >= started {
                return Ok(done);
            }
        }
    }

    /// Out of time with work left: saves, and keeps the reader for the next tick.
    async fn hand_back<F: Follower>(
        &self,
        store: &EventStore,
        follower: &F,
        done: &mut Followed<F::Tally>,
        saved: i64,
        mut reading: Reading<I>,
    ) -> anyhow::Result<()> {
        if done.position > saved {
            follower.save(store, done.position).await?;
        }
        done.out_of_time = true;
        reading.after = done.position;
        *self.lock() = Some(reading);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Reading<I>>> {
        // Only ever replaced whole, so a panic while holding it cannot leave it half-written.
        self.reading.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads the log after `after` page by page, prepares each event, and hands the pages on in position order until
/// a short page (the log's end as of that read), an error (passed on, then it ends) or the tick stops listening.
async fn read_ahead<P: Prepare>(
    store: EventStore,
    prepare: P,
    bodies: Wanted,
    mut after: i64,
    pages: mpsc::Sender<anyhow::Result<Page<P::Item>>>,
) {
    loop {
        let read_at = Instant::now();
        let events = match read_page(&store, after, &bodies).await {
            Ok(events) => events,
            Err(e) => {
                let _ = pages
                    .send(Err(anyhow::Error::new(e).context("reading the log")))
                    .await;
                return;
            }
        };
        let short = events.len() < PAGE as usize;
        let mut items = Vec::with_capacity(events.len());
        let mut failed = None;
        for event in events {
            let position = event.position;
            match prepare.prepare(event) {
                Ok(item) => items.push((position, item)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some((last, _)) = items.last() {
            after = *last;
        }
        let page = Page {
            items,
            // A page cut short by a failed preparation is not the log's end: its error follows.
            short: short && failed.is_none(),
            read_at,
        };
        if pages.send(Ok(page)).await.is_err() {
            return;
        }
        if let Some(error) = failed {
            let _ = pages.send(Err(error)).await;
            return;
        }
        if short {
            return;
        }
    }
}

/// A page after `after`, with the bodies `wanted`.
async fn read_page(
    store: &EventStore,
    after: i64,
    wanted: &Wanted,
) -> Result<Vec<StoredEvent>, StoreError> {
    let pick = match wanted {
        Wanted::Filtered(bodies) => return store.read_after_with(after, PAGE, *bodies).await,
        Wanted::Picked(pick) => pick,
    };
    let mut events = store.read_after_with(after, PAGE, Bodies::None).await?;
    let picked: Vec<i64> = events
        .iter()
        .filter(|e| pick(&e.source, &e.event_type))
        .map(|e| e.position)
        .collect();
    if picked.is_empty() {
        return Ok(events);
    }
    let mut bodies: HashMap<i64, Vec<u8>> = store.bodies_at(&picked).await?.into_iter().collect();
    for event in &mut events {
        if let Some(body) = bodies.remove(&event.position) {
            event.body = body;
        }
    }
    Ok(events)
}

/// Stops the reader when its tick (or the reader kept for the next tick) is dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{EventType, NewEvent, Source};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Records what it handles; waits once at `wait_at` and fails once at `fail_at`.
    #[derive(Default)]
    struct Recorder {
        handled: Mutex<Vec<i64>>,
        wait_at: Option<i64>,
        waited: AtomicBool,
        fail_at: Option<i64>,
        failed: AtomicBool,
    }

    impl Follower for Recorder {
        type Prepare = AsStored;
        type Tally = u64;

        fn checkpoint(&self) -> &str {
            "recorder"
        }

        fn prepare(&self) -> AsStored {
            AsStored
        }

        async fn handle(&self, event: &StoredEvent, tally: &mut u64) -> anyhow::Result<Next> {
            if Some(event.position) == self.wait_at && !self.waited.swap(true, Ordering::SeqCst) {
                return Ok(Next::Wait("not yet".to_owned()));
            }
            if Some(event.position) == self.fail_at && !self.failed.swap(true, Ordering::SeqCst) {
                anyhow::bail!("failed at {}", event.position);
            }
            self.handled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(event.position);
            *tally += 1;
            Ok(Next::Done)
        }
    }

    async fn log_of(events: i64) -> (tempfile::TempDir, EventStore) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let url = crate::config::DatabaseUrl::Sqlite(format!(
            "sqlite://{}",
            dir.path().join("follow.db").display()
        ));
        let store = EventStore::connect(&url, 4).await.expect("sqlite");
        store.migrate().await.expect("migrations");
        let stop = tokio_util::sync::CancellationToken::new();
        let (log, _appender) =
            crate::eventlog::EventLog::start(store.clone(), Duration::from_secs(5), stop.clone());
        for n in 0..events {
            log.append(NewEvent::new(
                Source::Github,
                EventType::new(Source::Github, &["push"]),
                format!("d-{n}"),
                "application/json",
                bytes::Bytes::from_static(b"{}"),
            ))
            .await
            .expect("appended");
        }
        stop.cancel();
        (dir, store)
    }

    #[tokio::test]
    async fn a_wait_and_an_error_retry_the_same_event_and_nothing_is_skipped() {
        let (_dir, store) = log_of(450).await;
        let follower = Recorder {
            wait_at: Some(230),
            fail_at: Some(260),
            ..Recorder::default()
        };
        let follow = Follow::default().with_budget(Duration::from_secs(60));

        let waited = follow.tick(&store, &follower).await.expect("a tick");
        assert_eq!((waited.position, waited.tally), (229, 229));
        assert_eq!(waited.waiting.as_deref(), Some("not yet"));
        assert_eq!(store.checkpoint("recorder").await.expect("read"), 229);

        let failed = follow.tick(&store, &follower).await;
        assert!(failed.is_err(), "{failed:?}");
        // Nothing saved past the last page end: the failed event's page (from 230) is handled again.
        assert_eq!(store.checkpoint("recorder").await.expect("read"), 229);

        let done = follow.tick(&store, &follower).await.expect("a tick");
        assert_eq!(done.position, 450);
        assert!(!done.out_of_time && done.waiting.is_none());
        assert_eq!(store.checkpoint("recorder").await.expect("read"), 450);
        let handled = follower.handled.lock().expect("not poisoned").clone();
        let mut once: Vec<i64> = handled.clone();
        once.sort_unstable();
        once.dedup();
        assert_eq!(once, (1..=450).collect::<Vec<_>>(), "none skipped");
        assert_eq!(
            handled.len(),
            450 + (259 - 230 + 1),
            "only the failed event's page before it is handled twice"
        );
    }

    /// Records each event's body as the reader shipped it, asking for `bodies`.
    struct BodyRecorder {
        name: &'static str,
        bodies: Wanted,
        seen: Mutex<Vec<(String, Vec<u8>)>>,
    }

    impl Follower for BodyRecorder {
        type Prepare = AsStored;
        type Tally = ();

        fn checkpoint(&self) -> &str {
            self.name
        }

        fn prepare(&self) -> AsStored {
            AsStored
        }

        fn bodies(&self) -> Wanted {
            self.bodies.clone()
        }

        async fn handle(&self, event: &StoredEvent, _: &mut ()) -> anyhow::Result<Next> {
            let seen = (event.event_type.clone(), event.body.clone());
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(seen);
            Ok(Next::Done)
        }
    }

    #[tokio::test]
    async fn a_follower_is_shipped_only_the_bodies_it_asks_for() {
        let (_dir, store) = log_of(2).await;
        let stop = tokio_util::sync::CancellationToken::new();
        let (log, _appender) =
            crate::eventlog::EventLog::start(store.clone(), Duration::from_secs(5), stop.clone());
        for (n, stream) in [Some("task:T-1"), Some("run:r-1"), None]
            .into_iter()
            .enumerate()
        {
            let mut event = NewEvent::new(
                Source::Pidevops,
                EventType::new(Source::Pidevops, &["x"]),
                format!("p-{n}"),
                "application/json",
                bytes::Bytes::from(format!("{{\"n\":{n}}}")),
            );
            event.stream = stream.map(|s| (s.to_owned(), 1));
            log.append(event).await.expect("appended");
        }
        stop.cancel();

        let mut shipped = Vec::new();
        let runs: Pick = Arc::new(|source, _| source == "pidevops");
        let pushes: Pick = Arc::new(|_, event_type| event_type == "github.push");
        for (name, bodies) in [
            ("all", Bodies::All.into()),
            ("none", Bodies::None.into()),
            (
                "tasks",
                Bodies::Streams {
                    source: "pidevops",
                    stream_prefix: "task:",
                }
                .into(),
            ),
            ("ours", Bodies::Source("pidevops").into()),
            ("picked ours", Wanted::Picked(runs)),
            ("picked pushes", Wanted::Picked(pushes)),
        ] {
            let follower = BodyRecorder {
                name,
                bodies,
                seen: Mutex::default(),
            };
            let done = Follow::default()
                .tick(&store, &follower)
                .await
                .expect("a tick");
            assert_eq!(done.position, 5, "every event handled, bodies or not");
            let seen = follower.seen.into_inner().expect("not poisoned");
            shipped.push(seen.into_iter().map(|(_, body)| body).collect::<Vec<_>>());
        }
        let push = b"{}".to_vec();
        let [task, run, record] = [0, 1, 2].map(|n| format!("{{\"n\":{n}}}").into_bytes());
        let none = Vec::<u8>::new;
        assert_eq!(
            shipped[0],
            [
                push.clone(),
                push.clone(),
                task.clone(),
                run.clone(),
                record.clone()
            ]
        );
        assert_eq!(shipped[1], [none(), none(), none(), none(), none()]);
        assert_eq!(shipped[2], [none(), none(), task.clone(), none(), none()]);
        assert_eq!(shipped[3], [none(), none(), task, run, record]);
        assert_eq!(shipped[4], shipped[3]);
        assert_eq!(shipped[5], [push.clone(), push, none(), none(), none()]);
    }

    #[tokio::test]
    async fn a_tick_out_of_time_hands_back_and_the_next_goes_on_from_there() {
        let (_dir, store) = log_of(450).await;
        let follower = Recorder::default();
        let follow = Follow::default().with_budget(Duration::ZERO);
        let mut positions = Vec::new();
        loop {
            let followed = follow.tick(&store, &follower).await.expect("a tick");
            assert_eq!(
                store.checkpoint("recorder").await.expect("read"),
                followed.position
            );
            positions.push(followed.position);
            if followed.pace() == Pace::Rest {
                break;
            }
        }
        assert_eq!(positions, (1..=450).collect::<Vec<_>>(), "one event a tick");
        let handled = follower.handled.lock().expect("not poisoned").clone();
        assert_eq!(handled, (1..=450).collect::<Vec<_>>());
    }
}

//! Leases: singleton loops (the relay, projectors, later pollers and cron) run on one replica at a time.
//!
//! A lease is a row in the database with a holder and an expiry taken from the database's clock, so replicas with
//! skewed clocks agree. Every replica runs the `leases` loop: the holder renews, the others try to take over once
//! the row has expired. A row lives ¾ of the configured TTL and everyone retries every ⅙ of it, so a holder that
//! dies is replaced within the TTL; a holder tolerates three failed renewals in a row before it lets go.
//!
//! The holder believes it holds a lease only until `renewal sent + row lifetime` by its own monotonic clock,
//! which is never later than the database's expiry: when renewals stop succeeding it stops the loop's work at
//! that instant (`LeaseHandle::lost`), before anyone else can take over. A lease is an optimisation, not a lock
//! correctness depends on: checkpoints are compare-and-set and appends idempotent, which absorbs any overlap.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::watch;

use crate::eventlog::{EventStore, StoreError};

/// The `/health` loop that keeps this replica's leases.
pub const LEASES_LOOP: &str = "leases";

/// What `/health` shows about one lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseView {
    /// The replica holding it (`None`: nobody, or not known yet).
    pub holder: Option<String>,
    /// Whether that is this replica.
    pub held_here: bool,
    pub expires_at: Option<DateTime<Utc>>,
    /// Grows by one at each change of holder.
    pub token: Option<i64>,
}

/// One attempt's answer from the database.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Observed {
    holder: String,
    token: i64,
    expires_at: DateTime<Utc>,
}

/// The leases of one replica. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leases {
    store: EventStore,
    holder: String,
    ttl: Duration,
    inner: Arc<Mutex<BTreeMap<String, Entry>>>,
}

#[derive(Debug)]
struct Entry {
    /// Until when (monotonic) this replica may act as holder; `None` when it is not the holder.
    held_until: watch::Sender<Option<Instant>>,
    /// Whether this replica has tried for the lease yet (successfully or not): its loop waits for the first try
    /// before deciding it is a standby, so a lone replica never reports one.
    tried: watch::Sender<bool>,
    view: LeaseView,
}

/// A singleton loop's view of its lease.
#[derive(Clone, Debug)]
pub struct LeaseHandle {
    name: String,
    held_until: watch::Receiver<Option<Instant>>,
    tried: watch::Receiver<bool>,
}

impl LeaseHandle {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True while this replica holds the lease and its last renewal has not run out.
    pub fn is_held(&self) -> bool {
        self.held_until
            .borrow()
            .is_some_and(|until| Instant::now() < until)
    }

    /// Resolves once this replica has made its first attempt at the lease (or the leases are gone).
    pub async fn first_try(&self) {
        let mut tried = self.tried.clone();
        // An error means the leases were dropped: nothing will ever be attempted, so there is nothing to wait for.
        let _ = tried.wait_for(|tried| *tried).await;
    }

    /// Resolves as soon as the lease is not held here: at once if it is not, when a renewal finds another holder,
    /// or when the last successful renewal runs out.
    pub async fn lost(&self) {
        let mut rx = self.held_until.clone();
        loop {
            let until = *rx.borrow_and_update();
            match until {
                Some(until) if Instant::now() < until => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(until.into()) => {}
                        changed = rx.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                    }
                }
                _ => return,
            }
        }
    }
}

/// Taking a lease, on either backend after its own `VALUES` (the clocks differ): the holder renews it (the same
/// token), anyone takes an expired one (the token + 1), and the row as the statement left it is returned.
macro_rules! take_or_renew {
    () => {
        " ON CONFLICT (name) DO UPDATE SET
            holder = excluded.holder,
            token = CASE WHEN l.holder = excluded.holder THEN l.token ELSE l.token + 1 END,
            acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at
                               ELSE excluded.acquired_at END,
            renewed_at = excluded.renewed_at,
            expires_at = excluded.expires_at
         WHERE l.holder = excluded.holder OR l.expires_at < excluded.renewed_at
         RETURNING holder, token, expires_at"
    };
}

impl Leases {
    pub fn new(store: EventStore, holder: impl Into<String>, ttl: Duration) -> Self {
        Self {
            store,
            holder: holder.into(),
            ttl,
            inner: Arc::default(),
        }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// How long a lease row lives after each renewal: ¾ of the TTL (see the module comment).
    pub fn row_lifetime(&self) -> Duration {
        self.ttl.mul_f64(0.75)
    }

    /// How often the `leases` loop renews or tries to take over: ⅙ of the TTL.
    pub fn attempt_interval(&self) -> Duration {
        self.ttl / 6
    }

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<String, Entry>) -> R) -> R {
        // Each update is a whole-value assignment, so a poisoned lock holds nothing half-written.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Registers a lease this replica competes for; the `leases` loop tries for it from its next tick.
    pub fn register(&self, name: &str) -> LeaseHandle {
        self.with(|leases| {
            let entry = leases.entry(name.to_owned()).or_insert_with(|| Entry {
                held_until: watch::channel(None).0,
                tried: watch::channel(false).0,
                view: LeaseView {
                    holder: None,
                    held_here: false,
                    expires_at: None,
                    token: None,
                },
            });
            LeaseHandle {
                name: name.to_owned(),
                held_until: entry.held_until.subscribe(),
                tried: entry.tried.subscribe(),
            }
        })
    }

    /// What every registered lease looks like now, from memory.
    pub fn views(&self) -> BTreeMap<String, LeaseView> {
        self.with(|leases| {
            leases
                .iter()
                .map(|(name, entry)| {
                    let mut view = entry.view.clone();
                    view.held_here = entry
                        .held_until
                        .borrow()
                        .is_some_and(|until| Instant::now() < until);
                    (name.clone(), view)
                })
                .collect()
        })
    }

    /// One round: renew what this replica holds, try to take what has expired. Errors leave each lease to run
    /// out on its own clock.
    pub async fn tick(&self) -> anyhow::Result<()> {
        let names: Vec<String> = self.with(|leases| leases.keys().cloned().collect());
        let mut failures = Vec::new();
        for name in names {
            let sent = Instant::now();
            match self.try_acquire(&name).await {
                Ok(observed) => {
                    let mine = observed.holder == self.holder;
                    let until = mine.then(|| sent + self.row_lifetime());
                    self.with(|leases| {
                        if let Some(entry) = leases.get_mut(&name) {
                            let was_mine = entry.view.holder.as_deref() == Some(self.holder.as_str())
                                && entry.held_until.borrow().is_some();
                            if mine && !was_mine {
                                tracing::info!(lease = %name, token = observed.token, "lease acquired");
                            } else if !mine && was_mine {
                                tracing::warn!(lease = %name, holder = %observed.holder, "lease lost to another replica");
                            }
                            entry.held_until.send_replace(until);
                            entry.view = LeaseView {
                                holder: Some(observed.holder.clone()),
                                held_here: mine,
                                expires_at: Some(observed.expires_at),
                                token: Some(observed.token),
                            };
                        }
                    });
                    metrics::gauge!("pidevops_lease_held", "lease" => name.clone())
                        .set(f64::from(u8::from(mine)));
                }
                Err(error) => failures.push(format!("{name}: {error}")),
            }
            self.with(|leases| {
                if let Some(entry) = leases.get(&name) {
                    entry.tried.send_replace(true);
                }
            });
        }
        if failures.is_empty() {
            Ok(())
        } else {
            anyhow::bail!("lease round failed: {}", failures.join("; "))
        }
    }

    /// Gives up every lease held here (graceful shutdown), so another replica takes over at its next attempt
    /// instead of waiting for the expiry.
    pub async fn release_all(&self) {
        let held: Vec<String> = self.with(|leases| {
            leases
                .iter_mut()
                .filter(|(_, e)| e.held_until.borrow().is_some())
                .map(|(name, e)| {
                    e.held_until.send_replace(None);
                    name.clone()
                })
                .collect()
        });
        for name in held {
            if let Err(error) = self.release(&name).await {
                tracing::warn!(lease = %name, %error, "could not release a lease; it will expire");
            }
        }
    }

    async fn try_acquire(&self, name: &str) -> Result<Observed, StoreError> {
        let lifetime_ms = self.row_lifetime().as_millis() as i64;
        match &self.store {
            EventStore::Postgres(s) => {
                // clock_timestamp(): the database's clock at this statement, shared by every replica.
                let won: Option<(String, i64, DateTime<Utc>)> = sqlx::query_as(concat!(
                    "INSERT INTO leases AS l (name, holder, token, acquired_at, renewed_at, expires_at)
                     VALUES ($1, $2, 1, clock_timestamp(), clock_timestamp(),
                             clock_timestamp() + $3 * interval '1 millisecond')",
                    take_or_renew!()
                ),
                )
                .bind(name)
                .bind(&self.holder)
                .bind(lifetime_ms)
                .fetch_optional(s.pool())
                .await?;
                let (holder, token, expires_at) = match won {
                    Some(row) => row,
                    None => {
                        sqlx::query_as(
                            "SELECT holder, token, expires_at FROM leases WHERE name = $1",
                        )
                        .bind(name)
                        .fetch_one(s.pool())
                        .await?
                    }
                };
                Ok(Observed {
                    holder,
                    token,
                    expires_at,
                })
            }
            EventStore::Sqlite(s) => {
                // One machine, one clock.
                let now = Utc::now().timestamp_millis();
                let won: Option<(String, i64, i64)> = sqlx::query_as(concat!(
                    "INSERT INTO leases AS l (name, holder, token, acquired_at, renewed_at, expires_at)
                     VALUES (?1, ?2, 1, ?3, ?3, ?3 + ?4)",
                    take_or_renew!()
                ),
                )
                .bind(name)
                .bind(&self.holder)
                .bind(now)
                .bind(lifetime_ms)
                .fetch_optional(s.pool())
                .await?;
                let (holder, token, expires_ms) = match won {
                    Some(row) => row,
                    None => {
                        sqlx::query_as(
                            "SELECT holder, token, expires_at FROM leases WHERE name = ?1",
                        )
                        .bind(name)
                        .fetch_one(s.pool())
                        .await?
                    }
                };
                Ok(Observed {
                    holder,
                    token,
                    expires_at: DateTime::from_timestamp_millis(expires_ms).unwrap_or_default(),
                })
            }
        }
    }

    /// Expires the row rather than deleting it, so the fencing token keeps growing across holders.
    async fn release(&self, name: &str) -> Result<(), StoreError> {
        match &self.store {
            EventStore::Postgres(s) => {
                sqlx::query(
                    "UPDATE leases SET expires_at = clock_timestamp() - interval '1 millisecond'
                     WHERE name = $1 AND holder = $2",
                )
                .bind(name)
                .bind(&self.holder)
                .execute(s.pool())
                .await?;
            }
            EventStore::Sqlite(s) => {
                sqlx::query(
                    "UPDATE leases SET expires_at = ?3 - 1 WHERE name = ?1 AND holder = ?2",
                )
                .bind(name)
                .bind(&self.holder)
                .bind(Utc::now().timestamp_millis())
                .execute(s.pool())
                .await?;
            }
        }
        Ok(())
    }
}

/// Runs `work` only while `lease` is held here, and stops it the moment the lease is lost. Returns `None` when
/// the lease is not held (a standby replica), so the caller reports that rather than success.
pub async fn while_held<T>(
    lease: &LeaseHandle,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<Option<T>> {
    if !lease.is_held() {
        return Ok(None);
    }
    tokio::select! {
        result = work => result.map(Some),
        _ = lease.lost() => anyhow::bail!(
            "lost the {} lease mid-tick; the work stopped there and the new holder resumes from the checkpoint",
            lease.name()
        ),
    }
}

//! The core every command stands on: the settings, read and checked once; the database, connected and migrated;
//! and the log's appender. `serve` (`startup::build`), `pidevops worker` and every CLI command open one with
//! [`Core::open`], so how a process reaches its data is decided here and nowhere else.

use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::eventlog::{EventLog, EventStore};

/// How long closing waits for the appender to commit what it holds.
const APPENDER_GRACE: Duration = Duration::from_secs(10);

/// Connections for a one-shot CLI command: one to read, one for the appender.
pub const CLI_CONNECTIONS: u32 = 2;

/// An open store and its log. Close it with [`Core::close`] so appends in flight commit before the process ends.
pub struct Core {
    pub settings: Settings,
    pub store: EventStore,
    pub log: EventLog,
    appender_shutdown: CancellationToken,
    appender: JoinHandle<()>,
}

impl Core {
    /// Connects with the pool size the settings ask for, migrates and starts the appender.
    pub async fn open(settings: Settings) -> anyhow::Result<Self> {
        let connections = settings.max_db_connections;
        Self::open_with(settings, connections).await
    }

    /// The same for a command that only reads: the database must exist already ([`connect_existing`]).
    pub async fn open_for_cli_reading(settings: Settings) -> anyhow::Result<Self> {
        must_exist(&settings)?;
        Self::open_with(settings, CLI_CONNECTIONS).await
    }

    /// The same with a small pool: a CLI command does one thing and ends.
    pub async fn open_for_cli(settings: Settings) -> anyhow::Result<Self> {
        Self::open_with(settings, CLI_CONNECTIONS).await
    }

    async fn open_with(settings: Settings, connections: u32) -> anyhow::Result<Self> {
        let store = connect(&settings, connections).await?;
        store.migrate().await.context("applying migrations")?;
        let appender_shutdown = CancellationToken::new();
        let (log, appender) = EventLog::start(
            store.clone(),
            settings.append_timeout,
            appender_shutdown.clone(),
        );
        Ok(Self {
            settings,
            store,
            log,
            appender_shutdown,
            appender,
        })
    }

    /// Stops the appender once what it holds is committed (bounded by a grace period).
    pub async fn close(self) {
        self.appender_shutdown.cancel();
        let _ = tokio::time::timeout(APPENDER_GRACE, self.appender).await;
    }

    /// The parts, for a server that shuts its appender down itself, after its loops and requests.
    pub fn into_parts(
        self,
    ) -> (
        Settings,
        EventStore,
        EventLog,
        CancellationToken,
        JoinHandle<()>,
    ) {
        (
            self.settings,
            self.store,
            self.log,
            self.appender_shutdown,
            self.appender,
        )
    }
}

/// Connects to the configured database without migrating: for readers that must not change it (`events`).
/// Connects to a database that exists: a command that only reads (`task list`, `events`, `doctor`, …) never
/// creates one, nor its directory; a missing embedded file is an error naming it (a mistyped `DATABASE_URL`
/// would otherwise read an empty board).
pub async fn connect_existing(settings: &Settings, connections: u32) -> anyhow::Result<EventStore> {
    must_exist(settings)?;
    connect(settings, connections).await
}

/// An error naming the embedded database's file when it does not exist (nothing is made to find out).
pub fn must_exist(settings: &Settings) -> anyhow::Result<()> {
    if let crate::eventlog::DatabaseUrl::Sqlite(url) = &settings.database {
        if let Some(file) = crate::eventlog::SqliteStore::file_of(url)? {
            if !file.exists() {
                anyhow::bail!(
                    "there is no database at {} (DATABASE_URL {}): a command that only reads creates none; \
                     check the path, or start `pidevops serve` (or run `pidevops migrate`) to make it",
                    file.display(),
                    settings.database.redacted()
                );
            }
        }
    }
    Ok(())
}

pub async fn connect(settings: &Settings, connections: u32) -> anyhow::Result<EventStore> {
    EventStore::connect(&settings.database, connections)
        .await
        .with_context(|| format!("connecting to {}", settings.database.redacted()))
}

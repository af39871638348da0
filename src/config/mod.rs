//! Typed settings. The environment comes first (Railway injects `PORT` and `DATABASE_URL`), then an optional
//! `pidevops.toml` for structured settings. Secrets are wrapped so they never reach a log line or a `Debug` print.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

pub mod allow_hosts;
pub mod dispatch;
pub mod file;
pub mod plans;
pub mod presets;
pub mod profiles;
pub mod provider_env;
pub mod repo_env;
pub mod secret;

pub use file::FileConfig;
pub use provider_env::ProviderEnv;

/// Where the event log lives: declared with the log, which connects to it.
pub use crate::eventlog::url::{redact_password, DatabaseUrl};
pub use effective::effective;

pub use crate::telemetry::LogFormat;

/// A webhook source's secret, or the name of the variable that would hold it (so a refusal can name it).
#[derive(Clone, Debug)]
pub struct SourceSecret {
    pub variable: &'static str,
    pub value: Option<SecretString>,
}

impl SourceSecret {
    fn from_env(env: &Env, variable: &'static str) -> Self {
        Self {
            variable,
            value: env.secret(variable),
        }
    }

    pub fn is_set(&self) -> bool {
        self.value.is_some()
    }
}

/// Every provider's webhook secret, keyed by provider name (`github`).
#[derive(Clone, Debug)]
pub struct WebhookSecrets(BTreeMap<&'static str, SourceSecret>);

impl WebhookSecrets {
    fn from_env(env: &Env) -> Self {
        let secrets = crate::domain::registry::PROVIDERS
            .iter()
            .map(|p| (p.name, SourceSecret::from_env(env, p.webhook_secret)));
        Self(secrets.collect())
    }

    /// Sets (or, with `None`, unsets) the webhook secret of the provider named `provider`; `false` when no
    /// provider has that name.
    #[must_use]
    pub fn set(&mut self, provider: &str, value: Option<SecretString>) -> bool {
        match self.0.iter_mut().find(|(name, _)| **name == provider) {
            Some((_, secret)) => {
                secret.value = value;
                true
            }
            None => false,
        }
    }

    /// Whether the provider named `provider` has its webhook secret set.
    pub fn is_set(&self, provider: &str) -> bool {
        self.0.get(provider).is_some_and(SourceSecret::is_set)
    }
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// Address to listen on. Default `[::]` (dual-stack: IPv4 and IPv6), tests use `127.0.0.1`.
    pub bind: IpAddr,
    /// `PORT`; 0 lets the OS pick (tests).
    pub port: u16,
    pub database: DatabaseUrl,
    pub nats_url: Option<String>,
    /// Each provider's webhook secret, read from the variable the provider table names
    /// (`domain::registry::PROVIDERS`): a new provider's is read with no field here.
    pub webhook_secrets: WebhookSecrets,
    pub admin_token: Option<SecretString>,
    pub log_format: LogFormat,
    pub heartbeat_interval: Duration,
    /// Delay before a loop's first tick; short so a fresh start reports quickly.
    pub loop_startup_delay: Duration,
    /// How long a webhook waits for its event to commit before answering 503.
    pub append_timeout: Duration,
    pub max_db_connections: u32,
    pub config_file: Option<PathBuf>,
    /// `pidevops.toml`, parsed and checked once: its tables and the domain values built from them.
    pub file: FileConfig,
    /// The clock the time-driven loops (cron) read: the system's; tests advance it instead of waiting.
    pub clock: crate::domain::clock::Clock,
    /// The JetStream stream and subject prefix (tests use their own).
    pub bus: crate::bus::BusConfig,
    /// How often the relay looks for newly committed events.
    pub relay_interval: Duration,
    /// How often projectors look for newly committed events.
    pub projector_interval: Duration,
    /// The failover bound for singleton loops: a dead holder's loops resume on another replica within this.
    pub lease_ttl: Duration,
    /// This process's name in leases and `/health` (`PIDEVOPS_INSTANCE_ID`, else host, pid and a random tag).
    pub instance_id: String,
    /// `WORKSPACE_ROOT`: mirrors and per-attempt worktrees (default `./data/workspaces`).
    pub workspace_root: PathBuf,
    /// `PIDEVOPS_DATA_DIR`: what `serve` keeps of its own (the first run's admin token; default `./data`).
    pub data_dir: PathBuf,
    /// Each provider's own variables (its credential, its API's address, who may command), read and checked as
    /// the provider table declares them; each provider's folder makes its typed settings of them
    /// (`providers/<name>/settings.rs`). Tests point the API addresses at fakes.
    pub providers: ProviderEnv,
    /// `PIDEVOPS_PAUSED=1`: no new runs start (running ones finish).
    pub paused: bool,
    /// The process environment, for the variables an agent profile passes through (and `PATH`).
    pub env: Env,
}

mod effective;
mod variables;
pub use variables::{variables, variables_help};

/// The shortest `PIDEVOPS_ADMIN_TOKEN` accepted.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 24;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{field} is invalid: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("cannot read config file {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {source}")]
    ParseFile {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    /// Every mistake in the file, one a line, each naming its key.
    #[error("{}", file_errors(path, errors))]
    File {
        path: PathBuf,
        errors: file::FileErrors,
    },
}

fn file_errors(path: &Path, errors: &file::FileErrors) -> String {
    let lines: Vec<String> = errors
        .0
        .iter()
        .map(|error| format!("{}: {error}", path.display()))
        .collect();
    lines.join("\n")
}

/// The environment as a map, so settings can be built from the process or from a test's own variables.
#[derive(Clone, Default)]
pub struct Env(HashMap<String, String>);

/// Names only: the environment holds every secret the service has.
impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.0.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_tuple("Env").field(&names).finish()
    }
}

impl Env {
    pub fn from_process() -> Self {
        Self(std::env::vars().collect())
    }

    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    /// A value, with empty strings treated as unset (Railway and `.env` files often leave blanks).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    /// The same environment with a `.env` file's values over it, as `set -a && . ./.env && set +a` would leave
    /// the shell that starts `serve` (`doctor` reads it so), and a line saying what was read.
    pub fn with_env_file(mut self, path: &Path) -> (Self, String) {
        match read_env_file(path) {
            Ok(Some(pairs)) => {
                let names: Vec<String> = pairs.iter().map(|(k, _)| k.clone()).collect();
                self.0.extend(pairs);
                let line = format!(
                    "read {} ({} variable(s) over the environment: {}); serve reads no .env itself: start it \
                     with the file sourced (set -a && . ./.env && set +a)",
                    path.display(),
                    names.len(),
                    names.join(", ")
                );
                (self, line)
            }
            Ok(None) => (
                self,
                format!(
                    "not read: there is no {} here; only the process environment counts",
                    path.display()
                ),
            ),
            Err(e) => (
                self,
                format!(
                    "not read: {}: {e}; only the process environment counts",
                    path.display()
                ),
            ),
        }
    }

    /// The same environment with `key` set to `value` (`config check FILE` reads FILE as `PIDEVOPS_CONFIG`).
    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.0.insert(key.to_owned(), value.to_owned());
        self
    }

    fn secret(&self, key: &str) -> Option<SecretString> {
        self.get(key).map(|v| SecretString::from(v.to_owned()))
    }

    fn parse<T: std::str::FromStr>(&self, key: &'static str) -> Result<Option<T>, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        self.get(key)
            .map(|v| {
                v.parse::<T>().map_err(|e| ConfigError::Invalid {
                    field: key,
                    reason: format!("{v:?}: {e}"),
                })
            })
            .transpose()
    }

    fn seconds(&self, key: &'static str, default: f64) -> Result<Duration, ConfigError> {
        let secs = self.parse::<f64>(key)?.unwrap_or(default);
        if !(secs.is_finite() && secs > 0.0) {
            return Err(ConfigError::Invalid {
                field: key,
                reason: format!("{secs} is not a positive number of seconds"),
            });
        }
        Ok(Duration::from_secs_f64(secs))
    }
}

impl Settings {
    /// A provider's webhook secret (the provider table names its variable); `None` for pidevops's own source.
    pub fn webhook_secret(&self, source: crate::domain::Source) -> Option<&SourceSecret> {
        let provider = crate::domain::registry::of_source(source)?;
        self.webhook_secrets.0.get(provider.name)
    }

    pub fn from_process_env() -> Result<Self, ConfigError> {
        Self::from_env(&Env::from_process())
    }

    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let port = env.parse::<u16>("PORT")?.unwrap_or(8080);
        let bind = env
            .parse::<IpAddr>("PIDEVOPS_BIND")?
            .unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        let database = DatabaseUrl::parse(
            env.get("DATABASE_URL")
                .unwrap_or(DatabaseUrl::EMBEDDED_DEFAULT),
        )
        .map_err(|reason| ConfigError::Invalid {
            field: "DATABASE_URL",
            reason: reason.into(),
        })?;
        let log_format = match env.get("LOG_FORMAT") {
            None | Some("pretty") => LogFormat::Pretty,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    field: "LOG_FORMAT",
                    reason: format!("{other:?}: expected json or pretty"),
                })
            }
        };
        let max_db_connections = env
            .parse::<u32>("PIDEVOPS_DB_MAX_CONNECTIONS")?
            .unwrap_or(10);
        if max_db_connections < 2 {
            return Err(ConfigError::Invalid {
                field: "PIDEVOPS_DB_MAX_CONNECTIONS",
                reason: "needs at least 2 (one appender, one reader)".into(),
            });
        }
        let config_file = config_path(env);
        let file = match &config_file {
            Some(path) => read_config_file(path)?,
            None => FileConfig::default(),
        };
        let admin_token = env.secret("PIDEVOPS_ADMIN_TOKEN");
        // A short token could be guessed through the dashboard's sign-in; the length is never echoed.
        if admin_token
            .as_ref()
            .is_some_and(|t| t.expose_secret().chars().count() < MIN_ADMIN_TOKEN_CHARS)
        {
            return Err(ConfigError::Invalid {
                field: "PIDEVOPS_ADMIN_TOKEN",
                reason: format!(
                    "needs at least {MIN_ADMIN_TOKEN_CHARS} characters (try `openssl rand -hex 32`)"
                ),
            });
        }

        Ok(Self {
            clock: crate::domain::clock::Clock::system(),
            bind,
            port,
            database,
            nats_url: env.get("NATS_URL").map(str::to_owned),
            webhook_secrets: WebhookSecrets::from_env(env),
            admin_token,
            log_format,
            heartbeat_interval: env.seconds("PIDEVOPS_HEARTBEAT_INTERVAL_S", 15.0)?,
            loop_startup_delay: env.seconds("PIDEVOPS_LOOP_STARTUP_DELAY_S", 1.0)?,
            append_timeout: env.seconds("PIDEVOPS_APPEND_TIMEOUT_S", 10.0)?,
            max_db_connections,
            config_file,
            file,
            bus: bus_config(env)?,
            relay_interval: env.seconds("PIDEVOPS_RELAY_INTERVAL_S", 1.0)?,
            projector_interval: env.seconds("PIDEVOPS_PROJECTOR_INTERVAL_S", 1.0)?,
            lease_ttl: lease_ttl(env)?,
            instance_id: instance_id(env),
            workspace_root: PathBuf::from(env.get("WORKSPACE_ROOT").unwrap_or("./data/workspaces")),
            data_dir: PathBuf::from(env.get("PIDEVOPS_DATA_DIR").unwrap_or("./data")),
            providers: ProviderEnv::from_env(env)?,
            paused: match env.get("PIDEVOPS_PAUSED") {
                None | Some("0") | Some("false") => false,
                Some("1") | Some("true") => true,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        field: "PIDEVOPS_PAUSED",
                        reason: format!("{other:?}: expected 1 or 0"),
                    })
                }
            },
            env: env.clone(),
        })
    }

    /// Settings for tests: loopback, port 0, the given database, short intervals.
    pub fn for_tests(database: DatabaseUrl) -> Self {
        let mut settings =
            Self::from_env(&Env::default()).expect("defaults are valid by construction");
        settings.bind = IpAddr::from([127, 0, 0, 1]);
        settings.port = 0;
        settings.database = database;
        settings.config_file = None;
        settings.file = FileConfig::default();
        settings.loop_startup_delay = Duration::from_millis(10);
        // Short enough for tests to see ticks, long enough that a loaded machine never makes it look stale.
        settings.heartbeat_interval = Duration::from_secs(1);
        settings.append_timeout = Duration::from_secs(5);
        settings.relay_interval = Duration::from_millis(200);
        settings.projector_interval = Duration::from_millis(200);
        // Agents in tests find their programs; nothing else of the test process's environment is handed on.
        let path = std::env::var("PATH").unwrap_or_default();
        settings.env = Env::from_pairs([("PATH", path.as_str())]);
        settings
    }

    pub fn admin_token_matches(&self, presented: &str) -> bool {
        match &self.admin_token {
            Some(token) => secret::constant_time_eq(token.expose_secret(), presented),
            None => false,
        }
    }
}

/// `KEY=value` lines of a `.env` file, in order (comments and blank lines dropped, `export ` allowed): the one
/// parser, for the file `init` writes and `doctor` reads. `Ok(None)` when there is no such file. `serve` reads
/// none: it is started with the file sourced (`set -a && . ./.env && set +a`).
pub fn read_env_file(path: &Path) -> std::io::Result<Option<Vec<(String, String)>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(
        text.lines()
            .filter_map(|line| {
                let line = line.trim();
                let line = line.strip_prefix("export ").unwrap_or(line);
                let (key, value) = line.split_once('=')?;
                (!line.starts_with('#')).then(|| (key.trim().to_owned(), value.trim().to_owned()))
            })
            .collect(),
    ))
}

/// The file `serve` reads: `PIDEVOPS_CONFIG`, else `./pidevops.toml` if it exists, else none (every default).
pub fn config_path(env: &Env) -> Option<PathBuf> {
    match env.get("PIDEVOPS_CONFIG") {
        Some(path) => Some(PathBuf::from(path)),
        None => Some(PathBuf::from("pidevops.toml")).filter(|p| p.exists()),
    }
}

/// Reads and checks `pidevops.toml`: every unknown key, bad value and broken rule is reported, each naming its key.
pub fn read_config_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_owned(),
        source,
    })?;
    parse_config_text(&text, path)
}

/// Checks `text` as `pidevops.toml` (`read_config_file`'s rules); `path` names it in the errors (the dashboard's
/// what-if form names its field).
pub fn parse_config_text(text: &str, path: &Path) -> Result<FileConfig, ConfigError> {
    let table = text
        .parse::<toml::Table>()
        .map_err(|source| ConfigError::ParseFile {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
    FileConfig::from_table(&table).map_err(|errors| ConfigError::File {
        path: path.to_owned(),
        errors,
    })
}

/// The JetStream stream and subject prefix: defaults per the contract; overridable so that several
/// deployments (staging and production, say) can share one NATS.
fn bus_config(env: &Env) -> Result<crate::bus::BusConfig, ConfigError> {
    let mut config = crate::bus::BusConfig::default();
    if let Some(stream) = env.get("PIDEVOPS_NATS_STREAM").filter(|s| !s.is_empty()) {
        // JetStream stream names may not contain whitespace, '.', '*', '>' or path separators.
        if !stream
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(ConfigError::Invalid {
                field: "PIDEVOPS_NATS_STREAM",
                reason: format!("{stream:?} may only hold letters, digits, '_' and '-'"),
            });
        }
        config.stream = stream.to_owned();
    }
    if let Some(prefix) = env
        .get("PIDEVOPS_NATS_SUBJECT_PREFIX")
        .filter(|s| !s.is_empty())
    {
        let valid = prefix.split('.').all(|token| {
            !token.is_empty()
                && token
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
        if !valid {
            return Err(ConfigError::Invalid {
                field: "PIDEVOPS_NATS_SUBJECT_PREFIX",
                reason: format!(
                    "{prefix:?} must be dot-separated tokens of letters, digits, '_' and '-'"
                ),
            });
        }
        config.subject_prefix = prefix.to_owned();
    }
    Ok(config)
}

/// At least 3 s: renewals run every sixth of it, and a shorter lease would churn under an ordinary GC pause.
fn lease_ttl(env: &Env) -> Result<Duration, ConfigError> {
    let ttl = env.seconds("PIDEVOPS_LEASE_TTL_S", 15.0)?;
    if ttl < Duration::from_secs(3) {
        return Err(ConfigError::Invalid {
            field: "PIDEVOPS_LEASE_TTL_S",
            reason: format!("{} s is shorter than the 3 s minimum", ttl.as_secs_f64()),
        });
    }
    Ok(ttl)
}

/// Unique per process, readable by a person: `PIDEVOPS_INSTANCE_ID`, else Railway's replica id or the host
/// name, then the pid and a random tag (a restarted process is a new holder).
fn instance_id(env: &Env) -> String {
    if let Some(id) = env.get("PIDEVOPS_INSTANCE_ID").filter(|s| !s.is_empty()) {
        return id.to_owned();
    }
    let host = env
        .get("RAILWAY_REPLICA_ID")
        .or_else(|| env.get("HOSTNAME"))
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    format!(
        "{host}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}

#[cfg(test)]
mod tests;

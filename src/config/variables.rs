//! The environment variables `Settings` are read from, declared once: `serve --help` prints them. The service's
//! own are listed here; each provider's come from the provider table (`domain::registry`), which declares them.

use crate::domain::registry::PROVIDERS;

/// Every variable the settings are read from, with what it is: the one list, printed by `pidevops serve --help`
/// and held by a test to what [`Settings::from_env`] reads (config/tests.rs). The service's own come first, then
/// each provider's webhook secret and variables, then the rest of the service's.
pub fn variables() -> Vec<(&'static str, String)> {
    let own = |list: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        list.iter().map(|(n, w)| (*n, (*w).to_owned())).collect()
    };
    let webhook_secrets = PROVIDERS.iter().map(|p| {
        (
            p.webhook_secret,
            format!("verifies POST {}", p.webhook_route),
        )
    });
    let provider_variables = PROVIDERS
        .iter()
        .flat_map(|p| p.variables)
        .map(|v| (v.name, v.help.to_owned()));
    own(SERVICE_HEAD)
        .into_iter()
        .chain(webhook_secrets)
        .chain(provider_variables)
        .chain(own(SERVICE_TAIL))
        .collect()
}

/// The service's own variables listed before the providers'.
const SERVICE_HEAD: &[(&str, &str)] = &[
    (
        "PORT",
        "the port to listen on (default 8080; 0: any free one)",
    ),
    (
        "PIDEVOPS_BIND",
        "the address to listen on (default [::], IPv4 and IPv6)",
    ),
    (
        "DATABASE_URL",
        "postgres://… or sqlite:… (default sqlite://./data/pidevops.db)",
    ),
    (
        "PIDEVOPS_CONFIG",
        "the configuration file (default ./pidevops.toml when present)",
    ),
    (
        "PIDEVOPS_ADMIN_TOKEN",
        "the dashboard's and /api's bearer token (at least 24 characters)",
    ),
    (
        "NATS_URL",
        "NATS JetStream (default: events fan out in-process)",
    ),
    ("PIDEVOPS_NATS_STREAM", "the JetStream stream's name"),
    (
        "PIDEVOPS_NATS_SUBJECT_PREFIX",
        "the JetStream subjects' prefix",
    ),
    ("LOG_FORMAT", "pretty (default) or json"),
    ("RUST_LOG", "the log filter (default info)"),
];

/// The service's own variables listed after the providers'.
const SERVICE_TAIL: &[(&str, &str)] = &[
    (
        "WORKSPACE_ROOT",
        "mirrors and worktrees (default ./data/workspaces)",
    ),
    (
        "PIDEVOPS_DATA_DIR",
        "what serve keeps of its own (default ./data)",
    ),
    ("PIDEVOPS_PAUSED", "1: no new agent runs start"),
    (
        "PIDEVOPS_INSTANCE_ID",
        "this process's name in leases and /health",
    ),
    (
        "RAILWAY_REPLICA_ID",
        "Railway's replica id, part of the instance id",
    ),
    ("HOSTNAME", "part of the instance id"),
    (
        "PIDEVOPS_DB_MAX_CONNECTIONS",
        "the database pool's size (default 10)",
    ),
    (
        "PIDEVOPS_HEARTBEAT_INTERVAL_S",
        "the database heartbeat's interval (default 15)",
    ),
    (
        "PIDEVOPS_LOOP_STARTUP_DELAY_S",
        "before loops' first ticks (default 1)",
    ),
    (
        "PIDEVOPS_APPEND_TIMEOUT_S",
        "how long a webhook waits for its commit (default 10)",
    ),
    (
        "PIDEVOPS_RELAY_INTERVAL_S",
        "the relay's interval (default 1)",
    ),
    (
        "PIDEVOPS_PROJECTOR_INTERVAL_S",
        "the projectors' interval (default 1)",
    ),
    (
        "PIDEVOPS_LEASE_TTL_S",
        "singleton loops' lease (default 15, at least 3)",
    ),
    (
        "PATH",
        "where agents' programs and git are found (agents get it too)",
    ),
];

/// [`variables`] as `serve --help` prints them, with where agents' own variables are.
pub fn variables_help() -> String {
    let variables = variables();
    let width = variables.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut out =
        String::from("Environment (pidevops.toml holds the rest; docs/configuration.md):\n");
    for (name, what) in &variables {
        out.push_str(&format!("  {name:<width$}  {what}\n"));
    }
    out.push_str(
        "  and each agent profile's env (docs/agents.md: the credential each CLI takes)\n",
    );
    out
}

//! `pidevops config check`'s output: the effective configuration as TOML or JSON, with every setting read from
//! the environment, and no secret's value anywhere in it.

use std::time::Duration;

use secrecy::ExposeSecret;

use super::{profiles, redact_password, LogFormat, Settings};
use crate::domain::registry::{self, VariableKind};

/// `pidevops config check`: the configuration the service would run with, as TOML (a valid `pidevops.toml`,
/// the environment in comments) or JSON. No secret's value is ever in it: secrets show as set or unset, URLs
/// lose their passwords, and as a last guard any secret value of the environment is masked wherever it appears.
pub fn effective(settings: &Settings, json: bool) -> Result<String, String> {
    let mut tables = settings.file.tables().effective();
    for repo in tables.repos.values_mut() {
        if let Some(url) = &mut repo.url {
            *url = redact_password(url);
        }
    }
    let environment = environment(settings);
    let text = if json {
        let file = serde_json::to_value(&tables).map_err(|e| e.to_string())?;
        let out = serde_json::json!({
            "config_file": settings.config_file.as_ref().map(|p| p.display().to_string()),
            "environment": environment.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "file": file,
        });
        serde_json::to_string_pretty(&out).map_err(|e| e.to_string())? + "\n"
    } else {
        let mut out = String::from("# pidevops config check: the effective configuration\n");
        match &settings.config_file {
            Some(path) => out.push_str(&format!(
                "# file: {} (its values, then the defaults)\n",
                path.display()
            )),
            None => out.push_str("# file: none (every default)\n"),
        }
        out.push_str("#\n# environment (secrets only as set or unset):\n");
        for (name, value) in &environment {
            out.push_str(&format!("#   {name} = {value}\n"));
        }
        out.push('\n');
        out.push_str(&toml::to_string(&tables).map_err(|e| e.to_string())?);
        out
    };
    Ok(mask_secrets(settings, text))
}

/// Every setting read from the environment, as `config check` shows it.
pub(super) fn environment(settings: &Settings) -> Vec<(&'static str, String)> {
    let secret = |set: bool| if set { "set (redacted)" } else { "unset" }.to_owned();
    let or_unset = |value: Option<&String>| value.cloned().unwrap_or_else(|| "unset".to_owned());
    let seconds = |d: Duration| d.as_secs_f64().to_string();
    let first = [
        ("PORT", settings.port.to_string()),
        ("PIDEVOPS_BIND", settings.bind.to_string()),
        ("DATABASE_URL", settings.database.redacted()),
        (
            "NATS_URL",
            or_unset(
                settings
                    .nats_url
                    .as_ref()
                    .map(|u| redact_password(u))
                    .as_ref(),
            ),
        ),
        ("PIDEVOPS_NATS_STREAM", settings.bus.stream.clone()),
        (
            "PIDEVOPS_NATS_SUBJECT_PREFIX",
            settings.bus.subject_prefix.clone(),
        ),
        (
            "LOG_FORMAT",
            match settings.log_format {
                LogFormat::Json => "json",
                LogFormat::Pretty => "pretty",
            }
            .to_owned(),
        ),
        (
            "PIDEVOPS_HEARTBEAT_INTERVAL_S",
            seconds(settings.heartbeat_interval),
        ),
        (
            "PIDEVOPS_LOOP_STARTUP_DELAY_S",
            seconds(settings.loop_startup_delay),
        ),
        (
            "PIDEVOPS_APPEND_TIMEOUT_S",
            seconds(settings.append_timeout),
        ),
        (
            "PIDEVOPS_DB_MAX_CONNECTIONS",
            settings.max_db_connections.to_string(),
        ),
        (
            "PIDEVOPS_RELAY_INTERVAL_S",
            seconds(settings.relay_interval),
        ),
        (
            "PIDEVOPS_PROJECTOR_INTERVAL_S",
            seconds(settings.projector_interval),
        ),
        ("PIDEVOPS_LEASE_TTL_S", seconds(settings.lease_ttl)),
        ("PIDEVOPS_INSTANCE_ID", settings.instance_id.clone()),
        (
            "PIDEVOPS_PAUSED",
            if settings.paused { "1" } else { "0" }.to_owned(),
        ),
        (
            "WORKSPACE_ROOT",
            settings.workspace_root.display().to_string(),
        ),
        ("PIDEVOPS_DATA_DIR", settings.data_dir.display().to_string()),
    ];
    // Each provider's plain variables (the provider table), as they were read.
    let provider_plain = registry::PROVIDERS
        .iter()
        .flat_map(|p| p.variables)
        .filter_map(|v| {
            let value = settings.providers.get(v.name);
            match v.kind {
                VariableKind::Secret => None,
                VariableKind::Url { .. } => Some((v.name, redact_password(value.unwrap_or("")))),
                VariableKind::Text => Some((v.name, or_unset(value.map(str::to_owned).as_ref()))),
            }
        });
    // Each provider's webhook secret (the provider table), where the list always had them.
    let webhook_secrets = registry::PROVIDERS.iter().map(|p| {
        let set = settings
            .webhook_secret(p.source)
            .is_some_and(|s| s.is_set());
        (p.webhook_secret, secret(set))
    });
    let rest = [(
        "PIDEVOPS_ADMIN_TOKEN",
        secret(settings.admin_token.is_some()),
    )];
    let provider_secrets = registry::PROVIDERS
        .iter()
        .flat_map(|p| p.variables)
        .filter(|v| v.kind == VariableKind::Secret)
        .map(|v| (v.name, secret(settings.providers.is_set(v.name))));
    first
        .into_iter()
        .chain(provider_plain)
        .chain(webhook_secrets)
        .chain(rest)
        .chain(provider_secrets)
        .collect()
}

/// The last guard: any secret of the environment (ours, those no agent may get, those profiles pass on) that
/// still appears in `text` (a token pasted into the file, say) is replaced by `***`.
fn mask_secrets(settings: &Settings, mut text: String) -> String {
    let webhook_secrets = registry::PROVIDERS
        .iter()
        .filter_map(|p| settings.webhook_secret(p.source)?.value.as_ref());
    let mut secrets: Vec<String> = settings
        .admin_token
        .iter()
        .chain(webhook_secrets)
        .map(|s| s.expose_secret().to_owned())
        .chain(settings.providers.secrets().map(str::to_owned))
        .collect();
    let profile_env = settings
        .file
        .profiles
        .names()
        .filter_map(|name| settings.file.profiles.get(name))
        .flat_map(|profile| profile.env.clone());
    for name in profiles::never_passed()
        .map(str::to_owned)
        .chain(profile_env)
    {
        if let Some(value) = settings.env.get(&name) {
            secrets.push(value.to_owned());
        }
    }
    // Longest first, so a secret containing another is masked whole; very short values would mask ordinary text.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        text = text.replace(secret.as_str(), "***");
    }
    text
}

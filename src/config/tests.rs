use super::effective::environment;
use super::*;

#[test]
fn defaults_are_the_embedded_database_and_port_8080() {
    let s = Settings::from_env(&Env::default()).unwrap();
    assert_eq!(s.port, 8080);
    assert_eq!(
        s.database,
        DatabaseUrl::Sqlite(DatabaseUrl::EMBEDDED_DEFAULT.into())
    );
    assert!(!s.webhook_secrets.is_set("github"));
    assert!(s.admin_token.is_none());
}

#[test]
fn a_bad_value_names_its_variable() {
    let err = Settings::from_env(&Env::from_pairs([("PORT", "eighty")])).unwrap_err();
    assert!(err.to_string().starts_with("PORT is invalid"), "{err}");
    let err = Settings::from_env(&Env::from_pairs([("DATABASE_URL", "mysql://x")])).unwrap_err();
    assert!(
        err.to_string().starts_with("DATABASE_URL is invalid"),
        "{err}"
    );
    let err = Settings::from_env(&Env::from_pairs([("LOG_FORMAT", "xml")])).unwrap_err();
    assert!(
        err.to_string().starts_with("LOG_FORMAT is invalid"),
        "{err}"
    );
    let err = Settings::from_env(&Env::from_pairs([("PIDEVOPS_HEARTBEAT_INTERVAL_S", "-1")]))
        .unwrap_err();
    assert!(
        err.to_string().starts_with("PIDEVOPS_HEARTBEAT_INTERVAL_S"),
        "{err}"
    );
}

#[test]
fn a_bad_bot_token_is_refused_without_echoing_it() {
    let err = Settings::from_env(&Env::from_pairs([("TELEGRAM_BOT_TOKEN", "sekrit-value")]))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("TELEGRAM_BOT_TOKEN is invalid"), "{err}");
    assert!(!err.contains("sekrit"), "{err}");
    let ok = Settings::from_env(&Env::from_pairs([("TELEGRAM_BOT_TOKEN", "12345:abc")])).unwrap();
    assert!(ok.providers.secret("TELEGRAM_BOT_TOKEN").is_some());
    assert_eq!(
        ok.providers.get("TELEGRAM_BOT_TOKEN"),
        None,
        "a secret is not read as text"
    );
}

/// A provider's variables are read as the provider table declares them: checked (naming the variable, not the
/// value of a secret), URLs defaulted and trimmed, and set by tests through the same check.
#[test]
fn provider_variables_are_read_checked_and_set_as_the_table_declares() {
    let err = Settings::from_env(&Env::from_pairs([("TELEGRAM_ALLOWED_CHATS", "-100, chat")]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "TELEGRAM_ALLOWED_CHATS is invalid: \"chat\" is not a chat id (a whole number)"
    );
    let mut settings = Settings::from_env(&Env::from_pairs([
        ("GITHUB_API_URL", "http://127.0.0.1:9/api/"),
        ("LINEAR_API_KEY", "lin_api_sekrit"),
        ("TELEGRAM_ALLOWED_USERS", " 5, 12 "),
    ]))
    .unwrap();
    let vars = &settings.providers;
    assert_eq!(vars.get("GITHUB_API_URL"), Some("http://127.0.0.1:9/api"));
    assert_eq!(
        vars.get("TELEGRAM_API_URL"),
        Some("https://api.telegram.org")
    );
    assert_eq!(vars.get("TELEGRAM_ALLOWED_USERS"), Some("5, 12"));
    assert_eq!(vars.get("TELEGRAM_ALLOWED_CHATS"), None);
    assert!(vars.is_set("LINEAR_API_KEY") && !vars.is_set("GITHUB_TOKEN"));
    assert!(!format!("{vars:?}").contains("sekrit"), "{vars:?}");
    assert_eq!(vars.secrets().collect::<Vec<_>>(), ["lin_api_sekrit"]);

    let before = format!("{:?}", settings.providers);
    let unknown = settings
        .providers
        .set("DATABASE_URL", Some("x"))
        .unwrap_err();
    assert!(
        unknown.to_string().contains("no provider's variable"),
        "{unknown}"
    );
    let refused = settings
        .providers
        .set("TELEGRAM_BOT_TOKEN", Some("no-id-sekrit"))
        .unwrap_err()
        .to_string();
    assert!(
        refused.starts_with("TELEGRAM_BOT_TOKEN is invalid"),
        "{refused}"
    );
    assert!(!refused.contains("sekrit"), "{refused}");
    assert_eq!(
        format!("{:?}", settings.providers),
        before,
        "a refusal changes nothing"
    );
    settings.providers.set("LINEAR_API_KEY", None).unwrap();
    assert!(!settings.providers.is_set("LINEAR_API_KEY"));
}

#[test]
fn a_short_admin_token_is_refused_naming_the_minimum() {
    let short = "x".repeat(MIN_ADMIN_TOKEN_CHARS - 1);
    let err = Settings::from_env(&Env::from_pairs([("PIDEVOPS_ADMIN_TOKEN", short.as_str())]))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("PIDEVOPS_ADMIN_TOKEN is invalid"), "{err}");
    assert!(err.contains("at least 24 characters"), "{err}");
    assert!(!err.contains(&short), "{err}");
    let long = "x".repeat(MIN_ADMIN_TOKEN_CHARS);
    let ok = Settings::from_env(&Env::from_pairs([("PIDEVOPS_ADMIN_TOKEN", long.as_str())]));
    assert!(ok.unwrap().admin_token_matches(&long));
}

#[test]
fn blank_values_count_as_unset() {
    let s = Settings::from_env(&Env::from_pairs([
        ("GITHUB_WEBHOOK_SECRET", "  "),
        ("DATABASE_URL", ""),
    ]))
    .unwrap();
    assert!(!s.webhook_secrets.is_set("github"));
    assert_eq!(s.database.kind(), "sqlite");
}

#[test]
fn secrets_do_not_appear_in_debug_output() {
    let s = Settings::from_env(&Env::from_pairs([
        ("GITHUB_WEBHOOK_SECRET", "gh-very-secret"),
        ("PIDEVOPS_ADMIN_TOKEN", "admin-very-secret-and-long-enough"),
    ]))
    .unwrap();
    let printed = format!("{s:?}");
    assert!(!printed.contains("very-secret"), "{printed}");
}

#[test]
fn passwords_are_redacted_from_database_urls() {
    let url = DatabaseUrl::parse("postgres://app:hunter2@db:5432/x").unwrap();
    assert_eq!(url.redacted(), "postgres://app:***@db:5432/x");
    let url = DatabaseUrl::parse("postgres://app@db/x").unwrap();
    assert_eq!(url.redacted(), "postgres://app@db/x");
}

#[test]
fn a_missing_config_file_named_explicitly_is_an_error() {
    let err = Settings::from_env(&Env::from_pairs([(
        "PIDEVOPS_CONFIG",
        "/nonexistent/pidevops.toml",
    )]))
    .unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/pidevops.toml"),
        "{err}"
    );
}

#[test]
fn bus_names_leases_and_instance_ids_are_validated() {
    let s = Settings::from_env(&Env::from_pairs([
        ("PIDEVOPS_NATS_STREAM", "STAGING_EVENTS"),
        ("PIDEVOPS_NATS_SUBJECT_PREFIX", "staging.events"),
        ("PIDEVOPS_INSTANCE_ID", "web-1"),
    ]))
    .unwrap();
    assert_eq!(s.bus.stream, "STAGING_EVENTS");
    assert_eq!(s.bus.subject_prefix, "staging.events");
    assert_eq!(s.instance_id, "web-1");
    assert_eq!(s.lease_ttl, Duration::from_secs(15));
    for (key, value) in [
        ("PIDEVOPS_NATS_STREAM", "has.dots"),
        ("PIDEVOPS_NATS_STREAM", "wild*"),
        ("PIDEVOPS_NATS_SUBJECT_PREFIX", "a..b"),
        ("PIDEVOPS_NATS_SUBJECT_PREFIX", "a.>"),
        ("PIDEVOPS_LEASE_TTL_S", "1"),
    ] {
        let err = Settings::from_env(&Env::from_pairs([(key, value)])).unwrap_err();
        assert!(err.to_string().contains(key), "{key}={value}: {err}");
    }
    let a = Settings::from_env(&Env::from_pairs([])).unwrap();
    let b = Settings::from_env(&Env::from_pairs([])).unwrap();
    assert!(a.instance_id.contains(&std::process::id().to_string()));
    // Random tags differ almost always; a collision of 16 bits twice in a row would be astonishing.
    let c = Settings::from_env(&Env::from_pairs([])).unwrap();
    assert!(a.instance_id != b.instance_id || b.instance_id != c.instance_id);
}

/// Config names no provider's variable: each provider declares its own in the provider table, and config reads
/// them from there, so adding a provider edits nothing here.
#[test]
fn config_names_no_providers_variable() {
    let sources = [
        ("mod.rs", include_str!("mod.rs")),
        ("variables.rs", include_str!("variables.rs")),
        ("effective.rs", include_str!("effective.rs")),
        ("provider_env.rs", include_str!("provider_env.rs")),
    ];
    for provider in &crate::domain::registry::PROVIDERS {
        for variable in provider.variables {
            for (file, text) in sources {
                assert!(
                    !text.contains(&format!("\"{}\"", variable.name)),
                    "config/{file} names {}: declare it in the provider table instead",
                    variable.name
                );
            }
        }
    }
}

fn declared_in_help(name: &str) -> bool {
    variables().iter().any(|(n, _)| *n == name) && variables_help().contains(name)
}

/// `serve --help` lists what the settings read: every variable named in a call in config/mod.rs is in [`VARIABLES`],
/// and so is every one `config check` prints.
#[test]
fn every_variable_the_settings_read_is_declared_for_serve_help() {
    // The list itself is in config/variables.rs: config/mod.rs holds the reads, effective.rs what `config check` prints.
    let outside = concat!(include_str!("mod.rs"), include_str!("effective.rs"));
    let called = regex::Regex::new(r#"\(\s*(?:env,\s*)?"([A-Z][A-Z0-9_]+)""#).unwrap();
    let variables = variables();
    let declared: Vec<&str> = variables.iter().map(|(name, _)| *name).collect();
    let read: std::collections::BTreeSet<&str> = called
        .captures_iter(outside)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    // The service's own: each provider's are read from the provider table, by no name here.
    assert!(read.len() > 20, "the scan finds the reads: {read:?}");
    for name in &read {
        assert!(
            declared.contains(name),
            "{name} is read but not in VARIABLES"
        );
    }
    let settings = Settings::from_env(&Env::default()).unwrap();
    for (name, _) in environment(&settings) {
        assert!(
            declared.contains(&name),
            "{name} is printed by config check but not in VARIABLES"
        );
    }
    let help = variables_help();
    assert!(declared.iter().all(|name| help.contains(name)), "{help}");
}

#[test]
fn each_provider_reads_its_webhook_secret_and_keeps_its_secrets_from_agents() {
    let mut settings = Settings::from_env(&Env::default()).unwrap();
    assert!(
        !settings.webhook_secrets.set("no-such-provider", None),
        "only a provider in the table has a webhook secret"
    );
    assert!(settings
        .webhook_secret(crate::domain::Source::Pidevops)
        .is_none());
    for provider in &crate::domain::registry::PROVIDERS {
        let secret = settings.webhook_secret(provider.source).unwrap();
        assert_eq!(secret.variable, provider.webhook_secret);
        assert!(!secret.is_set());
        assert!(settings
            .webhook_secrets
            .set(provider.name, Some("s".into())));
        assert!(settings.webhook_secrets.is_set(provider.name));
        assert!(variables()
            .iter()
            .any(|(name, _)| *name == provider.webhook_secret));
        for variable in provider.variables {
            assert!(declared_in_help(variable.name), "{}", variable.name);
            if variable.kind == crate::domain::registry::VariableKind::Secret {
                assert!(
                    provider.agent_secrets.contains(&variable.name),
                    "{}",
                    variable.name
                );
            }
        }
        for name in provider.agent_secrets {
            assert!(profiles::is_never_passed(name), "{name}");
        }
    }
    // The service's own, and every provider's: the list as it was before the provider table.
    let mut never: Vec<_> = profiles::never_passed().collect();
    never.sort_unstable();
    assert_eq!(
        never,
        [
            "DATABASE_URL",
            "GITHUB_APP_PRIVATE_KEY",
            "GITHUB_TOKEN",
            "GITHUB_WEBHOOK_SECRET",
            "GITLAB_TOKEN",
            "GITLAB_WEBHOOK_SECRET",
            "LINEAR_API_KEY",
            "LINEAR_WEBHOOK_SECRET",
            "NATS_URL",
            "PIDEVOPS_ADMIN_TOKEN",
            "SLACK_APP_TOKEN",
            "SLACK_BOT_TOKEN",
            "SLACK_SIGNING_SECRET",
            "TELEGRAM_BOT_TOKEN",
            "TELEGRAM_WEBHOOK_SECRET",
        ]
    );
}

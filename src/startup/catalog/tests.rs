use super::*;

#[test]
fn every_loop_is_planned_once() {
    let settings = Settings::for_tests(crate::config::DatabaseUrl::Sqlite(
        "sqlite://unused.db".to_owned(),
    ));
    let planned = plan(&settings);
    let names: std::collections::BTreeSet<_> = planned.iter().map(|p| &p.name).collect();
    assert_eq!(
        names.len(),
        planned.len(),
        "a name planned twice: {planned:?}"
    );
    for expected in [
        HEARTBEAT_LOOP,
        "relay",
        "intake",
        "plans",
        "reactions",
        "effects:github",
    ] {
        assert!(
            names.contains(&expected.to_owned()),
            "{expected} is not planned"
        );
    }
}

#[test]
fn every_provider_has_one_effects_loop() {
    // Every provider in the table: a new one fails here until it has its loop.
    for provider in crate::domain::registry::PROVIDERS.iter().map(|p| p.name) {
        let entries = effects::EFFECTS_LOOPS
            .iter()
            .filter(|e| e.provider == provider)
            .count();
        assert_eq!(entries, 1, "{provider} has {entries} effects loops");
    }
    assert_eq!(
        effects::EFFECTS_LOOPS.len(),
        crate::domain::registry::PROVIDERS.len(),
        "an effects loop for a provider not in the table"
    );
    let settings = Settings::for_tests(crate::config::DatabaseUrl::Sqlite(
        "sqlite://unused.db".to_owned(),
    ));
    let planned: Vec<String> = effects::plan(&settings)
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(
        planned,
        [
            "effects:github",
            "effects:linear",
            "effects:telegram",
            "effects:slack",
            "effects:gitlab"
        ],
        "each entry plans its own provider's loop"
    );
}

#[test]
fn the_refresh_loop_is_armed_by_the_token_of_a_refreshing_repository_s_host() {
    let planned = |file: &str, variables: &[&str]| {
        let mut settings = Settings::for_tests(crate::config::DatabaseUrl::Sqlite(
            "sqlite://unused.db".to_owned(),
        ));
        let table: toml::Table = toml::from_str(&format!("[dispatch]\n{file}")).unwrap();
        settings.file = crate::config::file::FileConfig::from_table(&table).unwrap();
        for name in variables {
            settings.providers.set(name, Some("a-token")).unwrap();
        }
        let mut planned = plans::refresh_plan(&settings);
        assert_eq!(planned.len(), 1);
        let planned = planned.remove(0);
        (planned.state, planned.reason.unwrap_or_default())
    };
    let gitlab = "[repos.\"acme/platform/api\"]\nprovider = \"gitlab\"\n\
                  url = \"https://gitlab.example.com/acme/platform/api.git\"\n";
    assert_eq!(planned(gitlab, &["GITLAB_TOKEN"]).0, LoopState::Armed);
    for variables in [&[][..], &["GITHUB_TOKEN"]] {
        let (state, why) = planned(gitlab, variables);
        assert_eq!(state, LoopState::Unarmed, "{variables:?}");
        assert!(why.contains("GITLAB_TOKEN is not set"), "{why}");
    }
    let off = format!("{gitlab}refresh = \"off\"\n");
    assert_eq!(planned(&off, &["GITLAB_TOKEN"]).0, LoopState::Disabled);
    // No repository configured: GitHub's defaults, as before.
    assert_eq!(planned("", &["GITHUB_TOKEN"]).0, LoopState::Armed);
    let (state, why) = planned("", &["GITLAB_TOKEN"]);
    assert_eq!(state, LoopState::Unarmed);
    assert!(why.contains("GITHUB_TOKEN is not set"), "{why}");
    // Both hosts refresh: either token arms it.
    let both = format!("{gitlab}[repos.\"acme/app\"]\nurl = \"https://github.com/acme/app.git\"\n");
    assert_eq!(planned(&both, &["GITHUB_TOKEN"]).0, LoopState::Armed);
    let (state, why) = planned(&both, &[]);
    assert_eq!(state, LoopState::Unarmed);
    assert!(
        why.contains("neither GITHUB_TOKEN nor GITLAB_TOKEN"),
        "{why}"
    );
}

#[test]
fn the_merge_queue_serves_each_auto_landing_host_whose_token_is_set() {
    use crate::landing::queue::QueueHosts;
    let settings = |file: &str, variables: &[&str]| {
        let mut settings = Settings::for_tests(crate::config::DatabaseUrl::Sqlite(
            "sqlite://unused.db".to_owned(),
        ));
        let table: toml::Table = toml::from_str(&format!("[dispatch]\n{file}")).unwrap();
        settings.file = crate::config::file::FileConfig::from_table(&table).unwrap();
        for name in variables {
            settings.providers.set(name, Some("a-token")).unwrap();
        }
        settings
    };
    let planned = |file: &str, variables: &[&str]| {
        let mut planned = plans::merge_queue_plan(&settings(file, variables));
        assert_eq!(planned.len(), 1);
        let planned = planned.remove(0);
        (planned.state, planned.reason.unwrap_or_default())
    };
    let hosts =
        |file: &str, variables: &[&str]| plans::merge_queue_hosts(&settings(file, variables));
    let gitlab = "[repos.\"acme/platform/api\"]\nprovider = \"gitlab\"\n\
                  url = \"https://gitlab.example.com/acme/platform/api.git\"\nland = \"auto\"\n";
    assert_eq!(planned(gitlab, &["GITLAB_TOKEN"]).0, LoopState::Armed);
    assert_eq!(
        hosts(gitlab, &["GITLAB_TOKEN", "GITHUB_TOKEN"]),
        QueueHosts {
            github: false,
            gitlab: true
        }
    );
    let (state, why) = planned(gitlab, &["GITHUB_TOKEN"]);
    assert_eq!(state, LoopState::Unarmed);
    assert!(why.contains("GITLAB_TOKEN is not set"), "{why}");
    let manual = gitlab.replace("land = \"auto\"", "land = \"manual\"");
    assert_eq!(planned(&manual, &["GITLAB_TOKEN"]).0, LoopState::Disabled);
    // Both hosts land automatically: each token serves its own host only.
    let both = format!(
        "{gitlab}[repos.\"acme/app\"]\nurl = \"https://github.com/acme/app.git\"\nland = \"auto\"\n"
    );
    assert_eq!(planned(&both, &["GITHUB_TOKEN"]).0, LoopState::Armed);
    assert_eq!(
        hosts(&both, &["GITHUB_TOKEN"]),
        QueueHosts {
            github: true,
            gitlab: false
        }
    );
    let (state, why) = planned(&both, &[]);
    assert_eq!(state, LoopState::Unarmed);
    assert!(
        why.contains("neither GITHUB_TOKEN nor GITLAB_TOKEN"),
        "{why}"
    );
}

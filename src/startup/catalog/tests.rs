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

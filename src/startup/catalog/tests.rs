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

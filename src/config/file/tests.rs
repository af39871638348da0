use super::*;

fn errors(text: &str) -> String {
    text.parse::<FileConfig>()
        .expect_err("a refused file")
        .to_string()
}

#[test]
fn an_unknown_key_in_any_table_is_refused_with_the_closest_known_one() {
    for (text, refusal) in [
        (
            "[dispatch]\nmax_concurent = 4",
            "[dispatch] max_concurent: unknown key; did you mean max_concurrent?",
        ),
        (
            "[board]\nmax_attemps = 5",
            "[board] max_attemps: unknown key; did you mean max_attempts?",
        ),
        (
            "[repos.\"acme/api\"]\nbse = \"main\"",
            "[repos.\"acme/api\"] bse: unknown key; did you mean base?",
        ),
        (
            "[intake]\ndefault_rep = \"acme/api\"",
            "[intake] default_rep: unknown key; did you mean default_repo?",
        ),
        (
            "[intake.github]\nbot_logn = \"x\"",
            "[intake.github] bot_logn: unknown key; did you mean bot_login?",
        ),
        (
            "[intake.linear]\nskip_label = [\"x\"]",
            "[intake.linear] skip_label: unknown key; did you mean skip_labels?",
        ),
        (
            "[agents.mine]\ncommand = [\"a\", \"{prompt}\"]\ntimeout = 5",
            "[agents.mine] timeout: unknown key; did you mean timeout_s?",
        ),
        (
            "[[schedules]]\nname = \"s\"\ncron = \"* * * * *\"\ndigest = true\ntimezon = \"UTC\"",
            "[schedules[0]] timezon: unknown key; did you mean timezone?",
        ),
        (
            "[[schedules]]\nname = \"s\"\ncron = \"* * * * *\"\n[schedules.task]\nrepo = \"a/b\"\ntask = \"t\"\ndone-when = \"x\"",
            "[schedules[0].task] done-when: unknown key; did you mean done_when?",
        ),
        (
            "[digest]\ntimezne = \"UTC\"",
            "[digest] timezne: unknown key; did you mean timezone?",
        ),
        (
            "[linear]\nstate = {}",
            "[linear.state]: unknown table; did you mean [linear.states]?",
        ),
        (
            "[linear.states]\nreview = \"In Review\"",
            "[linear.states] review: unknown key; did you mean in_review?",
        ),
        (
            "[linear.states]\ncancelled = \"Cancelled\"",
            "[linear.states] cancelled: unknown key (known: in_progress, in_review, done, blocked)",
        ),
        (
            "[telegram]\ncooldown = 60",
            "[telegram] cooldown: unknown key; did you mean cooldown_s?",
        ),
        (
            "[pollers.githab]\ninterval_s = 60",
            "[pollers.githab]: unknown table; did you mean [pollers.github]?",
        ),
        (
            "[pollers.linear]\nenable = false",
            "[pollers.linear] enable: unknown key; did you mean enabled?",
        ),
        (
            "[loops.cron]\nfail_after = 5",
            "[loops.cron] fail_after: unknown key; did you mean fail_after_s?",
        ),
        (
            "[dispach]\nenabled = true",
            "[dispach]: unknown table; did you mean [dispatch]?",
        ),
        (
            "[[schedule]]\nname = \"s\"",
            "[[schedule]]: unknown table; did you mean [[schedules]]?",
        ),
        (
            "verbose = true",
            "verbose: unknown key (known: board, repos, intake, dispatch, agents, schedules, digest, linear, \
             telegram, slack, effects, pollers, loops, plans, budgets)",
        ),
    ] {
        assert_eq!(errors(text), refusal, "{text}");
    }
}

#[test]
fn a_bad_value_names_its_key_and_what_was_expected() {
    for (text, refusal) in [
        (
            "[board]\nmax_attempts = \"five\"",
            "[board] max_attempts: expected a whole number, found the string \"five\"",
        ),
        (
            "[board]\napproval = \"maybe\"",
            "[board] approval: expected \"auto\" or \"manual\", found \"maybe\"",
        ),
        (
            "[dispatch]\nheartbeat_s = \"30s\"",
            "[dispatch] heartbeat_s: expected a number, found the string \"30s\"",
        ),
        (
            "[dispatch]\nreadable = [\"/opt\", 3]",
            "[dispatch] readable[1]: expected a string, found the whole number 3",
        ),
        (
            "[repos.\"acme/api\"]\nmax_concurrent = 1.5",
            "[repos.\"acme/api\"] max_concurrent: expected a whole number, found the number 1.5",
        ),
        (
            "[digest]\ntime = 09:00:00",
            "[digest] time: expected a string, found a date or time",
        ),
        (
            "[intake.linear.teams]\nENG = 3",
            "[intake.linear.teams] ENG: expected a string, found the whole number 3",
        ),
        (
            "repos = 3",
            "[repos]: expected a table, found the whole number 3",
        ),
        // The rules of the domain keep their own words, which name the key too.
        (
            "[dispatch]\nmax_concurrent = 0",
            "dispatch.max_concurrent must be a whole number from 1 to 1000",
        ),
        (
            "[board]\nmax_attempts = 101",
            "board.max_attempts: max attempts 101 is outside 1..=100",
        ),
    ] {
        assert_eq!(errors(text), refusal, "{text}");
    }
}

#[test]
fn every_mistake_is_reported_at_once() {
    let all = errors(
        "[dispatch]\nmax_concurent = 4\nheartbeat_s = \"x\"\nexecutor = \"cloud\"\n\
         [board]\nmax_attemps = 5\napproval = 3\n\
         [pollers.linear]\nenabled = \"no\"\n",
    );
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(
        lines,
        [
            "[board] approval: expected \"auto\" or \"manual\", found the whole number 3",
            "[board] max_attemps: unknown key; did you mean max_attempts?",
            "[dispatch] executor: expected \"local\" or \"workers\", found \"cloud\"",
            "[dispatch] heartbeat_s: expected a number, found the string \"x\"",
            "[dispatch] max_concurent: unknown key; did you mean max_concurrent?",
            "[pollers.linear] enabled: expected true or false, found the string \"no\"",
        ]
    );
    // Rules are checked once the shapes are right, each table's on its own.
    let rules = errors(
        "[dispatch]\nmax_concurrent = 0\n[telegram]\ncooldown_s = -1\n[repos.\"acme/api\"]\nbase = \"-x\"\n\
         [effects]\nmax_per_task_per_hour = -5",
    );
    assert_eq!(
        rules.lines().collect::<Vec<_>>(),
        [
            "dispatch.max_concurrent must be a whole number from 1 to 1000",
            "telegram.cooldown_s must be a whole number of seconds from 0 to 86400",
            "effects.max_per_task_per_hour must be a whole number from 0 (no cap) to 3600, not -5",
        ]
    );
}

#[test]
fn the_empty_file_is_every_default() {
    let file = FileConfig::default();
    assert_eq!(file.tables(), &Tables::default());
    assert_eq!(file.board, BoardConfig::default());
    assert_eq!(file.intake, IntakeConfig::default());
    assert_eq!(file.linear_states, LinearStates::default());
    assert_eq!(file.telegram_cooldown, chrono::Duration::minutes(10));
    assert_eq!(
        file.effect_cap,
        crate::effects::cap::EffectCap::per_hour(20)
    );
    assert!(file.schedules.is_empty());
    assert!(file
        .dispatch
        .off
        .as_deref()
        .unwrap()
        .contains("no [dispatch]"));
    assert_eq!(file.profiles.default_profile().name, "claude");
    for (poller, interval) in [
        (&file.linear_poller, crate::pollers::LINEAR_INTERVAL),
        (&file.github_poller, crate::pollers::GITHUB_INTERVAL),
        (&file.gitlab_poller, crate::pollers::GITLAB_INTERVAL),
    ] {
        assert!(!poller.configured && poller.enabled);
        assert_eq!(poller.interval, interval);
    }
    // An empty [dispatch] runs with the same values a missing one would have.
    let on = "[dispatch]".parse::<FileConfig>().unwrap().dispatch;
    assert_eq!(on.off, None);
    assert_eq!(
        DispatchConfig {
            off: file.dispatch.off.clone(),
            ..on
        },
        file.dispatch
    );
}

#[test]
fn fractional_seconds_are_accepted_where_documented() {
    let file = "[dispatch]\nheartbeat_s = 0.25\nretry_backoff_s = 0.05\nworktree_ttl_h = 1.5\n\
                [pollers.github]\ninterval_s = 0.5"
        .parse::<FileConfig>()
        .unwrap();
    assert_eq!(
        file.dispatch.heartbeat,
        std::time::Duration::from_millis(250)
    );
    assert_eq!(
        file.dispatch.retry_backoff,
        std::time::Duration::from_millis(50)
    );
    assert_eq!(
        file.dispatch.worktree_ttl,
        std::time::Duration::from_secs(5400)
    );
    assert_eq!(
        file.github_poller.interval,
        std::time::Duration::from_millis(500)
    );
    // Whole numbers are numbers too.
    let whole = "[dispatch]\nheartbeat_s = 2".parse::<FileConfig>().unwrap();
    assert_eq!(whole.dispatch.heartbeat, std::time::Duration::from_secs(2));
}

#[test]
fn the_effective_configuration_is_a_valid_file_that_means_the_same() {
    let file = r#"
        [dispatch]
        max_concurrent = 3
        [repos."acme/api"]
        max_concurrent = 2
        [agents.mine]
        command = ["mine", "{prompt}"]
        [pollers.linear]
        [[schedules]]
        name = "friday"
        cron = "0 16 * * FRI"
        digest = true
        [linear.states]
        done = "Closed"
    "#
    .parse::<FileConfig>()
    .unwrap();
    let effective = file.tables().effective();
    let text = toml::to_string(&effective).unwrap();
    let again = text.parse::<FileConfig>().unwrap();
    assert_eq!(again.tables().effective(), effective, "{text}");
    assert_eq!(again.dispatch, file.dispatch);
    assert_eq!(again.profiles, file.profiles);
    assert_eq!(again.board, file.board);
    assert_eq!(again.linear_poller, file.linear_poller);
    assert_eq!(again.linear_states.done, ["Closed"]);
    assert!(text.contains("[agents.claude]"), "{text}");
    assert!(text.contains("interval_s = 300.0"), "{text}");
}

#[test]
fn keys_come_from_serde_itself() {
    assert_eq!(keys_of::<BoardTable>(), ["approval", "max_attempts"]);
    assert_eq!(keys_of::<PollersTable>(), ["linear", "github", "gitlab"]);
    assert_eq!(keys_of::<LinearTable>(), ["states"]);
}

// -- docs/configuration.md is held to the structs ---------------------------------------------------------

const DOC: &str = include_str!("../../../docs/configuration.md");

/// Each `## \`[table]\`` heading of the doc with the keys its table lists (`| \`key\` | type | default |`).
fn documented() -> Vec<(String, Vec<(String, String)>)> {
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in DOC.lines() {
        if let Some(heading) = line
            .strip_prefix("## `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            sections.push((heading.to_owned(), Vec::new()));
        } else if let (Some(row), Some((_, keys))) = (line.strip_prefix("| `"), sections.last_mut())
        {
            let cells: Vec<&str> = row.split(" | ").collect();
            let key = cells[0].trim_end_matches('`').to_owned();
            keys.push((key, cells.get(2).copied().unwrap_or_default().to_owned()));
        }
    }
    sections
}

#[test]
fn the_documentation_lists_every_key_of_every_table_and_no_other() {
    let documented = documented();
    let schema = schema();
    for (heading, keys) in &schema {
        let Some((_, rows)) = documented.iter().find(|(h, _)| h == heading) else {
            panic!("docs/configuration.md has no section ## `{heading}`");
        };
        let doc_keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            &doc_keys, keys,
            "the keys of {heading}, in the structs' order"
        );
    }
    for (heading, rows) in &documented {
        assert!(
            rows.is_empty() || schema.iter().any(|(h, _)| h == heading),
            "docs/configuration.md documents {heading}, which no struct reads"
        );
    }
    // Every top-level table has a section (`[linear]` and `[pollers]` through their sub-tables).
    let headings: Vec<&str> = documented.iter().map(|(h, _)| h.as_str()).collect();
    for table in keys_of::<Tables>() {
        assert!(
            headings
                .iter()
                .any(|h| h.trim_start_matches('[').starts_with(table)),
            "docs/configuration.md has no section for [{table}]"
        );
    }
    assert!(headings.contains(&"[intake.linear.teams]"));
    for poller in keys_of::<PollersTable>() {
        assert!(
            DOC.contains(&format!("`[pollers.{poller}]`")),
            "[pollers.{poller}]"
        );
    }
}

#[test]
fn the_documented_defaults_are_the_defaults() {
    fn value<T: Serialize>(table: T) -> toml::Table {
        toml::Table::try_from(table).unwrap()
    }
    let defaults: Vec<(&str, toml::Table)> = vec![
        ("[board]", value(BoardTable::default())),
        ("[repos.\"owner/name\"]", value(RepoTable::default())),
        ("[intake]", value(IntakeTable::default())),
        ("[intake.github]", value(IntakeGithubTable::default())),
        ("[intake.gitlab]", value(IntakeGitlabTable::default())),
        ("[intake.linear]", value(IntakeLinearTable::default())),
        ("[dispatch]", value(DispatchTable::default())),
        ("[agents.<name>]", value(AgentTable::default())),
        ("[[schedules]]", value(ScheduleTable::default())),
        ("[schedules.task]", value(ScheduleTaskTable::default())),
        ("[digest]", value(DigestTable::default())),
        ("[linear.states]", value(LinearStatesTable::default())),
        ("[telegram]", value(TelegramTable::default())),
        ("[slack.channels.<id>]", value(SlackChannelTable::default())),
        ("[effects]", value(EffectsTable::default())),
        ("[pollers.<name>]", value(PollerTable::default())),
        ("[loops.<name>]", value(LoopTable::default())),
    ];
    let mut checked = 0;
    for (heading, rows) in documented() {
        let Some((_, table)) = defaults.iter().find(|(h, _)| *h == heading) else {
            continue;
        };
        for (key, default) in rows {
            // Only a default written as one TOML value (`"manual"`, `3`, `[]`); not "unset" or another key.
            let Some(literal) = default
                .strip_prefix('`')
                .and_then(|d| d.strip_suffix('`'))
                .filter(|d| !d.contains('`'))
            else {
                continue;
            };
            let Ok(parsed) = format!("v = {literal}").parse::<toml::Table>() else {
                continue;
            };
            // A key the struct leaves unset falls back to something else (`base`: "main" in the dispatcher).
            let Some(actual) = table.get(&key) else {
                continue;
            };
            let same = match (&parsed["v"], actual) {
                (toml::Value::Integer(d), toml::Value::Float(a)) => *d as f64 == *a,
                (d, a) => d == a,
            };
            assert!(
                same,
                "{heading} {key}: documented default {literal}, the struct's {actual:?}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} defaults were checked");
}

#[test]
fn every_toml_example_in_the_docs_uses_known_keys_of_the_right_types() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&docs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for block in text.split("```toml\n").skip(1) {
            let block = block.split("```").next().unwrap_or_default();
            let table: toml::Table = block
                .parse()
                .unwrap_or_else(|e| panic!("{}: not TOML: {e}\n{block}", path.display()));
            if let Err(errors) = Tables::from_table(&table) {
                panic!(
                    "{}: an example pidevops.toml is refused:\n{}\n{block}",
                    path.display(),
                    FileErrors(errors)
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} examples found");
}

#[test]
fn the_documented_complete_file_is_accepted_and_sets_every_key() {
    let example = DOC
        .split("## A complete file")
        .nth(1)
        .and_then(|rest| rest.split("```toml\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("a ```toml block under ## A complete file");
    let file: FileConfig = example.parse().unwrap_or_else(|e| panic!("{e}"));
    let table: toml::Table = example.parse().unwrap();
    let first = |value: &toml::Value| -> toml::Table {
        match value {
            toml::Value::Table(t) => t.values().next().and_then(|v| v.as_table()).cloned(),
            toml::Value::Array(a) => a.first().and_then(|v| v.as_table()).cloned(),
            _ => None,
        }
        .unwrap_or_default()
    };
    let at = |path: &[&str]| -> toml::Table {
        let mut node = table.clone();
        for key in path {
            node = node
                .get(*key)
                .and_then(|v| v.as_table())
                .cloned()
                .unwrap_or_default();
        }
        node
    };
    let schedule = first(&table["schedules"]);
    let tables: Vec<(&str, toml::Table)> = vec![
        ("[board]", at(&["board"])),
        // A GitHub repository's table and a GitLab one's (`draft` is GitLab's) together.
        (
            "[repos.\"owner/name\"]",
            table["repos"]
                .as_table()
                .into_iter()
                .flat_map(|repos| repos.values())
                .filter_map(|repo| repo.as_table())
                .flat_map(|repo| repo.clone())
                .collect(),
        ),
        ("[intake]", at(&["intake"])),
        ("[intake.github]", at(&["intake", "github"])),
        ("[intake.gitlab]", at(&["intake", "gitlab"])),
        ("[intake.linear]", at(&["intake", "linear"])),
        ("[dispatch]", at(&["dispatch"])),
        ("[agents.<name>]", first(&table["agents"])),
        ("[[schedules]]", schedule.clone()),
        (
            "[schedules.task]",
            schedule
                .get("task")
                .and_then(|t| t.as_table())
                .cloned()
                .unwrap_or_default(),
        ),
        ("[digest]", at(&["digest"])),
        ("[linear.states]", at(&["linear", "states"])),
        ("[telegram]", at(&["telegram"])),
        ("[slack.channels.<id>]", first(&table["slack"]["channels"])),
        ("[effects]", at(&["effects"])),
        ("[pollers.<name>]", at(&["pollers", "linear"])),
        ("[loops.<name>]", first(&table["loops"])),
        ("[plans]", at(&["plans"])),
        ("[budgets]", at(&["budgets"])),
    ];
    for (heading, keys) in schema() {
        let (_, written) = tables
            .iter()
            .find(|(h, _)| *h == heading)
            .expect("every table of the schema is looked up");
        for key in keys {
            assert!(
                written.contains_key(key),
                "the complete file lacks {heading} {key}"
            );
        }
    }
    assert_eq!(file.schedules.len(), 2, "weekly-deps and the daily digest");
}

#[test]
fn a_repository_s_code_host_is_checked_and_kept_for_intake() {
    let file: FileConfig = "[repos.\"acme/platform/api\"]\nprovider = \"gitlab\"\n\
         url = \"https://gitlab.example.com/acme/platform/api.git\"\n\
         [repos.\"acme/web\"]\n\
         [intake.gitlab]\ntrusted_users = [\"alice\"]\nbot_username = \"pidevops-bot\""
        .parse()
        .unwrap();
    let gitlab: crate::tasks::RepoName = "Acme/Platform/API".parse().unwrap();
    let github: crate::tasks::RepoName = "acme/web".parse().unwrap();
    assert_eq!(
        file.intake.hosted_on(&gitlab),
        crate::domain::Source::Gitlab
    );
    assert_eq!(
        file.intake.hosted_on(&github),
        crate::domain::Source::Github
    );
    assert!(file.board.allowed.check(&gitlab).is_ok());
    for (text, refusal) in [
        (
            "[repos.\"group/sub/app\"]\nurl = \"git@gitlab.com:group/sub/app.git\"",
            "a GitHub repository is owner/name",
        ),
        ("[repos.\"my_group/app\"]", "provider = \"gitlab\""),
        (
            "[repos.\"group/sub/app\"]\nprovider = \"gitlab\"",
            "repos.\"group/sub/app\".url: a GitLab repository names its clone URL",
        ),
        (
            "[repos.\"group/sub/app\"]\nprovider = \"gitlab\"\nurl = \"git@gitlab.com:g/s/a.git\"\nforge = \"github\"",
            "does not land through GitHub's pull requests",
        ),
        (
            "[repos.\"acme/app\"]\ndraft = true",
            "repos.\"acme/app\".draft: only a GitLab repository's merge requests open as drafts",
        ),
        (
            "[repos.\"group/sub/app\"]\nprovider = \"gitea\"",
            "provider",
        ),
        ("[intake.gitlab]\ntrusted_users = [\"-x\"]", "is not a GitLab username"),
        ("[intake.gitlab]\nbot_username = \"a b\"", "is not a GitLab username"),
        ("[intake.gitlab]\nlabel = \" \"", "intake.gitlab.label"),
    ] {
        let error = errors(text);
        assert!(error.contains(refusal), "{text}: {error}");
    }
}

#[test]
fn a_repository_s_stale_review_rule_is_bounded_and_off_by_default() {
    use crate::tasks::{StaleAction, StaleRule};
    let file: FileConfig = "[repos.\"acme/app\"]\nstale_after_h = 72\n\
         [repos.\"acme/web\"]\nstale_after_h = 1\nstale_action = \"close\"\n\
         [repos.\"acme/off\"]\nstale_after_h = 0\n[repos.\"acme/quiet\"]"
        .parse()
        .unwrap();
    let rule = |name: &str| file.board.stale_for(&name.parse().unwrap());
    assert_eq!(
        rule("Acme/App"),
        Some(StaleRule {
            after_h: 72,
            action: StaleAction::Remind
        })
    );
    assert_eq!(
        rule("acme/web"),
        Some(StaleRule {
            after_h: 1,
            action: StaleAction::Close
        })
    );
    assert_eq!(rule("acme/off"), None);
    assert_eq!(rule("acme/quiet"), None);
    for (text, refusal) in [
        (
            "[repos.\"acme/app\"]\nstale_after_h = -1",
            "repos.\"acme/app\".stale_after_h must be a whole number of hours from 0 (off) to 8784, not -1",
        ),
        (
            "[repos.\"acme/app\"]\nstale_after_h = 9000",
            "repos.\"acme/app\".stale_after_h must be a whole number of hours from 0 (off) to 8784, not 9000",
        ),
        (
            "[repos.\"acme/app\"]\nstale_action = \"close\"",
            "repos.\"acme/app\".stale_action = \"close\" does nothing without stale_after_h",
        ),
        ("[repos.\"acme/app\"]\nstale_after_h = 2\nstale_action = \"nag\"", "stale_action"),
    ] {
        let error = errors(text);
        assert!(error.contains(refusal), "{text}: {error}");
    }
}

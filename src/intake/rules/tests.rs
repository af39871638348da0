use super::*;

fn config(text: &str) -> Result<IntakeConfig, String> {
    let file = text
        .parse::<crate::config::FileConfig>()
        .map_err(|e| e.to_string())?;
    file.intake.with_telegram(Some("-100, 7"), None)
}

#[test]
fn unknown_intake_keys_are_refused_naming_them() {
    for (text, refusal) in [
        (
            "[intake]\nallow_repo = [\"acme/*\"]",
            "[intake] allow_repo: unknown key; did you mean allow_repos?",
        ),
        (
            "[intake.github]\nlabels = \"x\"",
            "[intake.github] labels: unknown key; did you mean label?",
        ),
        (
            "[intake.linear]\nstates = \"x\"",
            "[intake.linear] states: unknown key; did you mean state?",
        ),
    ] {
        assert_eq!(config(text).unwrap_err(), refusal);
    }
    let ok = config("[intake]\nallow_repos = [\"acme/*\"]\ndefault_repo = \"acme/api\"").unwrap();
    assert!(ok.allowed_repos.check(&"acme/web".parse().unwrap()).is_ok());
}

#[test]
fn telegram_commands_need_an_allowed_chat_and_when_listed_an_allowed_user() {
    let chats: BTreeSet<i64> = [-100].into_iter().collect();
    let users: BTreeSet<i64> = [5].into_iter().collect();
    assert_eq!(
        telegram_refusal(&chats, None, -100, Some(66)),
        None,
        "unset: any member"
    );
    assert_eq!(telegram_refusal(&chats, Some(&users), -100, Some(5)), None);
    for (chat, user, why) in [
        (-200, Some(5), "chat -200 is not in TELEGRAM_ALLOWED_CHATS"),
        (-100, Some(66), "user 66 is not in TELEGRAM_ALLOWED_USERS"),
        (-100, None, "without a sender"),
    ] {
        let refused = telegram_refusal(&chats, Some(&users), chat, user).unwrap();
        assert!(refused.contains(why), "{refused}");
    }
    let error = IntakeConfig::default()
        .with_telegram(None, Some("5, ada"))
        .unwrap_err();
    assert!(
        error.contains("TELEGRAM_ALLOWED_USERS") && error.contains("ada"),
        "{error}"
    );
}

#[test]
fn directive_lines_are_read_once_and_kept_out_of_the_scope() {
    let description = "repo: acme/billing\nRetry failed Stripe webhooks.\n\nDone when: retries are idempotent\nNotes: keep the queue";
    assert_eq!(
        linear_scope(description),
        "Retry failed Stripe webhooks.\n\nNotes: keep the queue"
    );
    assert_eq!(
        done_when(description).as_deref(),
        Some("retries are idempotent")
    );
    // Only the first matching line is a directive; the case of the prefix does not matter.
    assert_eq!(
        take_line("DONE WHEN: a\ndone when: b", DONE_WHEN),
        (Some("a".to_owned()), "done when: b".to_owned())
    );
    // A bare prefix with no value is not a directive and stays.
    assert_eq!(
        take_line("Done when:\nbody", DONE_WHEN),
        (None, "Done when:\nbody".to_owned())
    );
    assert_eq!(linear_scope("no directives here"), "no directives here");
}

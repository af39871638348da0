use std::num::NonZeroU64;

use proptest::prelude::*;
use uuid::Uuid;

use super::*;

/// git-check-ref-format(1) for `git check-ref-format --branch`, written out so the test needs no git.
pub(crate) fn git_accepts_branch(name: &str) -> bool {
    let forbidden = |c: char| c.is_ascii_control() || " ~^:?*[\\".contains(c);
    !name.is_empty()
        && name != "@"
        && !name.starts_with('-')
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.chars().any(forbidden)
        && name
            .split('/')
            .all(|part| !part.starts_with('.') && !part.ends_with(".lock"))
}

/// A single path segment that cannot climb, hide or split.
fn safe_path_segment(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && !s.starts_with('.')
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[test]
fn task_ids_parse_only_in_canonical_form() {
    for ok in ["T-1", "T-42", "T-18446744073709551615"] {
        assert_eq!(ok.parse::<TaskId>().unwrap().to_string(), ok);
    }
    for bad in [
        "",
        "T-",
        "T-0",
        "T-007",
        "t-1",
        "T-+1",
        "T--1",
        "T-1a",
        "T- 1",
        "T-1 ",
        "42",
        "T42",
        "T-1/..",
        "T-18446744073709551616",
        "Т-1",
    ] {
        assert_eq!(
            bad.parse::<TaskId>(),
            Err(ValueError::TaskId(bad.into())),
            "{bad:?}"
        );
    }
    assert!(serde_json::from_str::<TaskId>("\"T-0\"").is_err());
    assert!(serde_json::from_str::<TaskId>("7").is_err());
    assert_eq!(
        "T-7".parse::<TaskId>().unwrap().branch().as_str(),
        "pidevops/T-7"
    );
}

proptest! {
    #[test]
    fn every_task_id_round_trips_and_is_safe_in_paths_and_branches(n in 1u64..) {
        let id = TaskId::new(NonZeroU64::new(n).unwrap());
        let text = id.to_string();
        prop_assert_eq!(text.parse::<TaskId>(), Ok(id));
        prop_assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{text}\""));
        prop_assert_eq!(serde_json::from_str::<TaskId>(&format!("\"{text}\"")).unwrap(), id);
        prop_assert!(safe_path_segment(&text), "{text}");
        prop_assert!(git_accepts_branch(&text));
        let branch = id.branch();
        prop_assert!(git_accepts_branch(branch.as_str()));
        prop_assert_eq!(branch.as_str().parse::<BranchName>(), Ok(branch.clone()));
    }

    /// Whatever BranchName accepts, git accepts too.
    #[test]
    fn branch_names_are_a_subset_of_git_branch_names(s in "[a-zA-Z0-9._/@{}~^: -]{0,40}") {
        if let Ok(branch) = s.parse::<BranchName>() {
            prop_assert!(git_accepts_branch(branch.as_str()), "{s:?}");
        }
    }

    /// Whatever RepoName accepts is two safe path segments (dots allowed in the name, never as `..`).
    #[test]
    fn repo_names_are_safe_path_segments(s in "[a-zA-Z0-9._/ -]{0,30}") {
        if let Ok(repo) = s.parse::<RepoName>() {
            prop_assert!(!repo.owner().is_empty() && !repo.name().is_empty());
            prop_assert!(!repo.name().contains('/'));
            prop_assert!(!repo.name().starts_with('.') && !repo.name().contains(".."));
            prop_assert_eq!(format!("{}/{}", repo.owner(), repo.name()), s);
        }
    }
}

#[test]
fn branch_names_refuse_what_git_or_a_shell_would_trip_on() {
    for ok in ["pidevops/T-7", "main", "feature/a.b_c-d", "v1.2"] {
        assert!(ok.parse::<BranchName>().is_ok(), "{ok}");
    }
    for bad in [
        "",
        "-x",
        "/a",
        "a/",
        "a//b",
        "a..b",
        "a.",
        ".a",
        "a/.b",
        "a.lock",
        "a/b.lock/c",
        "a b",
        "a~1",
        "a^",
        "a:b",
        "a?",
        "a*",
        "a[b",
        "a\\b",
        "a@{1}",
        "é",
    ] {
        assert!(
            matches!(bad.parse::<BranchName>(), Err(ValueError::Branch { .. })),
            "{bad:?}"
        );
    }
    assert!("a".repeat(201).parse::<BranchName>().is_err());
}

#[test]
fn agent_names_are_lower_case_words() {
    for ok in [
        "claude",
        "codex",
        "claude-opus",
        "pi",
        "gpt_5",
        "4o",
        &"a".repeat(40),
    ] {
        let name: AgentName = ok.parse().unwrap();
        assert_eq!(name.as_str(), ok);
        assert_eq!(
            serde_json::from_str::<AgentName>(&format!("\"{ok}\"")).unwrap(),
            name
        );
    }
    for bad in [
        "",
        "Claude",
        "-x",
        "_x",
        "a b",
        "a/b",
        "../x",
        "é",
        &"a".repeat(41),
    ] {
        assert_eq!(
            bad.parse::<AgentName>(),
            Err(ValueError::Agent(bad.to_owned())),
            "{bad:?}"
        );
    }
    assert!(serde_json::from_str::<AgentName>("\"Codex\"").is_err());
}

#[test]
fn repo_names_compare_hash_and_order_ignoring_case_and_keep_their_spelling() {
    use std::collections::{BTreeMap, HashSet};
    let configured: RepoName = "local/demo".parse().unwrap();
    let typed: RepoName = "Local/Demo".parse().unwrap();
    assert_eq!(configured, typed);
    assert_eq!(typed.as_str(), "Local/Demo");
    assert_eq!(typed.key(), "local/demo");
    let map = BTreeMap::from([(configured.clone(), "settings")]);
    assert_eq!(map.get(&typed), Some(&"settings"));
    assert!(HashSet::from([configured]).contains(&typed));
    let (a, b): (RepoName, RepoName) = ("Acme/B".parse().unwrap(), "acme/a".parse().unwrap());
    assert!(b < a && a != b);
}

#[test]
fn repo_names_follow_github_rules() {
    for ok in ["rust-lang/rust", "a/b", "o-1/x.y_z", "owner/github.io"] {
        let repo: RepoName = ok.parse().unwrap();
        assert_eq!(repo.as_str(), ok);
    }
    let repo: RepoName = "acme/web.app".parse().unwrap();
    assert_eq!((repo.owner(), repo.name()), ("acme", "web.app"));
    for (bad, why) in [
        ("", "no '/'"),
        ("acme", "no '/'"),
        ("/x", "owner must be 1 to 39 characters"),
        ("acme/", "name must be 1 to 100 characters"),
        (
            "acme/a/b",
            "name may hold only letters, digits, '.', '_' and '-'",
        ),
        ("-acme/x", "owner must not start with '-'"),
        ("ac_me/x", "owner may hold only letters, digits and '-'"),
        ("acme/.x", "name must not start with '.' or '-'"),
        ("acme/-x", "name must not start with '.' or '-'"),
        ("acme/..", "name must not start with '.' or '-'"),
        ("acme/a..b", "name must not contain '..'"),
        (
            "acme/a b",
            "name may hold only letters, digits, '.', '_' and '-'",
        ),
    ] {
        assert_eq!(
            bad.parse::<RepoName>(),
            Err(ValueError::Repo {
                value: bad.into(),
                why
            }),
            "{bad:?}"
        );
    }
    assert!(format!("{}/x", "a".repeat(40)).parse::<RepoName>().is_err());
    assert!(format!("a/{}", "x".repeat(101))
        .parse::<RepoName>()
        .is_err());
    assert!(serde_json::from_str::<RepoName>("\"a/..\"").is_err());
}

#[test]
fn priorities_are_ordered_and_named() {
    assert!(Priority::Urgent > Priority::High);
    assert!(Priority::High > Priority::Normal);
    assert!(Priority::Normal > Priority::Low);
    assert_eq!(Priority::default(), Priority::Normal);
    for p in Priority::ALL {
        assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
        assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{p}\""));
    }
    let linear: Vec<_> = (0..=5).map(Priority::from_linear).collect();
    use Priority::*;
    assert_eq!(linear, [Normal, Urgent, High, Normal, Low, Normal]);
    assert!("medium".parse::<Priority>().is_err());
}

#[test]
fn columns_have_the_board_names() {
    let names: Vec<_> = Column::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        names,
        [
            "triage",
            "todo",
            "in-progress",
            "in-review",
            "done",
            "archived",
            "cancelled"
        ]
    );
    for c in Column::ALL {
        assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
        assert_eq!(c.as_str().parse::<Column>(), Ok(c));
    }
}

#[test]
fn specs_need_a_task_and_stay_bounded() {
    let spec = Spec::new("Fix login\n\nIt 500s", "src/auth only", "tests pass").unwrap();
    assert_eq!(spec.title(), "Fix login");
    assert_eq!(
        Spec::new("  \n", "", ""),
        Err(ValueError::Empty { field: "spec task" })
    );
    assert_eq!(
        Spec::new("x", "a\0b", ""),
        Err(ValueError::Nul {
            field: "spec scope"
        })
    );
    let long = "é".repeat(Spec::MAX_CHARS + 1);
    assert_eq!(
        Spec::new("x", "", long),
        Err(ValueError::TooLong {
            field: "spec done_when",
            chars: Spec::MAX_CHARS + 1,
            max: Spec::MAX_CHARS
        })
    );
    assert!(Spec::new("é".repeat(Spec::MAX_CHARS), "", "").is_ok());
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<Spec>(&json).unwrap(), spec);
    assert!(serde_json::from_str::<Spec>(r#"{"task":""}"#).is_err());
    assert_eq!(
        serde_json::from_str::<Spec>(r#"{"task":"t"}"#).unwrap(),
        Spec::new("t", "", "").unwrap()
    );
    assert_eq!(
        Spec::new("a".repeat(100), "", "")
            .unwrap()
            .title()
            .chars()
            .count(),
        80
    );
}

#[test]
fn reasons_are_checked_or_summarized() {
    assert_eq!(Reason::new(" "), Err(ValueError::Empty { field: "reason" }));
    assert!(Reason::new("x".repeat(Reason::MAX_CHARS + 1)).is_err());
    assert_eq!(Reason::summarize("  a\0b  ").as_str(), "ab");
    assert_eq!(Reason::summarize("\0 ").as_str(), "(no reason given)");
    let long = Reason::summarize(&"x".repeat(10_000));
    assert_eq!(long.as_str().chars().count(), Reason::MAX_CHARS);
    assert!(long.as_str().ends_with('…'));
    assert!(serde_json::from_str::<Reason>("\"\"").is_err());
    assert!(FollowUpText::new("").is_err());
}

#[test]
fn attempts_budget_is_bounded() {
    assert_eq!(MaxAttempts::default().get(), 3);
    assert!(MaxAttempts::new(0).is_err());
    assert!(MaxAttempts::new(MaxAttempts::CAP).is_ok());
    assert!(MaxAttempts::new(MaxAttempts::CAP + 1).is_err());
    assert!(serde_json::from_str::<MaxAttempts>("0").is_err());
    assert_eq!("auto".parse::<ApprovalPolicy>(), Ok(ApprovalPolicy::Auto));
    assert_eq!(
        serde_json::to_string(&ApprovalPolicy::Manual).unwrap(),
        "\"manual\""
    );
    assert!("Auto".parse::<ApprovalPolicy>().is_err());
}

#[test]
fn links_are_validated() {
    let id = Uuid::nil();
    assert!(LinearIssue::new(id, "ENG-123").is_ok());
    for bad in ["ENG", "ENG-", "ENG-0", "ENG-01", "-1", "E NG-1", "ENG-1-2"] {
        assert!(LinearIssue::new(id, bad).is_err(), "{bad}");
    }
    assert!(
        serde_json::from_str::<LinearIssue>(&format!(r#"{{"id":"{id}","identifier":"x"}}"#))
            .is_err()
    );
    let repo: RepoName = "a/b".parse().unwrap();
    assert_eq!(
        GithubRef::new(repo.clone(), 0),
        Err(ValueError::GithubNumber)
    );
    assert_eq!(GithubRef::new(repo, 12).unwrap().to_string(), "a/b#12");
    assert!(TelegramMessage::new(0, 1).is_err());
    assert!(TelegramMessage::new(-100, 0).is_err());
    assert!(TelegramMessage::new(-100, 1).is_ok());
    assert!(serde_json::from_str::<TelegramMessage>(r#"{"chat":0,"message":1}"#).is_err());
    assert_eq!(
        serde_json::to_string(&Links::default()).unwrap(),
        "{}",
        "unset links stay out of events"
    );
}

/// The stored shape of links, pinned: events already in logs must read back, and write out byte for byte the
/// same, whatever `Links` becomes (a map keyed by provider, say).
#[test]
fn stored_links_read_back_and_write_out_byte_for_byte() {
    const STORED: &str = r#"{"type":"links_attached","at":"2026-01-02T03:04:05Z","links":{"linear_issue":{"id":"8f1c2b0e-5d3a-4c1e-9b7a-0a1b2c3d4e5f","identifier":"ENG-42"},"github_issue":{"repo":"acme/api","number":7},"github_pr":{"repo":"acme/api","number":9},"telegram":{"chat":-100123,"message":55}}}"#;
    let event: crate::tasks::TaskEvent = serde_json::from_str(STORED).unwrap();
    let crate::tasks::TaskEvent::LinksAttached { links, .. } = &event else {
        panic!("{event:?}");
    };
    assert_eq!(links.linear_issue.as_ref().unwrap().identifier(), "ENG-42");
    assert_eq!(links.github_pr.as_ref().unwrap().to_string(), "acme/api#9");
    assert_eq!(links.telegram.unwrap().message(), 55);
    assert_eq!(serde_json::to_string(&event).unwrap(), STORED);
    // One link: the others stay out.
    const ONE: &str = r#"{"telegram":{"chat":5,"message":1}}"#;
    let one: Links = serde_json::from_str(ONE).unwrap();
    assert_eq!(serde_json::to_string(&one).unwrap(), ONE);
}

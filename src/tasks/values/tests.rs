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

    /// Whatever RepoName accepts is safe path segments (dots allowed, never as `..` or a leading one), and its
    /// namespace one directory name.
    #[test]
    fn repo_names_are_safe_path_segments(s in "[a-zA-Z0-9._/+ -]{0,40}") {
        if let Ok(repo) = s.parse::<RepoName>() {
            prop_assert!(!repo.namespace().is_empty() && !repo.name().is_empty());
            prop_assert!(!repo.name().contains('/'));
            for segment in repo.segments() {
                prop_assert!(!segment.is_empty() && !segment.starts_with('.') && !segment.starts_with('-'));
                prop_assert!(!segment.contains("..") && !segment.contains('+'));
            }
            let dir = repo.namespace_dir();
            prop_assert!(!dir.contains('/') && !dir.starts_with('.') && !dir.contains(".."));
            prop_assert_eq!(format!("{}/{}", repo.namespace(), repo.name()), s.clone());
            prop_assert_eq!(RepoName::from_dirs(&dir, repo.name()).map(|r| r.as_str().to_owned()), Some(s));
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
fn repo_names_follow_the_hosts_rules() {
    for ok in [
        "rust-lang/rust",
        "a/b",
        "o-1/x.y_z",
        "owner/github.io",
        "group/sub/name",
        "my_group/sub.team/app",
    ] {
        let repo: RepoName = ok.parse().unwrap();
        assert_eq!(repo.as_str(), ok);
    }
    let repo: RepoName = "acme/web.app".parse().unwrap();
    assert_eq!((repo.namespace(), repo.name()), ("acme", "web.app"));
    let nested: RepoName = "group/sub/deeper/app".parse().unwrap();
    assert_eq!(
        (nested.namespace(), nested.name()),
        ("group/sub/deeper", "app")
    );
    assert_eq!(
        nested.segments().collect::<Vec<_>>(),
        ["group", "sub", "deeper", "app"]
    );
    let deepest = format!("{}/app", vec!["g"; 20].join("/"));
    assert!(deepest.parse::<RepoName>().is_ok(), "20 groups deep");
    for (bad, why) in [
        ("", "no '/'"),
        ("acme", "no '/'"),
        ("/x", "each segment must be 1 to 100 characters"),
        ("acme/", "each segment must be 1 to 100 characters"),
        ("a//b", "each segment must be 1 to 100 characters"),
        ("group/sub/", "each segment must be 1 to 100 characters"),
        ("-acme/x", "a segment must not start with '.' or '-'"),
        ("acme/.x", "a segment must not start with '.' or '-'"),
        ("acme/-x", "a segment must not start with '.' or '-'"),
        ("acme/..", "a segment must not start with '.' or '-'"),
        ("group/../x", "a segment must not start with '.' or '-'"),
        (
            "group/.hidden/x",
            "a segment must not start with '.' or '-'",
        ),
        ("group/-sub/x", "a segment must not start with '.' or '-'"),
        ("acme/a..b", "a segment must not contain '..'"),
        ("gr..oup/sub/x", "a segment must not contain '..'"),
        ("group.git/x", "a group must not end in '.git' or '.atom'"),
        ("g/sub.ATOM/x", "a group must not end in '.git' or '.atom'"),
        (
            "acme/a b",
            "a segment may hold only letters, digits, '.', '_' and '-'",
        ),
        (
            "group/s+b/x",
            "a segment may hold only letters, digits, '.', '_' and '-'",
        ),
        (
            "group\\sub/x",
            "a segment may hold only letters, digits, '.', '_' and '-'",
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
    let too_deep = format!("{}/app", vec!["g"; 21].join("/"));
    assert_eq!(
        too_deep.parse::<RepoName>(),
        Err(ValueError::Repo {
            value: too_deep.clone(),
            why: "a namespace is at most 20 groups deep"
        })
    );
    assert!(format!("a/{}", "x".repeat(101))
        .parse::<RepoName>()
        .is_err());
    assert!(serde_json::from_str::<RepoName>("\"a/..\"").is_err());
    assert!(serde_json::from_str::<RepoName>("\"a/b/../c\"").is_err());
}

#[test]
fn only_a_two_segment_name_with_a_github_owner_has_github_parts() {
    let repo: RepoName = "rust-lang/rust".parse().unwrap();
    assert_eq!(repo.github_parts(), Some(("rust-lang", "rust")));
    // GitLab-valid, not GitHub-valid: no GitHub route is ever built from these.
    for not_github in [
        "group/sub/name",
        "ac_me/x",
        "my.group/x",
        &format!("{}/x", "a".repeat(40)),
    ] {
        let repo: RepoName = not_github.parse().unwrap();
        assert_eq!(repo.github_parts(), None, "{not_github}");
    }
}

#[test]
fn a_namespace_is_one_directory_and_reads_back() {
    let github: RepoName = "acme/api".parse().unwrap();
    assert_eq!(github.namespace_dir(), "acme");
    let nested: RepoName = "Group/Sub/app".parse().unwrap();
    assert_eq!(nested.namespace_dir(), "Group+Sub");
    assert_eq!(RepoName::from_dirs("Group+Sub", "app"), Some(nested));
    assert_eq!(RepoName::from_dirs("acme", "api"), Some(github));
    // A directory no name makes reads back as nothing, never as a climbing path.
    for (dir, name) in [("..", "x"), ("a+..", "x"), ("a++b", "x"), ("a", "..")] {
        assert_eq!(RepoName::from_dirs(dir, name), None, "{dir} {name}");
    }
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

/// The stored shape of links, pinned: events already in logs read back unchanged whatever `Links` is. Written
/// out, a `Links` map orders its keys (and a value's fields) by name: the same JSON value, deterministic bytes.
#[test]
fn stored_links_read_back_and_write_out_the_same_value_in_key_order() {
    const STORED: &str = r#"{"type":"links_attached","at":"2026-01-02T03:04:05Z","links":{"linear_issue":{"id":"8f1c2b0e-5d3a-4c1e-9b7a-0a1b2c3d4e5f","identifier":"ENG-42"},"github_issue":{"repo":"acme/api","number":7},"github_pr":{"repo":"acme/api","number":9},"telegram":{"chat":-100123,"message":55}}}"#;
    const WRITTEN: &str = r#"{"type":"links_attached","at":"2026-01-02T03:04:05Z","links":{"github_issue":{"number":7,"repo":"acme/api"},"github_pr":{"number":9,"repo":"acme/api"},"linear_issue":{"id":"8f1c2b0e-5d3a-4c1e-9b7a-0a1b2c3d4e5f","identifier":"ENG-42"},"telegram":{"chat":-100123,"message":55}}}"#;
    let event: crate::tasks::TaskEvent = serde_json::from_str(STORED).unwrap();
    let crate::tasks::TaskEvent::LinksAttached { links, .. } = &event else {
        panic!("{event:?}");
    };
    let linear = links.get(LINEAR_ISSUE).unwrap();
    assert_eq!(linear.identifier(), "ENG-42");
    assert_eq!(
        linear.id().to_string(),
        "8f1c2b0e-5d3a-4c1e-9b7a-0a1b2c3d4e5f"
    );
    assert_eq!(links.get(GITHUB_ISSUE).unwrap().to_string(), "acme/api#7");
    assert_eq!(links.get(GITHUB_PR).unwrap().to_string(), "acme/api#9");
    assert_eq!(links.get(TELEGRAM).unwrap().message(), 55);
    assert_eq!(links.get(TELEGRAM).unwrap().chat(), -100_123);
    let written = serde_json::to_string(&event).unwrap();
    let value = |json: &str| serde_json::from_str::<serde_json::Value>(json).unwrap();
    assert_eq!(value(&written), value(STORED), "the same JSON value");
    assert_eq!(written, WRITTEN, "keys in name order");
    let again: crate::tasks::TaskEvent = serde_json::from_str(&written).unwrap();
    assert_eq!(again, event);
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        written,
        "the same bytes every time"
    );
    // One link: the others stay out.
    const ONE: &str = r#"{"telegram":{"chat":5,"message":1}}"#;
    let one: Links = serde_json::from_str(ONE).unwrap();
    assert_eq!(serde_json::to_string(&one).unwrap(), ONE);
}

fn pr(number: u64) -> GithubRef {
    GithubRef::new("acme/api".parse().unwrap(), number).unwrap()
}

#[test]
fn a_link_is_set_once_and_only_a_replaceable_one_is_replaced() {
    let mut links = Links::default();
    assert!(!links.has(GITHUB_ISSUE));
    assert_eq!(links.get(GITHUB_ISSUE), None);
    links.set(GITHUB_ISSUE, &pr(7)).unwrap();
    assert_eq!(links.get(GITHUB_ISSUE), Some(pr(7)));
    // The same value again changes nothing; another is refused, naming both.
    links.set(GITHUB_ISSUE, &pr(7)).unwrap();
    let refused = links.set(GITHUB_ISSUE, &pr(8)).unwrap_err();
    assert_eq!(refused.link, "github_issue");
    assert_eq!(refused.existing_shown(), "acme/api#7");
    assert_eq!(refused.proposed_shown(), "acme/api#8");
    assert_eq!(links.get(GITHUB_ISSUE), Some(pr(7)));
    // The pull request is replaceable; the same type under another key is another link.
    links.set(GITHUB_PR, &pr(9)).unwrap();
    links.set(GITHUB_PR, &pr(10)).unwrap();
    assert_eq!(links.get(GITHUB_PR), Some(pr(10)));
    assert_eq!(links.get(GITHUB_ISSUE), Some(pr(7)));
    assert!(GITHUB_PR.is_replaceable());
    assert!(!GITHUB_ISSUE.is_replaceable() && !LINEAR_ISSUE.is_replaceable());
    assert!(!TELEGRAM.is_replaceable());
}

#[test]
fn attached_links_add_what_is_missing_and_refuse_a_different_value() {
    let have = Links::default().with(GITHUB_ISSUE, &pr(7));
    let proposed = Links::default()
        .with(GITHUB_ISSUE, &pr(7))
        .with(TELEGRAM, &TelegramMessage::new(5, 1).unwrap());
    let added = have.missing_from(&proposed).unwrap();
    assert_eq!(
        added,
        Links::default().with(TELEGRAM, &TelegramMessage::new(5, 1).unwrap())
    );
    let mut merged = have.clone();
    merged.add_missing(added);
    assert_eq!(merged, proposed);
    assert!(have.missing_from(&have).unwrap().is_empty());
    // Attaching never replaces, not even the replaceable pull request: only a submission does.
    let with_pr = Links::default().with(GITHUB_PR, &pr(9));
    let conflict = with_pr
        .missing_from(&Links::default().with(GITHUB_PR, &pr(10)))
        .unwrap_err();
    assert_eq!(conflict.link, "github_pr");
}

/// A key this build does not know (a newer provider's link) reads back and is written back, not dropped.
#[test]
fn unknown_links_are_kept() {
    const STORED: &str = r#"{"github_pr":{"number":9,"repo":"acme/api"},"zulip_thread":{"channel":"C1","ts":"17.5"}}"#;
    let links: Links = serde_json::from_str(STORED).unwrap();
    assert_eq!(links.get(GITHUB_PR), Some(pr(9)));
    assert_eq!(serde_json::to_string(&links).unwrap(), STORED);
    let names: Vec<&str> = links.iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["github_pr", "zulip_thread"]);
    // A provider's own key reads it typed, with no change to `Links`.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Thread {
        channel: String,
        ts: String,
    }
    const ZULIP: LinkKey<Thread> = LinkKey::new("zulip_thread", false);
    assert_eq!(links.get(ZULIP).unwrap().channel, "C1");
    // Its conflicts show its JSON, as no `Display` is known for it.
    let other = Links::default().with(
        ZULIP,
        &Thread {
            channel: "C2".into(),
            ts: "1".into(),
        },
    );
    let conflict = links.missing_from(&other).unwrap_err();
    assert_eq!(conflict.existing_shown(), r#"{"channel":"C1","ts":"17.5"}"#);
}

/// A stored value that does not read as its key's type is absent, never a panic; `null` is absent too.
#[test]
fn a_link_that_does_not_parse_is_absent() {
    let links: Links = serde_json::from_str(
        r#"{"github_pr":{"repo":"not a repo","number":0},"telegram":"55","linear_issue":null}"#,
    )
    .unwrap();
    assert_eq!(links.get(GITHUB_PR), None);
    assert!(!links.has(GITHUB_PR));
    assert_eq!(links.get(TELEGRAM), None);
    assert_eq!(links.get(LINEAR_ISSUE), None);
    assert_eq!(
        links.iter().count(),
        2,
        "null is absent; the others are kept as stored"
    );
    assert_eq!(
        serde_json::to_string(&links).unwrap(),
        r#"{"github_pr":{"number":0,"repo":"not a repo"},"telegram":"55"}"#
    );
    // A task's conflict message shows it as stored.
    let conflict = links
        .missing_from(&Links::default().with(GITHUB_PR, &pr(1)))
        .unwrap_err();
    assert_eq!(
        conflict.existing_shown(),
        r#"{"number":0,"repo":"not a repo"}"#
    );
}

/// A caller's links (`POST /api/tasks`) are read as strictly as typed fields were: a known key's bad value is
/// refused by name, an unknown key dropped.
#[test]
fn given_links_are_known_keys_read_as_their_types() {
    #[derive(Debug, serde::Deserialize)]
    struct Given {
        #[serde(deserialize_with = "Links::deserialize_given")]
        links: Links,
    }
    let given: Given = serde_json::from_str(
        r#"{"links":{"github_issue":{"repo":"acme/api","number":7},"made_up":{"x":1},"telegram":null}}"#,
    )
    .unwrap();
    assert_eq!(given.links, Links::default().with(GITHUB_ISSUE, &pr(7)));
    let refused = serde_json::from_str::<Given>(
        r#"{"links":{"linear_issue":{"id":"8f1c2b0e-5d3a-4c1e-9b7a-0a1b2c3d4e5f","identifier":"eng 4"}}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(refused.contains("links.linear_issue"), "{refused}");
    assert!(refused.contains("is not TEAM-<n>"), "{refused}");
}

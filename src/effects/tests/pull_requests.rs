//! What the GitHub policy asks for: pull requests (their text inert), merges, replies to comments.

use super::*;
use crate::tasks::{GITHUB_ISSUE, LINEAR_ISSUE};

#[test]
fn a_task_in_review_asks_for_one_pull_request_to_its_repositorys_base() {
    use crate::tasks::{Command, GithubRef, LinearIssue, Links, RunId, Spec};
    let repo: crate::tasks::RepoName = "acme/app".parse().unwrap();
    let (task, started) = started_task(
        "T-9",
        Spec::new("Fix the login redirect", "src/auth", "the e2e test passes").unwrap(),
        Links::default()
            .with(GITHUB_ISSUE, &GithubRef::new(repo.clone(), 12).unwrap())
            .with(
                LINEAR_ISSUE,
                &LinearIssue::new(uuid::Uuid::from_u128(5), "ENG-4").unwrap(),
            ),
        1,
    );
    let run = RunId(uuid::Uuid::from_u128(1));
    let config = policy::PolicyConfig {
        bases: [(repo.clone(), "develop".to_owned())].into_iter().collect(),
        ..Default::default()
    };
    let telegram_chats = [-100];
    assert!(
        policy::github(&started[0], &task, &config).is_empty(),
        "a start asks for nothing"
    );
    let (task, submitted) = apply(
        Some(task),
        Command::SubmitForReview {
            run,
            branch: "pidevops/T-9".parse().unwrap(),
            pr: None,
            report: Default::default(),
        },
    );
    let requests = policy::github(&submitted[0], &task, &config);
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].key, "github:pr:T-9",
        "one pull request per task, whatever the attempt"
    );
    let GithubAction::OpenPullRequest {
        head,
        base,
        title,
        body,
        ..
    } = &requests[0].action
    else {
        panic!("a pull request: {requests:?}");
    };
    assert_eq!((head.as_str(), base.as_str()), ("pidevops/T-9", "develop"));
    assert_eq!(title, "T-9: Fix the login redirect");
    assert_eq!(
        body,
        "## Task\nFix the login redirect\n\n## Scope\nsrc/auth\n\n## Done when\nthe e2e test passes\n\n---\n\
         From: Closes #12, Linear ENG-4\nOpened by pidevops for T-9 after attempt 1 of 3. Receipt: `GET /api/tasks/T-9/receipt` or \
         `pidevops receipt T-9`, checked with `pidevops verify --receipt`.\n"
    );

    // Once it is open, the issue the task came from hears of it, once.
    let comments =
        policy::after_pull_request(&task, 31, "https://github.com/acme/app/pull/31", at(5));
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].key, "github:comment:T-9:pull-request");
    let GithubAction::Comment {
        repo: on,
        number,
        body,
        since,
    } = &comments[0].action
    else {
        panic!("a comment: {comments:?}");
    };
    assert_eq!((on.as_str(), *number), ("acme/app", 12));
    assert_eq!(
        body,
        "pidevops worked on this as T-9 and opened #31 for review (attempt 1 of 3).\n\n\
         <!-- pidevops:github:comment:T-9:pull-request -->"
    );
    assert_eq!(*since, at(5) - chrono::Duration::minutes(10));

    // Telegram hears of the review, once per chat, keyed by the event.
    assert!(policy::telegram_notifies(&submitted[0]));
    assert!(
        !policy::telegram_notifies(&started[0]),
        "a start is not news"
    );
    let told = policy::telegram(&submitted[0], &task, "e-1", &telegram_chats);
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].key, "telegram:notify:-100:e-1");
    assert_eq!(
        told[0].action,
        TelegramAction::Send {
            chat: -100,
            html: "👀 <b>T-9</b> Fix the login redirect <i>(acme/app)</i>\nready for review on \
                   <code>pidevops/T-9</code> (attempt 1 of 3)"
                .into(),
            buttons: Vec::new(),
            reply_prompt: None,
        }
    );
    assert!(
        !told[0].action.safe_to_repeat(),
        "a message cut off is never sent twice"
    );
}

/// Whether GitHub could read `text` as a mention, an issue reference, a closing keyword or an entity that renders
/// into one of those (a stricter reading than GitHub's own: anything it might take counts).
fn live_for_github(text: &str) -> Option<String> {
    const ZWSP: char = '\u{200B}';
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        match c {
            '@' if next != Some(ZWSP) => return Some(format!("a live @ at {i}")),
            '#' if next.is_some_and(|n| !n.is_whitespace() && n != '#' && n != ZWSP) => {
                return Some(format!("a live # reference at {i}"))
            }
            '&' if next.is_some_and(|n| n == '#' || n.is_ascii_alphabetic())
                && !chars[i..].starts_with(&['&', 'a', 'm', 'p', ';']) =>
            {
                return Some(format!("an entity at {i}"))
            }
            _ => {}
        }
    }
    // GitHub's closing syntax: a keyword, an optional colon, spaces, then what it closes.
    let closing = regex::Regex::new(
        r"(?i)\b(close[sd]?|fix(e[sd])?|resolve[sd]?):?\s+(#|[\w.-]+/[\w.-]+#|https?://|gh-\d|&)",
    )
    .unwrap();
    if let Some(found) = closing.find(text) {
        return Some(format!("the closing reference {:?}", found.as_str()));
    }
    let lower = text.to_ascii_lowercase();
    lower
        .match_indices("gh-")
        .any(|(at, _)| lower[at + 3..].starts_with(|c: char| c.is_ascii_digit()))
        .then(|| "a GH- reference".to_owned())
}

#[test]
fn ticket_text_cannot_ping_or_close_anything_on_github_and_stays_readable() {
    let hostile = [
        "@octocat please look",
        "cc @acme/security-team",
        "ping\n@admin",
        "(@root)",
        "`@inline`",
        "fixes #1",
        "Fixes #1",
        "FIXES: #1",
        "closes acme/other#7",
        "Closed #3, resolved #4 and Resolves: #5",
        "fix https://github.com/acme/app/issues/9",
        "close\tGH-12",
        "Fixes\n#8",
        "fix(#9)",
        "prefix-fixes #2",
        "see #12 and acme/app#13",
        "&#64;octocat and &commat;octocat and &#x40;octocat",
        "&#35;12 fixes",
        "fi&#120;es #1",
        "email me at ops@acme.example",
        "@\u{200B}already inert",
        "## Heading stays a heading\n# and so does this",
    ];
    for text in hostile {
        let out = policy::inert(text);
        assert_eq!(live_for_github(&out), None, "{text:?} became {out:?}");
        // Readable: the same text once the invisible spaces and the escaped ampersands are taken out.
        assert_eq!(
            out.replace('\u{200B}', "").replace("&amp;", "&"),
            text.replace('\u{200B}', ""),
            "{text:?}"
        );
    }
    assert_eq!(
        policy::inert("## Heading\n# Top"),
        "## Heading\n# Top",
        "headings are not references"
    );
    for plain in [
        "Fix the login redirect",
        "It closes the gap; resolved by hand",
    ] {
        assert_eq!(policy::inert(plain), plain, "plain words stay as typed");
    }
}

/// The agent's own summary (`.pidevops/status.json`) in the pull request: plain text, like the review's. No
/// link, image, HTML, heading or mention it wrote takes effect.
#[test]
fn the_agents_summary_in_a_pull_request_is_plain_and_inert() {
    use crate::tasks::{AttemptReport, Command, Links, RunId, Spec};
    let (task, _) = started_task(
        "T-9",
        Spec::new("Fix the login redirect", "", "").unwrap(),
        Links::default(),
        1,
    );
    let run = RunId(uuid::Uuid::from_u128(1));
    let summary = "# Done\n[Approve here](https://evil.example) <img src=x onerror=alert(1)> ![p](https://evil.example/p.png)\nFixes #1, cc @acme/everyone";
    let (task, submitted) = apply(
        Some(task),
        Command::SubmitForReview {
            run,
            branch: "pidevops/T-9".parse().unwrap(),
            pr: None,
            report: Box::new(AttemptReport {
                summary: Some(summary.to_owned()),
                ..AttemptReport::default()
            }),
        },
    );
    let requests = policy::github(&submitted[0], &task, &policy::PolicyConfig::default());
    let GithubAction::OpenPullRequest { body, .. } = &requests[0].action else {
        panic!("a pull request: {requests:?}");
    };
    let section = body
        .split_once("## The agent's summary\n")
        .and_then(|(_, rest)| rest.split_once("\n---\n"))
        .map(|(section, _)| section)
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(live_for_github(section), None, "{section:?}");
    assert!(!section.starts_with('#'), "a heading: {section:?}");
    for markup in ["[Approve here](", "![p]("] {
        assert!(!section.contains(markup), "{markup} live in {section:?}");
    }
    let html = regex::Regex::new(r"(^|[^\\])<").unwrap();
    assert!(!html.is_match(section), "live HTML: {section:?}");
    // Still readable: the escapes taken out, the agent's words are all there.
    let read = section.replace(['\u{200B}', '\\'], "");
    assert!(
        read.contains("[Approve here](https://evil.example)"),
        "{read}"
    );
    assert!(read.contains("Fixes #1, cc @acme/everyone"), "{read}");
}

#[test]
fn a_pull_request_from_hostile_ticket_text_has_no_live_mention_or_closing_keyword() {
    use crate::tasks::{Command, GithubRef, Links, RepoName, RunId, Spec};
    let repo: RepoName = "acme/app".parse().unwrap();
    let (task, _) = started_task(
        "T-9",
        Spec::new(
            "Fixes #1 for @acme/everyone",
            "closes acme/app#2, cc @octocat",
            "Resolved: GH-3 &#64;admin",
        )
        .unwrap(),
        Links::default().with(GITHUB_ISSUE, &GithubRef::new(repo.clone(), 12).unwrap()),
        1,
    );
    let run = RunId(uuid::Uuid::from_u128(1));
    let (task, submitted) = apply(
        Some(task),
        Command::SubmitForReview {
            run,
            branch: "pidevops/T-9".parse().unwrap(),
            pr: None,
            report: Default::default(),
        },
    );
    let requests = policy::github(&submitted[0], &task, &policy::PolicyConfig::default());
    let GithubAction::OpenPullRequest { title, body, .. } = &requests[0].action else {
        panic!("a pull request: {requests:?}");
    };
    assert_eq!(live_for_github(title), None, "{title:?}");
    let (ticket, ours) = body.split_once("\n---\n").expect("pidevops's own footer");
    assert_eq!(live_for_github(ticket), None, "{ticket:?}");
    // Only pidevops's own line links the source issue.
    assert!(ours.contains("From: Closes #12\n"), "{ours:?}");
    let comments =
        policy::after_pull_request(&task, 31, "https://github.com/acme/app/pull/31", at(5));
    let GithubAction::Comment { body, .. } = &comments[0].action else {
        panic!("a comment: {comments:?}");
    };
    assert!(!body.contains("@") && !body.contains("Fixes"), "{body:?}");
}

#[test]
fn a_ready_task_asks_for_one_merge_of_its_head_and_a_waiting_one_for_none() {
    use crate::tasks::{
        Command, CommitSha, FactName, GithubRef, LandConfig, LandMode, MergeMethod, RunId, Spec,
    };
    let repo: crate::tasks::RepoName = "acme/app".parse().unwrap();
    let (task, _) = started_task(
        "T-9",
        Spec::new("Fix the login redirect", "src/auth", "CI is green").unwrap(),
        Default::default(),
        1,
    );
    let run = RunId(uuid::Uuid::from_u128(1));
    let (task, _) = apply(
        Some(task),
        Command::SubmitForReview {
            run,
            branch: "pidevops/T-9".parse().unwrap(),
            pr: Some(GithubRef::new(repo.clone(), 4).unwrap()),
            report: Default::default(),
        },
    );
    let sha = CommitSha::new("0123456789abcdef0123456789abcdef01234567").unwrap();
    let (task, _) = apply(
        Some(task),
        Command::RecordCheckPassed {
            sha: sha.clone(),
            name: FactName::new("check", "ci").unwrap(),
        },
    );
    let rules = LandConfig {
        mode: LandMode::Auto,
        approvals: 1,
        required_checks: vec!["ci".into()],
        merge_method: Some(MergeMethod::Rebase),
        refresh: Default::default(),
    };
    assert_eq!(policy::land(&task, &rules), None, "an approval is missing");
    let (task, _) = apply(
        Some(task),
        Command::RecordApproval {
            by: FactName::new("reviewer", "octocat").unwrap(),
            sha: sha.clone(),
        },
    );
    let merge = policy::land(&task, &rules).expect("ready");
    assert_eq!(merge.key, format!("github:merge:T-9:{sha}"));
    assert_eq!(merge.key, policy::merge_key(task.id(), &sha));
    assert_eq!(
        merge.action,
        GithubAction::MergePullRequest {
            repo,
            number: 4,
            sha,
            method: Some(MergeMethod::Rebase),
        }
    );
    assert!(
        merge.action.safe_to_repeat(),
        "it reads the pull request first"
    );
    assert_eq!(merge.action.name(), "github_merge_pull_request");
    let manual = LandConfig {
        mode: LandMode::Manual,
        ..rules
    };
    assert_eq!(policy::land(&task, &manual), None);
}

mod github_comments {
    use super::*;
    use crate::intake::{CommentOutcome, CommentRecord};
    use crate::providers::github::effects::{comment_answered, comment_reply};
    use crate::tasks::Column;

    fn record(outcome: CommentOutcome) -> CommentRecord {
        CommentRecord {
            repo: "Acme/App".parse().unwrap(),
            number: 12,
            pull_request: false,
            comment: 991,
            login: "ada".into(),
            task: Some("T-7".parse().unwrap()),
            outcome,
            cause_event_id: uuid::Uuid::nil(),
        }
    }

    #[test]
    fn a_comment_gets_eyes_then_one_reply_each_keyed_by_the_comment() {
        let requests = comment_answered(&record(CommentOutcome::Answered), at(0));
        let keys: Vec<&str> = requests.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            ["github:reaction:acme/app:991", "github:reply:acme/app:991"]
        );
        assert!(requests
            .iter()
            .all(|r| r.task == Some("T-7".parse().unwrap())));
        assert_eq!(
            requests[0].action,
            GithubAction::Reaction {
                repo: "Acme/App".parse().unwrap(),
                comment: 991,
                content: "eyes".into()
            }
        );
        let GithubAction::Comment { number, body, .. } = &requests[1].action else {
            panic!("a reply: {:?}", requests[1].action);
        };
        assert_eq!(*number, 12);
        assert!(
            body.ends_with("<!-- pidevops:github:reply:acme/app:991 -->"),
            "{body}"
        );
        assert!(GithubAction::Reaction {
            repo: "acme/app".parse().unwrap(),
            comment: 1,
            content: "eyes".into()
        }
        .safe_to_repeat());
    }

    #[test]
    fn replies_say_what_came_of_it_and_quote_nothing_live() {
        let reply = |outcome| comment_reply(&record(outcome), "Pull request");
        assert_eq!(
            reply(CommentOutcome::Queued { sent_back: false }),
            "Queued for T-7's next run."
        );
        assert_eq!(
            reply(CommentOutcome::Steered {
                command: "cancel".into(),
                column: Column::Cancelled
            }),
            "T-7 cancelled."
        );
        assert_eq!(
            reply(CommentOutcome::Status {
                column: Column::InReview,
                attempts: 2,
                max_attempts: 3,
                needs_human: Some("ask @octocat about #12".into()),
                pull_request: Some("acme/app#31".into()),
            }),
            "T-7 is in review, attempt 2 of 3. It needs a human: ask @\u{200B}octocat about #\u{200B}12. \
             Pull request: acme/app#31."
        );
        let unknown = reply(CommentOutcome::Unknown {
            given: "`@everyone`".into(),
        });
        assert_eq!(
            unknown,
            "`/pidevops @\u{200B}everyone` is not a command; the commands are retry, cancel, approve, status."
        );
        assert!(reply(CommentOutcome::Unknown {
            given: String::new()
        })
        .contains("one of retry"));
        assert_eq!(
            reply(CommentOutcome::NoTask {
                why: "closes #3".into()
            }),
            "No task: c\u{200B}loses #\u{200B}3."
        );
    }
}

#[test]
fn named_agent_configuration_is_listed_in_the_pull_request_and_its_paths_stay_inert() {
    assert_eq!(pull_request::agent_config_section(&[]), "");
    let section = pull_request::agent_config_section(&[
        ".claude/settings.json".to_owned(),
        ".github/workflows/x`\n## Fixes #1 @acme/everyone.yml".to_owned(),
    ]);
    assert!(
        section.starts_with("\n## Agent and hook configuration\n"),
        "{section}"
    );
    assert!(
        section.contains("\n- `.claude/settings.json`\n"),
        "{section}"
    );
    // One list line per path: a path's backtick or line break cannot end its code span or start a heading.
    let lines: Vec<&str> = section.lines().filter(|l| l.starts_with("- ")).collect();
    assert_eq!(lines.len(), 2, "{section}");
    assert!(!section.contains("\n## Fixes"), "{section}");
    assert!(
        !section.contains("Fixes #1"),
        "closing keyword made inert: {section}"
    );
}

use crate::effects::ProviderAction;
use chrono::{TimeZone, Utc};

use super::*;
use crate::tasks::{Command, Links, MaxAttempts, NewTask, Priority, Reason, Spec};

fn created(approval: ApprovalPolicy, title: &str) -> (Task, Vec<TaskEvent>) {
    let at = Utc.timestamp_opt(1_750_000_000, 0).single().unwrap();
    let thread = SlackThread::new("C1", Some("1700000000.000100")).unwrap();
    let new = NewTask {
        id: "T-7".parse().unwrap(),
        repo: "acme/app".parse().unwrap(),
        spec: Spec::new(title, "", "").unwrap(),
        priority: Priority::Normal,
        links: Links::default().with(SLACK_THREAD, &thread),
        approval,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    };
    let events = crate::tasks::decide(None, &Command::Create(Box::new(new)), at).unwrap();
    let mut task = None;
    for event in &events {
        task = Some(crate::tasks::evolve(task, event).unwrap());
    }
    (task.unwrap(), events)
}

/// A post's channel, thread, text, buttons and whether it asks.
type Post<'a> = (
    &'a str,
    Option<&'a str>,
    &'a str,
    &'a [(String, String)],
    bool,
);

fn post(request: &Request<SlackAction>) -> Post<'_> {
    let SlackAction::Post {
        channel,
        thread,
        text,
        buttons,
        question,
    } = &request.action
    else {
        panic!("a post: {request:?}");
    };
    (channel, thread.as_deref(), text, buttons, *question)
}

#[test]
fn a_manual_task_waits_in_its_thread_with_approve_and_reject_escaped() {
    let (task, events) = created(ApprovalPolicy::Manual, "Fix <!channel> & co");
    let requests = slack(&events[0], &task, "C1", "1.2", "e-1", None);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].key, "slack:notify:C1:e-1");
    let (channel, thread, text, buttons, question) = post(&requests[0]);
    assert_eq!((channel, thread, question), ("C1", Some("1.2"), false));
    assert_eq!(
        text,
        "🆕 *T-7* Fix &lt;!channel&gt; &amp; co _(acme/app)_\nwaits for approval"
    );
    assert_eq!(
        buttons,
        [
            ("Approve".to_owned(), "approve:T-7".to_owned()),
            ("Reject".to_owned(), "reject:T-7".to_owned())
        ]
    );
    assert_eq!(
        buttons::parse_value(&buttons[0].1).map(|(_, id)| id),
        Some(task.id())
    );
}

#[test]
fn the_story_goes_on_in_the_thread_and_a_question_is_one() {
    let (task, events) = created(ApprovalPolicy::Auto, "Fix it");
    let on_it = slack(&events[0], &task, "C1", "1.2", "e-1", None);
    assert!(post(&on_it[0]).2.ends_with("\non it"), "{on_it:?}");
    assert!(post(&on_it[0]).3.is_empty());
    let at = Utc.timestamp_opt(1_750_000_100, 0).single().unwrap();
    let asked = TaskEvent::FlaggedNeedsHuman {
        at,
        reason: Reason::new("which <b>branch</b>?").unwrap(),
        question: true,
    };
    let requests = slack(&asked, &task, "C1", "1.2", "e-2", None);
    let (_, thread, text, buttons, question) = post(&requests[0]);
    assert_eq!(thread, Some("1.2"));
    assert!(question);
    assert!(
        text.contains("the agent asks: which &lt;b&gt;branch&lt;/b&gt;?"),
        "{text}"
    );
    assert_eq!(buttons[0].1, "retry:T-7");
    assert_eq!(buttons[1].1, "cancel:T-7");
    let automatic = TaskEvent::Approved {
        at,
        automatic: true,
    };
    assert!(slack(&automatic, &task, "C1", "1.2", "e-3", None).is_empty());
    let done = TaskEvent::Completed { at };
    assert!(post(&slack(&done, &task, "C1", "1.2", "e-4", None)[0])
        .2
        .ends_with("done"));
}

#[test]
fn a_slash_commands_thread_is_rooted_by_pidevops_and_recorded_from_its_post() {
    let (task, _) = created(ApprovalPolicy::Auto, "Fix it");
    let root = slack_root(&task, "C1");
    assert_eq!(root.key, "slack:root:T-7");
    assert_eq!(post(&root).1, None);
    let seen = slack_seen(task.id(), "C1", "1.2");
    assert_eq!(seen.key, "slack:react:T-7");
    let pr = slack_pull_request(&task, "C1", "1.2", 9, "https://github.com/acme/app/pull/9");
    assert_eq!(pr.key, "slack:pr:T-7:9");
    assert!(post(&pr).2.contains("https://github.com/acme/app/pull/9"));
}

#[test]
fn the_status_says_where_the_task_stands_and_a_post_records_its_thread() {
    let (task, _) = created(ApprovalPolicy::Manual, "Fix <it>");
    let status = slack_status(&task, "C1", "1.3", "e-9");
    assert_eq!(status.key, "slack:status:T-7:e-9");
    let SlackAction::Update { channel, ts, text } = &status.action else {
        panic!("an update: {status:?}");
    };
    assert_eq!((channel.as_str(), ts.as_str()), ("C1", "1.3"));
    assert!(
        text.starts_with("*T-7* Fix &lt;it&gt; _(acme/app)_\nnow: "),
        "{text}"
    );
    assert!(status.action.safe_to_repeat());

    let settings = SlackSettings {
        bot_token: None,
        app_token: None,
        api_url: "http://127.0.0.1:9".into(),
        intake: Default::default(),
    };
    let client = SlackClient::new("http://127.0.0.1:9", &"xoxb-t".to_owned().into()).unwrap();
    let policy = SlackPolicy::new(client, settings);
    let posted = |ts: &str| Produced::Posted {
        conversation: "C1".into(),
        message: ts.into(),
    };
    // A post in a thread records the thread's root; a root post records itself.
    let (_, events) = created(ApprovalPolicy::Auto, "Fix it");
    let in_thread = slack(&events[0], &task, "C1", "1.2", "e-1", None).remove(0);
    let record = policy.record_of(&in_thread, &posted("1.5")).unwrap();
    assert_eq!(record.stream, "slack-message:C1:1.2");
    assert_eq!(record.kind, MESSAGE_SENT);
    let root = slack_root(&task, "C1");
    let record = policy.record_of(&root, &posted("1.4")).unwrap();
    assert_eq!(record.stream, "slack-message:C1:1.4");
    let sent: SentMessage = serde_json::from_slice(&record.body).unwrap();
    assert_eq!(
        (sent.task, sent.key.as_str()),
        (task.id(), "slack:root:T-7")
    );
    // Nothing else is a thread.
    assert!(policy
        .record_of(&slack_seen(task.id(), "C1", "1.2"), &Produced::Done)
        .is_none());
    assert!(policy.record_of(&status, &posted("1.3")).is_none());
}

#[test]
fn a_stale_review_is_told_once_in_its_thread_and_a_close_by_its_cancellation() {
    use crate::tasks::StaleAction;
    let (task, _) = created(ApprovalPolicy::Auto, "Fix the redirect");
    let at = Utc.timestamp_opt(1_750_000_000, 0).single().unwrap();
    let remind = TaskEvent::WentStale {
        at,
        after_h: 72,
        action: StaleAction::Remind,
    };
    assert!(slack_notifies(&remind));
    let requests = slack(&remind, &task, "C1", "1.2", "e-9", None);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].key, "slack:notify:C1:e-9", "keyed by the event");
    let (channel, thread, text, buttons, _) = post(&requests[0]);
    assert_eq!((channel, thread), ("C1", Some("1.2")));
    assert!(
        text.ends_with(
            "in review for 72 h without activity: its pull request waits for a reviewer"
        ),
        "{text}"
    );
    assert!(buttons.is_empty());
    let close = TaskEvent::WentStale {
        at,
        after_h: 72,
        action: StaleAction::Close,
    };
    assert!(slack(&close, &task, "C1", "1.2", "e-10", None).is_empty());
}

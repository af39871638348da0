use super::write::priority_rank;
use super::*;
use crate::tasks::{
    GithubRef, LinearIssue, RepoName, TelegramMessage, GITHUB_ISSUE, GITHUB_PR, LINEAR_ISSUE,
    TELEGRAM,
};

#[test]
fn link_keys_are_stable_strings() {
    let repo: RepoName = "acme/api".parse().unwrap();
    let id = uuid::Uuid::nil();
    let links = Links::default()
        .with(LINEAR_ISSUE, &LinearIssue::new(id, "ENG-1").unwrap())
        .with(GITHUB_ISSUE, &GithubRef::new(repo.clone(), 7).unwrap())
        .with(GITHUB_PR, &GithubRef::new(repo, 9).unwrap())
        .with(TELEGRAM, &TelegramMessage::new(-100, 5).unwrap());
    let keys: Vec<(&str, String)> = link_keys(&links)
        .into_iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    assert_eq!(
        keys,
        vec![
            ("linear_issue", id.to_string()),
            ("github_issue", "acme/api#7".into()),
            ("github_pr", "acme/api#9".into()),
            ("telegram_message", "-100:5".into()),
        ]
    );
}

#[test]
fn the_source_is_the_creating_channel_else_the_first_link() {
    let links = Links::default();
    assert_eq!(source_of(None, &links), "api");
    assert_eq!(source_of(Some("cli"), &links), "api");
    let links = links.with(TELEGRAM, &TelegramMessage::new(1, 1).unwrap());
    assert_eq!(source_of(None, &links), "telegram");
    assert_eq!(source_of(Some("github"), &links), "github");
}

#[test]
fn priority_rank_sorts_urgent_first() {
    let mut all = Priority::ALL;
    all.sort_by_key(|p| priority_rank(*p));
    assert_eq!(
        all,
        [
            Priority::Urgent,
            Priority::High,
            Priority::Normal,
            Priority::Low
        ]
    );
}

#[test]
fn a_merge_counts_its_own_pull_request_else_its_plans_one() {
    let repo: RepoName = "acme/api".parse().unwrap();
    let pr = GithubRef::new(repo, 12).unwrap();
    let (item, plan): (TaskId, TaskId) = ("T-7".parse().unwrap(), "T-3".parse().unwrap());
    assert_eq!(
        merged_pull_request(Some(&pr), Some(plan), item),
        "acme/api#12"
    );
    // A combined plan's items open none: they share the plan's one pull request.
    assert_eq!(merged_pull_request(None, Some(plan), item), "plan:T-3");
    assert_eq!(
        merged_pull_request(None, Some(plan), "T-8".parse().unwrap()),
        "plan:T-3"
    );
    assert_eq!(merged_pull_request(None, None, item), "task:T-7");
}

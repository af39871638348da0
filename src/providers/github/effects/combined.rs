//! The GitHub side of a plan landed as one (`[plans] land = "combined"`), pure: its items open no pull request
//! of their own, and its combination (`task.combined`) opens the plan's one pull request from `pidevops/<plan>`,
//! keyed `github:pr:<plan>` like a task's (a later combination force-pushes the same branch, which updates it).

use super::GithubAction;
use crate::effects::inert::inert;
use crate::effects::policy_config::PolicyConfig;
use crate::effects::pull_request::{OpenedFor, PullRequestBody};
use crate::effects::Request;
use crate::tasks::PlanLand;
use crate::tasks::{Combination, Task, TaskId, GITHUB_ISSUE};

/// The most characters of one item's section in the plan's pull request body.
const MAX_ITEM_CHARS: usize = 6_000;
/// The most characters of the whole body (GitHub refuses more than 65,536).
const MAX_BODY_CHARS: usize = 60_000;

/// Whether `task`'s own submission opens no pull request: an item of a plan that lands combined.
pub fn lands_with_its_plan(task: &Task, config: &PolicyConfig) -> bool {
    config.plan_land == PlanLand::Combined && task.parent().is_some()
}

/// The plan's pull request, from its combined branch, once its items are combined. `items`: the plan's items as
/// loaded (those the combination names are described, in its order).
pub fn plan_pull_request(
    plan: &Task,
    combination: &Combination,
    items: &[Task],
    config: &PolicyConfig,
) -> Request<GithubAction> {
    Request {
        key: crate::domain::effect::pull_request_key(plan.id()),
        task: Some(plan.id()),
        action: GithubAction::OpenPullRequest {
            repo: plan.repo().clone(),
            head: plan.id().branch(),
            base: config.base_for(plan.repo()),
            title: format!("{}: {}", plan.id(), inert(&plan.title())),
            body: plan_pull_request_body(plan, combination, items),
        },
    }
}

/// The plan's pull request description: the goal, then each item combined (its spec, the commit merged, what its
/// agent said of it), where the plan came from (`pull_request.rs` writes it). Every text from a ticket or an agent
/// is made inert.
pub fn plan_pull_request_body(plan: &Task, combination: &Combination, items: &[Task]) -> String {
    let spec = plan.spec();
    let mut body = PullRequestBody::new("Goal", spec.task());
    body.part("Done when", spec.done_when()).own(
        "Items",
        &format!(
            "Merged into `{}` in this order, each at the commit pidevops recorded for its last attempt:",
            plan.id().branch().as_str()
        ),
    );
    let sections = combination.items.iter().map(|combined| {
        match items.iter().find(|i| i.id() == combined.task) {
            Some(item) => item_section(item, combined.commit.short()),
            None => PullRequestBody::item_not_loaded(combined.task, combined.commit.short()),
        }
    });
    body.sections(sections, MAX_ITEM_CHARS).clip(MAX_BODY_CHARS);
    let ids: Vec<TaskId> = combination.items.iter().map(|i| i.task).collect();
    body.footer(
        plan.links(),
        plan.repo(),
        OpenedFor::Plan {
            plan: plan.id(),
            items: &ids,
        },
    )
}

/// One item's section: its title, the commit merged, its spec and what its attempt said of itself.
fn item_section(item: &Task, commit: &str) -> PullRequestBody {
    let spec = item.spec();
    let mut section = PullRequestBody::item(item.id(), &item.title(), commit, spec.task());
    section
        .part("Scope", spec.scope())
        .part("Done when", spec.done_when())
        .report(item.report());
    section
}

/// Once the plan's pull request is open: a comment on the GitHub issue the plan came from (once per plan).
pub fn after_plan_pull_request(
    plan: &Task,
    number: u64,
    url: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Request<GithubAction>> {
    let Some(issue) = plan.links().get(GITHUB_ISSUE) else {
        return Vec::new();
    };
    let key = format!("github:comment:{}:pull-request", plan.id());
    let pull = if &issue.repo == plan.repo() {
        format!("#{number}")
    } else {
        url.to_owned()
    };
    let items: Vec<String> = plan
        .plan()
        .map(|p| p.children.iter().map(TaskId::to_string).collect())
        .unwrap_or_default();
    vec![Request {
        key: key.clone(),
        task: Some(plan.id()),
        action: GithubAction::Comment {
            repo: issue.repo.clone(),
            number: issue.number.get(),
            body: format!(
                "pidevops carried out this plan as {} with its items {} and opened {pull} with their work \
                 combined.\n\n{}",
                plan.id(),
                items.join(", "),
                crate::effects::marker(&key)
            ),
            since: now - chrono::Duration::minutes(10),
        },
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{decide, evolve, Command, Family, MaxAttempts, NewTask, Priority, Spec};

    fn task(id: &str, spec: Spec, family: Family) -> Task {
        let events = decide(
            None,
            &Command::Create(Box::new(NewTask {
                id: id.parse().expect("an id"),
                repo: "acme/app".parse().expect("a repo"),
                spec,
                priority: Priority::Normal,
                links: Default::default(),
                approval: crate::tasks::ApprovalPolicy::Auto,
                max_attempts: MaxAttempts::new(3).expect("a budget"),
                ticket_version: None,
                agent: None,
                family,
            })),
            chrono::Utc::now(),
        )
        .expect("created");
        events
            .iter()
            .try_fold(None, |t, e| evolve(t, e).map(Some))
            .expect("applied")
            .expect("a task")
    }

    #[test]
    fn only_a_plans_items_under_combined_open_no_pull_request_of_their_own() {
        let item = task(
            "T-2",
            Spec::new("Part A", "a/**", "a exists").expect("a spec"),
            Family {
                parent: Some("T-1".parse().expect("an id")),
                ..Family::default()
            },
        );
        let alone = task(
            "T-3",
            Spec::new("Fix it", "", "").expect("a spec"),
            Family::default(),
        );
        let combined = PolicyConfig {
            plan_land: PlanLand::Combined,
            ..PolicyConfig::default()
        };
        assert!(lands_with_its_plan(&item, &combined));
        assert!(!lands_with_its_plan(&alone, &combined));
        assert!(!lands_with_its_plan(&item, &PolicyConfig::default()));
    }

    #[test]
    fn the_plans_body_names_each_item_with_its_commit_and_makes_ticket_and_agent_text_inert() {
        let plan = task(
            "T-1",
            Spec::new("Ship @everyone fixes #12", "", "closes #3 when done").expect("a spec"),
            Family::plan(),
        );
        let item = task(
            "T-2",
            Spec::new("Part A\n\nping @admin", "a/**", "a exists").expect("a spec"),
            Family {
                parent: Some(plan.id()),
                ..Family::default()
            },
        );
        let sha = |c: char| crate::tasks::CommitSha::new(&c.to_string().repeat(40)).expect("a sha");
        let combination = Combination {
            at: chrono::Utc::now(),
            commit: sha('a'),
            base: sha('b'),
            items: vec![
                crate::tasks::CombinedItem {
                    task: item.id(),
                    commit: sha('c'),
                },
                crate::tasks::CombinedItem {
                    task: "T-3".parse().expect("an id"),
                    commit: sha('d'),
                },
            ],
            current: true,
        };
        let body = plan_pull_request_body(&plan, &combination, std::slice::from_ref(&item));
        assert!(body.contains("### T-2: Part A (commit ccccccc)"), "{body}");
        assert!(body.contains("### T-3 (commit ddddddd)"), "{body}");
        assert!(body.contains("**Scope:** a/**"), "{body}");
        assert!(body.contains("combining T-2, T-3"), "{body}");
        for raw in ["@everyone", "@admin", "#12", "closes #3"] {
            assert!(!body.contains(raw), "{raw} left live in {body}");
        }
        let request = plan_pull_request(&plan, &combination, &[item], &PolicyConfig::default());
        assert_eq!(request.key, "github:pr:T-1");
        let GithubAction::OpenPullRequest { head, base, .. } = request.action else {
            panic!("a pull request");
        };
        assert_eq!((head.as_str(), base.as_str()), ("pidevops/T-1", "main"));
    }
}

//! What a GitHub event on a pidevops branch means for its task. Pure: event type and payload in, a reaction out.
//! The task is the branch's (`pidevops/T-7` is T-7's), so no lookup is needed and no other branch is touched.

use serde_json::Value;

use crate::tasks::TaskId;

/// Longest CI summary or review text carried into a retry's reason (the prompt shows it).
const MAX_TEXT: usize = 1500;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reaction {
    /// Not about a pidevops branch, or not a kind of event reactions care about.
    None,
    /// About a pidevops branch, but nothing to do, and why (our own account, a passing check, …).
    Ignore {
        task: TaskId,
        why: String,
    },
    /// CI failed on commit `sha` of the task's branch.
    ChecksFailed {
        task: TaskId,
        sha: String,
        summary: String,
    },
    ChangesRequested {
        task: TaskId,
        by: String,
        body: String,
    },
    /// A reviewer's line comment: handed to the next attempt.
    ReviewComment {
        task: TaskId,
        text: String,
    },
    Merged {
        task: TaskId,
        by: String,
    },
    ClosedUnmerged {
        task: TaskId,
        by: String,
    },
}

/// Conclusions that mean the code is at fault (`action_required`, `cancelled`, `neutral`, `skipped` do not).
const FAILED: [&str; 3] = ["failure", "timed_out", "startup_failure"];

/// Decides what `event_type` with `payload` asks of its task. `bot_login`: pidevops's own GitHub account, whose
/// reviews and comments never send a task back (they would loop).
pub fn decide(event_type: &str, payload: &Value, bot_login: Option<&str>) -> Reaction {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let ours = |login: &Value| {
        bot_login.is_some_and(|bot| bot.eq_ignore_ascii_case(login.as_str().unwrap_or_default()))
    };
    match event_type {
        "github.check_suite.completed" => {
            let suite = &payload["check_suite"];
            let Some(task) = task_of(&suite["head_branch"]) else {
                return Reaction::None;
            };
            let conclusion = text(&suite["conclusion"]);
            if !FAILED.contains(&conclusion.as_str()) {
                return Reaction::Ignore {
                    task,
                    why: format!("check suite concluded {conclusion}"),
                };
            }
            let app = suite["app"]["name"].as_str().unwrap_or("a CI app");
            Reaction::ChecksFailed {
                task,
                sha: text(&suite["head_sha"]),
                summary: format!("{app} check suite concluded {conclusion}"),
            }
        }
        "github.check_run.completed" => {
            let run = &payload["check_run"];
            let Some(task) = task_of(&run["check_suite"]["head_branch"]) else {
                return Reaction::None;
            };
            let conclusion = text(&run["conclusion"]);
            if !FAILED.contains(&conclusion.as_str()) {
                return Reaction::Ignore {
                    task,
                    why: format!("check run concluded {conclusion}"),
                };
            }
            let mut summary = format!("{} concluded {conclusion}", text(&run["name"]));
            for part in [&run["output"]["title"], &run["output"]["summary"]] {
                if let Some(part) = part.as_str().filter(|p| !p.trim().is_empty()) {
                    summary.push_str(&format!("\n{}", part.trim()));
                }
            }
            if let Some(url) = run["details_url"].as_str().or(run["html_url"].as_str()) {
                summary.push_str(&format!("\n{url}"));
            }
            Reaction::ChecksFailed {
                task,
                sha: text(&run["head_sha"]),
                summary: clip(&summary),
            }
        }
        "github.workflow_run.completed" => {
            let run = &payload["workflow_run"];
            let Some(task) = task_of(&run["head_branch"]) else {
                return Reaction::None;
            };
            let conclusion = text(&run["conclusion"]);
            if !FAILED.contains(&conclusion.as_str()) {
                return Reaction::Ignore {
                    task,
                    why: format!("workflow run concluded {conclusion}"),
                };
            }
            let name = run["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .or(payload["workflow"]["name"].as_str())
                .unwrap_or("a workflow");
            Reaction::ChecksFailed {
                task,
                sha: text(&run["head_sha"]),
                summary: format!(
                    "workflow {name} concluded {conclusion} ({})",
                    text(&run["html_url"])
                ),
            }
        }
        "github.pull_request_review.submitted" => {
            let Some(task) = task_of(&payload["pull_request"]["head"]["ref"]) else {
                return Reaction::None;
            };
            let review = &payload["review"];
            if ours(&review["user"]["login"]) {
                return Reaction::Ignore {
                    task,
                    why: "a review by pidevops's own account".into(),
                };
            }
            if !review["state"]
                .as_str()
                .unwrap_or_default()
                .eq_ignore_ascii_case("changes_requested")
            {
                return Reaction::Ignore {
                    task,
                    why: format!("a review that is {}", text(&review["state"])),
                };
            }
            Reaction::ChangesRequested {
                task,
                by: text(&review["user"]["login"]),
                body: clip(review["body"].as_str().unwrap_or_default()),
            }
        }
        "github.pull_request_review_comment.created" => {
            let Some(task) = task_of(&payload["pull_request"]["head"]["ref"]) else {
                return Reaction::None;
            };
            let comment = &payload["comment"];
            if ours(&comment["user"]["login"]) {
                return Reaction::Ignore {
                    task,
                    why: "a comment by pidevops's own account".into(),
                };
            }
            let place = match comment["line"].as_u64() {
                Some(line) => format!("{}:{line}", text(&comment["path"])),
                None => text(&comment["path"]),
            };
            Reaction::ReviewComment {
                task,
                text: clip(&format!(
                    "{} on {place}: {}",
                    text(&comment["user"]["login"]),
                    text(&comment["body"])
                )),
            }
        }
        "github.pull_request.closed" => {
            let pr = &payload["pull_request"];
            let Some(task) = task_of(&pr["head"]["ref"]) else {
                return Reaction::None;
            };
            if pr["merged"].as_bool() == Some(true) {
                let by = pr["merged_by"]["login"]
                    .as_str()
                    .or(payload["sender"]["login"].as_str())
                    .unwrap_or("someone")
                    .to_owned();
                Reaction::Merged { task, by }
            } else {
                Reaction::ClosedUnmerged {
                    task,
                    by: payload["sender"]["login"]
                        .as_str()
                        .unwrap_or("someone")
                        .to_owned(),
                }
            }
        }
        _ => Reaction::None,
    }
}

/// The task whose branch this is: `pidevops/T-7` → T-7; any other branch → none.
fn task_of(branch: &Value) -> Option<TaskId> {
    branch.as_str()?.strip_prefix("pidevops/")?.parse().ok()
}

fn clip(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_TEXT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fixture(path: &str) -> Value {
        let text = std::fs::read_to_string(format!(
            "{}/tests/fixtures/github/{path}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("a fixture");
        serde_json::from_str(&text).expect("json")
    }

    fn t7() -> TaskId {
        "T-7".parse().unwrap()
    }

    #[test]
    fn a_failed_check_on_a_pidevops_branch_sends_its_task_back_with_what_failed() {
        let mut suite = fixture("check_suite/completed.payload.json");
        assert_eq!(
            decide("github.check_suite.completed", &suite, None),
            Reaction::None,
            "not our branch"
        );
        suite["check_suite"]["head_branch"] = json!("pidevops/T-7");
        assert_eq!(
            decide("github.check_suite.completed", &suite, None),
            Reaction::Ignore {
                task: t7(),
                why: "check suite concluded success".into()
            }
        );
        suite["check_suite"]["conclusion"] = json!("failure");
        assert_eq!(
            decide("github.check_suite.completed", &suite, None),
            Reaction::ChecksFailed {
                task: t7(),
                sha: "ec26c3e57ca3a959ca5aad62de7213c562f8c821".into(),
                summary: "octocoders-linter check suite concluded failure".into()
            }
        );

        let mut run = fixture("check_run/completed.payload.json");
        run["check_run"]["check_suite"]["head_branch"] = json!("pidevops/T-7");
        run["check_run"]["conclusion"] = json!("timed_out");
        run["check_run"]["output"]["title"] = json!("2 tests failed");
        run["check_run"]["output"]["summary"] = json!("login_redirects_home failed");
        let Reaction::ChecksFailed { summary, .. } =
            decide("github.check_run.completed", &run, None)
        else {
            panic!("a failed check run");
        };
        assert!(
            summary.starts_with("Octocoders-linter concluded timed_out\n2 tests failed\nlogin_redirects_home failed"),
            "{summary}"
        );

        let mut workflow = fixture("workflow_run/completed.payload.json");
        workflow["workflow_run"]["head_branch"] = json!("pidevops/T-7");
        workflow["workflow_run"]["conclusion"] = json!("failure");
        let Reaction::ChecksFailed { summary, sha, .. } =
            decide("github.workflow_run.completed", &workflow, None)
        else {
            panic!("a failed workflow run");
        };
        assert_eq!(sha, "3484a3fb816e0859fd6e1cea078d76385ff50625");
        assert!(
            summary.contains(
                "concluded failure (https://github.com/octo-org/octo-repo/actions/runs/289782451)"
            ),
            "{summary}"
        );
        // Not the code's fault.
        workflow["workflow_run"]["conclusion"] = json!("cancelled");
        assert!(matches!(
            decide("github.workflow_run.completed", &workflow, None),
            Reaction::Ignore { .. }
        ));
    }

    #[test]
    fn reviews_comments_and_closing_reach_the_task_but_never_our_own() {
        let mut review = fixture("pull_request_review/submitted.payload.json");
        review["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
        assert!(
            matches!(
                decide("github.pull_request_review.submitted", &review, None),
                Reaction::Ignore { .. }
            ),
            "a plain comment review asks for nothing"
        );
        review["review"]["state"] = json!("changes_requested");
        review["review"]["body"] = json!("Please keep the old redirect for API clients.");
        assert_eq!(
            decide("github.pull_request_review.submitted", &review, None),
            Reaction::ChangesRequested {
                task: t7(),
                by: "Codertocat".into(),
                body: "Please keep the old redirect for API clients.".into()
            }
        );
        assert!(
            matches!(
                decide(
                    "github.pull_request_review.submitted",
                    &review,
                    Some("codertocat")
                ),
                Reaction::Ignore { .. }
            ),
            "our own account's review"
        );

        let mut comment = fixture("pull_request_review_comment/created.payload.json");
        comment["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
        let Reaction::ReviewComment { text, .. } =
            decide("github.pull_request_review_comment.created", &comment, None)
        else {
            panic!("a review comment");
        };
        assert!(
            text.contains("on README.md") && text.contains("more emoji"),
            "{text}"
        );

        let mut closed = fixture("pull_request/closed.payload.json");
        closed["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
        assert_eq!(
            decide("github.pull_request.closed", &closed, None),
            Reaction::ClosedUnmerged {
                task: t7(),
                by: "Codertocat".into()
            }
        );
        closed["pull_request"]["merged"] = json!(true);
        closed["pull_request"]["merged_by"] = json!({ "login": "octocat" });
        assert_eq!(
            decide("github.pull_request.closed", &closed, None),
            Reaction::Merged {
                task: t7(),
                by: "octocat".into()
            }
        );
        closed["pull_request"]["head"]["ref"] = json!("pidevops/not-a-task");
        assert_eq!(
            decide("github.pull_request.closed", &closed, None),
            Reaction::None
        );
    }
}

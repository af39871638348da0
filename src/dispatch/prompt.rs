//! The prompt an agent gets for an attempt: the task's spec (Task / Scope / Done when) and, on a retry, what
//! failed last time and what people added since. Pure: the same task always gives the same prompt.

use crate::tasks::{Column, RetryCause, Task};

/// The prompt for the task's attempt: the one it is in (the dispatcher builds it right after the claim), or the
/// next one when it is not in progress (a preview). Follow-ups are those handed to that attempt, or still waiting.
pub fn build(task: &Task) -> String {
    let attempt = if task.column() == Column::InProgress {
        task.attempts()
    } else {
        task.attempts() + 1
    };
    let spec = task.spec();
    let mut prompt = format!("Task: {}\n", spec.task());
    if !spec.scope().is_empty() {
        prompt.push_str(&format!("Scope: {}\n", spec.scope()));
    }
    if !spec.done_when().is_empty() {
        prompt.push_str(&format!("Done when: {}\n", spec.done_when()));
    }
    prompt.push_str(&format!(
        "\nRepository: {} (you are in a fresh worktree of it, on the branch pidevops/{}). Make the change, run \
         what checks you can, and leave your work in the worktree; pidevops commits and pushes it.\n",
        task.repo().as_str(),
        task.id()
    ));
    if let Some(failure) = task.last_failure() {
        let cause = match failure.cause {
            RetryCause::RunFailed { .. } => "the run failed",
            RetryCause::Interrupted { .. } => "the run was interrupted (pidevops restarted)",
            RetryCause::SetupFailed { .. } => {
                "the repository's setup failed before the agent ran (not counted against the attempts)"
            }
            RetryCause::ChecksFailed => "CI failed on the pull request",
            RetryCause::ChangesRequested => "a reviewer asked for changes",
        };
        prompt.push_str(&format!(
            "\nThis is attempt {} of {}. Attempt {} did not succeed: {cause}.\nWhat was reported:\n{}\n",
            attempt,
            task.max_attempts().get(),
            failure.attempt,
            failure.reason.as_str()
        ));
    }
    let follow_ups: Vec<_> = task
        .follow_ups()
        .iter()
        .filter(|f| f.delivered_to_attempt.is_none_or(|a| a == attempt))
        .collect();
    if !follow_ups.is_empty() {
        prompt.push_str("\nAdded since the task was written:\n");
        for follow_up in follow_ups {
            prompt.push_str(&format!("- {}\n", follow_up.text.as_str()));
        }
    }
    prompt
}

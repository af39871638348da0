//! The reply to a comment addressed to pidevops on a code host (GitHub's issue comments, GitLab's notes), worded
//! from what intake recorded it did. Pure; each host's policy posts it.

use crate::effects::inert::inert;
use crate::intake::{CommentOutcome, CommentRecord};

/// The reply to a comment on a code host, in words (`review_request`: how the host names a pull request, "Pull
/// request" or "Merge request"): what pidevops did, or why not. What came from people or agents (a refusal
/// may quote a value, a needs-human reason is often the agent's question) is made inert.
pub fn comment_reply(record: &CommentRecord, review_request: &str) -> String {
    let task = record
        .task
        .map_or_else(|| "The task".to_owned(), |t| t.to_string());
    // Where the task is, after "is": "in review", "done".
    let column = |c: &crate::tasks::Column| {
        use crate::tasks::Column;
        match c {
            Column::Triage => "in triage",
            Column::Todo => "in todo, waiting to run",
            Column::InProgress => "in progress",
            Column::InReview => "in review",
            Column::Done => "done",
            Column::Archived => "archived",
            Column::Cancelled => "cancelled",
        }
    };
    match &record.outcome {
        CommentOutcome::Queued { sent_back: false } => format!("Queued for {task}'s next run."),
        CommentOutcome::Queued { sent_back: true } => {
            format!("{task} was in review; it goes round again with this.")
        }
        CommentOutcome::Answered => {
            format!("That answers what {task} was waiting on; its next run has your answer.")
        }
        CommentOutcome::Created { column: c } => format!(
            "Made {task} from this issue, with this comment for its first run; it is {}{}.",
            column(c),
            if *c == crate::tasks::Column::Triage {
                ", waiting for approval"
            } else {
                ""
            }
        ),
        CommentOutcome::Steered { command, column: c } => match command.as_str() {
            "cancel" => format!("{task} cancelled."),
            "approve" => format!("{task} approved; it is {}.", column(c)),
            "retry" => format!("{task} goes round again; it is {}.", column(c)),
            other => format!("{task}: {other} done; it is {}.", column(c)),
        },
        CommentOutcome::Refused { command, why } => {
            format!("{task}: {command} refused: {}", inert(why))
        }
        CommentOutcome::Status {
            column: c,
            attempts,
            max_attempts,
            needs_human,
            pull_request,
        } => {
            let mut words = format!(
                "{task} is {}, attempt {attempts} of {max_attempts}.",
                column(c)
            );
            if let Some(reason) = needs_human {
                let reason = inert(reason.trim());
                let stop = if reason.ends_with(['.', '?', '!']) {
                    ""
                } else {
                    "."
                };
                words.push_str(&format!(" It needs a human: {reason}{stop}"));
            }
            if let Some(pr) = pull_request {
                words.push_str(&format!(" {review_request}: {pr}."));
            }
            words
        }
        CommentOutcome::Unknown { given } => {
            let listed = crate::intake::rules::comment::CommentCommand::listed();
            if given.is_empty() {
                format!(
                    "Say what to do after the mention, or `/pidevops <command>`: one of {listed}."
                )
            } else {
                let given: String = given.chars().take(40).filter(|c| *c != '`').collect();
                format!(
                    "`/pidevops {}` is not a command; the commands are {listed}.",
                    inert(&given)
                )
            }
        }
        CommentOutcome::NoTask { why } => format!("No task: {}.", inert(why)),
    }
}

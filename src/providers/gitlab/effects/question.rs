//! A needs-human episode of a task that came from a GitLab issue: its question (the agent's words, or pidevops's
//! reason) as a note on that issue, with how to answer there. Pure; once per episode (keyed by the flag's event).

use super::{GitlabAction, Noteable};
use crate::effects::inert::inert;
use crate::effects::Request;
use crate::tasks::{Reason, Task, GITLAB_ISSUE};

/// The note asking the issue's people what the task waits on: a trusted user's note mentioning `@<bot>` (or
/// starting with `/pidevops`) answers it, the first answer going to the next attempt. The reason is made inert
/// (an agent wrote it) and the client keeps it from running quick actions.
pub fn gitlab_question(
    task: &Task,
    reason: &Reason,
    question: bool,
    event_id: &str,
    bot: Option<&str>,
) -> Option<Request<GitlabAction>> {
    let issue = task.links().get(GITLAB_ISSUE)?;
    let id = task.id();
    let asked = if question {
        let quoted: Vec<String> = inert(reason.as_str())
            .lines()
            .map(|line| format!("> {line}"))
            .collect();
        format!(
            "The agent working on this as {id} asks:\n\n{}",
            quoted.join("\n")
        )
    } else {
        format!("{id} needs a human: {}", inert(reason.as_str()))
    };
    let how = match bot {
        Some(bot) => format!("reply here mentioning @{bot} (or starting with `/pidevops`)"),
        None => "reply here with a note starting with `/pidevops`".to_owned(),
    };
    Some(Request {
        key: format!("gitlab:note:{id}:ask:{event_id}"),
        task: Some(id),
        action: GitlabAction::Note {
            project: issue.project.clone(),
            on: Noteable::Issue,
            iid: issue.iid.get(),
            body: format!(
                "{asked}\n\nTo answer, {how}: the first answer from a trusted user goes to the next attempt. The \
                 dashboard and `pidevops task answer {id} \"…\"` answer too."
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{GitlabIssueRef, Links};

    #[test]
    fn the_agent_s_question_is_asked_on_its_issue_once_per_episode_quoted_and_inert() {
        let issue = GitlabIssueRef::new("acme/platform/api".parse().unwrap(), 23).unwrap();
        let (task, _) = super::super::tests::task(Links::default().with(GITLAB_ISSUE, &issue));
        let reason = Reason::summarize("Which cursor format, @alice? v1 or v2");
        let asked = gitlab_question(&task, &reason, true, "ev-1", Some("pidevops-bot")).unwrap();
        assert_eq!(asked.key, "gitlab:note:T-4:ask:ev-1");
        let GitlabAction::Note { on, iid, body, .. } = &asked.action else {
            panic!("a note: {:?}", asked.action)
        };
        assert_eq!((*on, *iid), (Noteable::Issue, 23));
        assert!(body.contains("> Which cursor format"), "{body}");
        assert!(!body.contains("@alice"), "no one is pinged: {body}");
        assert!(body.contains("mentioning @pidevops-bot"), "{body}");
        let (elsewhere, _) = super::super::tests::task(Links::default());
        assert!(gitlab_question(&elsewhere, &reason, true, "ev-1", None).is_none());
    }
}

//! `gitlab_poller`'s refresh backstop (`landing::refresh`): for each GitLab project with a task's merge request in
//! review whose base pushes refresh (`landing::base_push::refreshed_base`, the rule the refresh loop reads), the
//! base branch's head (`GET …/repository/branches/:base`): one the refresh loop has not handled (its Push Hook
//! lost, or not yet come) is appended as a `gitlab.push` of that head, shaped like the Push Hook
//! (`poll:push:<project>:<base>:<sha>`), which the loop handles as the webhook's.
//!
//! And each of those merge requests as GitLab finds it (`detailed_merge_status`, read, not guessed): `need_rebase`
//! is appended as `refresh.due` `behind`, `conflict` as `refresh.due` `dirty` (`refresh-due:<task>:<head>:<state>`),
//! unless its project's push was appended in the same poll (that refreshes every task of the project) or its task
//! waits for a person. A project whose `refresh` is `"off"` has no base read, but its merge requests are: their
//! dues mark the board (the refresh loop never refreshes them). One the board marks that GitLab then finds
//! `mergeable` is appended as `refresh.current` (`refresh-current:<task>:<head>:<diff_refs.start_sha>`): someone
//! brought it up to date, and the mark goes. Other statuses (a pipeline, an approval or a discussion missing)
//! may hide `need_rebase`: no word either way.
//!
//! Only merge requests pidevops recorded: the task's `gitlab_mr` link names the task's own repository, one of the
//! configured projects, and the iid asked for; GitLab's answer is held to it: open, that iid, from
//! `pidevops/<task>` of the project itself (a fork's branch of the same name is a stranger's).

use std::collections::BTreeMap;

use anyhow::Context;
use serde_json::{json, Value};

use super::{GitlabPollProgress, GitlabPoller, GITLAB_POLLER};
use crate::domain::{EventType, NewEvent, Source};
use crate::effects::CallError;
use crate::landing::base_push::{base_key, refreshed_base};
use crate::landing::refresh::{Current, Due};
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::providers::gitlab::client::MergeStatus;
use crate::tasks::{Column, CommitSha, RepoName, TaskId, GITLAB_MR};

/// A task's merge request to read: the task, its iid, and whether the task waits for a person.
struct Recorded {
    task: TaskId,
    iid: u64,
    flagged: bool,
    /// The board marks it behind its base.
    marked: bool,
}

impl GitlabPoller {
    /// The base of each project with a merge request in review that refreshes, and what GitLab says of those merge
    /// requests (see the module doc).
    pub(super) async fn bases(&self, progress: &mut GitlabPollProgress) -> anyhow::Result<()> {
        let rows = task_rows::list(
            self.log.store(),
            &TaskFilter {
                column: Some(Column::InReview),
                limit: Some(500),
                ..TaskFilter::default()
            },
        )
        .await
        .context("listing the tasks in review")?;
        let mut by_project: BTreeMap<RepoName, Vec<Recorded>> = BTreeMap::new();
        for row in rows {
            let Some(mr) = row.links.get(GITLAB_MR) else {
                continue;
            };
            let configured = self
                .projects
                .iter()
                .any(|p| p.as_str().eq_ignore_ascii_case(mr.project.as_str()));
            if !configured || !mr.project.as_str().eq_ignore_ascii_case(&row.repo) {
                continue;
            }
            by_project.entry(mr.project).or_default().push(Recorded {
                task: row.id,
                iid: mr.iid.get(),
                flagged: row.needs_human,
                marked: row.is_behind(),
            });
        }
        for (project, recorded) in by_project {
            // `refresh = "off"`: no base is read, but what GitLab says of its merge requests marks the board.
            let base = refreshed_base(self.board.config(), &self.sources, &project);
            if base.is_some() {
                progress.bases += 1;
            }
            let mut ours = Vec::new();
            for Recorded {
                task,
                iid,
                flagged,
                marked,
            } in recorded
            {
                if flagged {
                    continue;
                }
                let mr = match self.client.merge_status(&project, iid).await {
                    Ok(mr) => mr,
                    Err(CallError::Permanent { message }) => {
                        tracing::info!(%task, %project, iid, %message, "the poller cannot read the task's merge request");
                        continue;
                    }
                    Err(error) => {
                        return Err(anyhow::anyhow!(error))
                            .with_context(|| format!("{task} ({project}!{iid})"))
                    }
                };
                if recorded_as(task, iid, &mr) {
                    ours.push((task, mr, marked));
                } else {
                    tracing::info!(%task, %project, iid, "GitLab's merge request is not the one pidevops recorded (a fork's, another branch, not open): not read");
                }
            }
            let id = ours.first().map(|(_, mr, _)| mr.target_project_id);
            if let Some(base) = &base {
                if self.base_head(&project, base, id, progress).await? {
                    continue;
                }
            }
            for (task, mr, marked) in ours {
                self.due(task, &project, &mr, marked, progress).await?;
            }
        }
        Ok(())
    }

    /// Reads `project`'s `base` head and appends it as the Push Hook's push when the refresh loop has not handled
    /// it; whether it appended one.
    async fn base_head(
        &self,
        project: &RepoName,
        base: &str,
        id: Option<u64>,
        progress: &mut GitlabPollProgress,
    ) -> anyhow::Result<bool> {
        let head = match self.client.branch_head(project, base).await {
            Ok(head) => head,
            Err(CallError::Permanent { message }) => {
                tracing::info!(%project, %base, %message, "the poller cannot read the base branch");
                return Ok(false);
            }
            Err(error) => {
                return Err(anyhow::anyhow!(error))
                    .with_context(|| format!("{project}'s base {base}"))
            }
        };
        let Ok(head) = CommitSha::new(&head) else {
            return Ok(false);
        };
        let handled = base_key(project, base, head.as_str());
        if self
            .log
            .store()
            .find_by_key(Source::Pidevops, &handled)
            .await
            .with_context(|| format!("reading {handled}"))?
            .is_some()
        {
            return Ok(false);
        }
        let key = format!("poll:push:{}:{base}:{head}", project.as_str());
        let mut event = NewEvent::new(
            Source::Gitlab,
            EventType::from_stored("gitlab.push".to_owned()),
            key.clone(),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&push_shaped(
                project,
                base,
                head.as_str(),
                id,
            ))?),
        );
        event.subject.repository = Some(project.as_str().to_owned());
        event
            .meta
            .insert("poller".to_owned(), Value::from(GITLAB_POLLER));
        let appended = self
            .log
            .append(event)
            .await
            .with_context(|| format!("appending {key}"))?;
        if appended.duplicate {
            return Ok(false);
        }
        progress.appended += 1;
        Ok(true)
    }

    /// `refresh.due` for `task` when GitLab finds its merge request `need_rebase` (`behind`) or in `conflict`
    /// (`dirty`), once per head and state; `refresh.current` when the board marks it (`marked`) and GitLab finds it
    /// `mergeable`.
    async fn due(
        &self,
        task: TaskId,
        project: &RepoName,
        mr: &MergeStatus,
        marked: bool,
        progress: &mut GitlabPollProgress,
    ) -> anyhow::Result<()> {
        let Some(head) = mr.sha.as_deref().and_then(|sha| CommitSha::new(sha).ok()) else {
            return Ok(());
        };
        let Some(state) = due_state(mr.detailed_merge_status.as_deref()) else {
            // Marked, and GitLab finds it `mergeable`: someone brought it up to date.
            let mergeable = marked && mr.detailed_merge_status.as_deref() == Some("mergeable");
            let start = mr
                .diff_refs
                .as_ref()
                .and_then(|refs| refs.start_sha.as_deref());
            let Some(base) = start
                .and_then(|sha| CommitSha::new(sha).ok())
                .filter(|_| mergeable)
            else {
                return Ok(());
            };
            let current = Current {
                task,
                head: head.as_str().to_owned(),
                base: base.as_str().to_owned(),
            };
            if current.record(&self.log, Some(GITLAB_POLLER)).await? {
                progress.appended += 1;
            }
            return Ok(());
        };
        let due = Due {
            task,
            repo: project.clone(),
            number: mr.iid,
            head: head.as_str().to_owned(),
            state: state.to_owned(),
        };
        let key = due.key();
        let appended = self
            .log
            .append(due.event(GITLAB_POLLER)?)
            .await
            .with_context(|| format!("appending {key}"))?;
        if !appended.duplicate {
            progress.appended += 1;
            progress.due += 1;
        }
        Ok(())
    }
}

/// Whether GitLab's `mr` is the merge request pidevops recorded for `task` as `iid`: that iid, open, from the
/// task's branch of the project itself (source, target and project the same: not a fork's).
fn recorded_as(task: TaskId, iid: u64, mr: &MergeStatus) -> bool {
    mr.iid == iid
        && mr.state == "opened"
        && mr.source_branch == task.branch().as_str()
        && mr.source_project_id == mr.target_project_id
        && mr.project_id == mr.target_project_id
}

/// The `refresh.due` state of GitLab's `detailed_merge_status`: `need_rebase` is behind its base, `conflict` is
/// dirty; anything else (mergeable, checking, a pipeline or an approval missing) asks no refresh.
fn due_state(status: Option<&str>) -> Option<&'static str> {
    match status? {
        "need_rebase" => Some("behind"),
        "conflict" => Some("dirty"),
        _ => None,
    }
}

/// The push of `head` to `project`'s `base` as GitLab's Push Hook has it: the parts the refresh loop reads, the
/// project's id where a merge request told it, and who: GitLab itself. No commits: the poller saw only the head.
pub fn push_shaped(project: &RepoName, base: &str, head: &str, id: Option<u64>) -> Value {
    let mut body = json!({
        "object_kind": "push",
        "event_name": "push",
        "ref": format!("refs/heads/{base}"),
        "after": head,
        "checkout_sha": head,
        "user_username": "gitlab",
        "project": { "path_with_namespace": project.as_str() },
        "commits": [],
        "total_commits_count": 0,
    });
    if let Some(id) = id {
        body["project_id"] = json!(id);
        body["project"]["id"] = json!(id);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(iid: u64, branch: &str, source: u64, state: &str) -> MergeStatus {
        serde_json::from_value(json!({
            "iid": iid, "project_id": 42, "source_project_id": source, "target_project_id": 42,
            "source_branch": branch, "state": state, "sha": "0123456789abcdef0123456789abcdef01234567",
            "detailed_merge_status": "need_rebase",
        }))
        .unwrap()
    }

    #[test]
    fn only_the_recorded_open_merge_request_of_the_project_s_own_branch_is_the_task_s() {
        let task: TaskId = "T-3".parse().unwrap();
        assert!(recorded_as(
            task,
            7,
            &status(7, "pidevops/T-3", 42, "opened")
        ));
        for (why, mr) in [
            ("a fork's branch", status(7, "pidevops/T-3", 77, "opened")),
            ("another iid", status(8, "pidevops/T-3", 42, "opened")),
            (
                "another task's branch",
                status(7, "pidevops/T-4", 42, "opened"),
            ),
            ("merged", status(7, "pidevops/T-3", 42, "merged")),
        ] {
            assert!(!recorded_as(task, 7, &mr), "{why}");
        }
    }

    #[test]
    fn need_rebase_is_behind_conflict_is_dirty_and_nothing_else_asks() {
        assert_eq!(due_state(Some("need_rebase")), Some("behind"));
        assert_eq!(due_state(Some("conflict")), Some("dirty"));
        for other in [
            "mergeable",
            "checking",
            "unchecked",
            "ci_still_running",
            "not_approved",
            "draft_status",
        ] {
            assert_eq!(due_state(Some(other)), None, "{other}");
        }
        assert_eq!(due_state(None), None);
    }

    #[test]
    fn the_poller_s_push_reads_as_a_push_to_the_base_for_the_refresh_loop() {
        use crate::landing::base_push::base_push;
        let table: toml::Table = toml::from_str(
            "[repos.\"acme/platform/api\"]\nprovider = \"gitlab\"\nurl = \"https://gitlab.example.com/acme/platform/api.git\"\nbase = \"develop\"\n",
        )
        .unwrap();
        let file = crate::config::file::FileConfig::from_table(&table).unwrap();
        let project: RepoName = "acme/platform/api".parse().unwrap();
        let head = "da1560886d4f094c3e6c9ef40349f7d38b5d27d7";
        for id in [Some(42), None] {
            let body = push_shaped(&project, "develop", head, id).to_string();
            let push = base_push(
                "gitlab",
                "gitlab.push",
                body.as_bytes(),
                &file.board,
                &file.dispatch,
            )
            .expect("a base push");
            assert_eq!(push.repo, project);
            assert_eq!(push.base, "develop");
            assert_eq!(push.head.as_deref(), Some(head));
        }
    }
}

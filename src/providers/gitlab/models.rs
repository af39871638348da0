//! GitLab's webhook payloads, hand-written from its documented shapes
//! (<https://docs.gitlab.com/user/project/integrations/webhook_events/>): only the fields pidevops reads, each
//! typed, so a payload GitLab changes fails here, in the tests over the fixtures (`tests/fixtures/gitlab/`),
//! rather than reading as "no label" in production. Unknown fields are ignored (GitLab adds them often).
//!
//! GitLab writes times two ways in its hooks (`2013-12-03T17:15:43Z` and `2015-05-17 17:06:40 UTC`), so a
//! timestamp reads either.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Deserializer};

/// Who caused the event (`user`): for an issue opened, its author; for a label added, who added it.
#[derive(Clone, Debug, Deserialize)]
pub struct User {
    pub id: u64,
    pub username: String,
}

/// The project the event is about (`project`).
#[derive(Clone, Debug, Deserialize)]
pub struct Project {
    pub id: u64,
    /// `group/subgroup/name`: what `[repos."…"]` names.
    pub path_with_namespace: String,
}

/// A label as hooks list it: its name is `title`.
#[derive(Clone, Debug, Deserialize)]
pub struct Label {
    pub title: String,
}

/// `object_kind: "issue"` (and `work_item` of type Issue): an issue opened, updated, closed or reopened.
#[derive(Clone, Debug, Deserialize)]
pub struct IssueEvent {
    pub user: User,
    pub project: Project,
    pub object_attributes: IssueAttributes,
    /// The label changes of an `update`: what the labels were before.
    #[serde(default)]
    pub changes: Option<IssueChanges>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct IssueAttributes {
    pub id: u64,
    /// The number people read, unique per project (`#12`).
    pub iid: u64,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    pub author_id: u64,
    /// `opened`, `closed`.
    pub state: String,
    /// `open`, `update`, `close`, `reopen`; absent on a few older payloads.
    #[serde(default)]
    pub action: Option<String>,
    #[serde(deserialize_with = "gitlab_time")]
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub confidential: bool,
    #[serde(default)]
    pub labels: Vec<Label>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct IssueChanges {
    #[serde(default)]
    pub labels: Option<LabelChange>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LabelChange {
    #[serde(default)]
    pub previous: Vec<Label>,
    #[serde(default)]
    pub current: Vec<Label>,
}

impl IssueEvent {
    /// The event, or why it does not read as GitLab's issue event (serde's words: the field and what it found).
    pub fn read(data: &serde_json::Value) -> Result<Self, String> {
        Self::deserialize(data)
            .map_err(|e| format!("an issue event that does not read as GitLab's issue event: {e}"))
    }

    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.object_attributes
            .labels
            .iter()
            .map(|l| l.title.as_str())
    }
}

/// `object_kind: "note"`: a comment on an issue, a merge request, a commit or a snippet.
#[derive(Clone, Debug, Deserialize)]
pub struct NoteEvent {
    pub user: User,
    pub project: Project,
    pub object_attributes: NoteAttributes,
    /// Present when the note is on an issue.
    #[serde(default)]
    pub issue: Option<NotedIssue>,
    /// Present when the note is on a merge request.
    #[serde(default)]
    pub merge_request: Option<NotedMergeRequest>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct NoteAttributes {
    pub id: u64,
    pub note: String,
    /// `Issue`, `MergeRequest`, `Commit`, `Snippet`.
    pub noteable_type: String,
    pub author_id: u64,
    /// GitLab's own notes (a label added, a mention elsewhere): never a person's words.
    #[serde(default)]
    pub system: bool,
    /// `create` or `update` (newer instances); absent: created.
    #[serde(default)]
    pub action: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct NotedIssue {
    pub iid: u64,
    pub state: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct NotedMergeRequest {
    pub iid: u64,
}

impl NoteEvent {
    pub fn read(data: &serde_json::Value) -> Result<Self, String> {
        Self::deserialize(data)
            .map_err(|e| format!("a note event that does not read as GitLab's note event: {e}"))
    }
}

/// `object_kind: "merge_request"`. Read by ingress for its columns; what it does comes with GitLab's effects.
#[derive(Clone, Debug, Deserialize)]
pub struct MergeRequestEvent {
    pub user: User,
    pub project: Project,
    pub object_attributes: MergeRequestAttributes,
}

#[derive(Clone, Debug, Deserialize)]
pub struct MergeRequestAttributes {
    pub iid: u64,
    pub source_branch: String,
    pub target_branch: String,
    pub source_project_id: u64,
    pub target_project_id: u64,
    pub state: String,
    /// `open`, `update`, `merge`, `close`, `reopen`, `approved`, …
    #[serde(default)]
    pub action: Option<String>,
}

/// `object_kind: "pipeline"`.
#[derive(Clone, Debug, Deserialize)]
pub struct PipelineEvent {
    pub project: Project,
    pub object_attributes: PipelineAttributes,
    #[serde(default)]
    pub merge_request: Option<NotedMergeRequest>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct PipelineAttributes {
    pub id: u64,
    #[serde(rename = "ref")]
    pub git_ref: String,
    pub sha: String,
    /// `pending`, `running`, `success`, `failed`, `canceled`, …
    pub status: String,
}

/// `object_kind: "build"`: a job.
#[derive(Clone, Debug, Deserialize)]
pub struct JobEvent {
    #[serde(rename = "ref")]
    pub git_ref: String,
    pub sha: String,
    pub build_id: u64,
    pub build_name: String,
    pub build_status: String,
    pub pipeline_id: u64,
    pub project_id: u64,
    /// Newer instances send the whole project; older ones only `project_name` (`group / name`, spaced).
    #[serde(default)]
    pub project: Option<Project>,
}

/// A GitLab hook's time: RFC 3339 (`2013-12-03T17:15:43Z`) or `2015-05-17 17:06:40 UTC`.
fn gitlab_time<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_time(&text)
        .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a time GitLab writes")))
}

pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Some(time.with_timezone(&Utc));
    }
    let naive = text.strip_suffix(" UTC")?;
    NaiveDateTime::parse_from_str(naive, "%Y-%m-%d %H:%M:%S")
        .ok()
        .map(|t| t.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_of_gitlab_s_time_formats_read_and_nothing_else() {
        let rfc = parse_time("2013-12-03T17:15:43Z").unwrap();
        let spaced = parse_time("2013-12-03 17:15:43 UTC").unwrap();
        assert_eq!(rfc, spaced);
        for bad in ["", "2013-12-03", "2013-12-03 17:15:43", "yesterday"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}

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
    /// Where a diff note is (`type: DiffNote`): absent on a note on the merge request as a whole.
    #[serde(default)]
    pub position: Option<NotePosition>,
}

/// A diff note's place in the merge request's diff.
#[derive(Clone, Debug, Deserialize)]
pub struct NotePosition {
    #[serde(default)]
    pub old_path: Option<String>,
    #[serde(default)]
    pub new_path: Option<String>,
    /// The line in the new file; none on a removed line.
    #[serde(default)]
    pub new_line: Option<u64>,
    /// The line in the old file; none on an added line.
    #[serde(default)]
    pub old_line: Option<u64>,
    /// A note on several lines: where it starts and ends.
    #[serde(default)]
    pub line_range: Option<LineRange>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LineRange {
    pub start: LinePoint,
    pub end: LinePoint,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LinePoint {
    #[serde(default)]
    pub new_line: Option<u64>,
    #[serde(default)]
    pub old_line: Option<u64>,
}

impl NotePosition {
    /// The file: the new path, or the old one of a removed file.
    pub fn path(&self) -> Option<&str> {
        self.new_path.as_deref().or(self.old_path.as_deref())
    }

    /// The first and last line, in the new file where there is one: a range's ends, else the one line.
    pub fn lines(&self) -> Option<(u64, u64)> {
        let line = |p: &LinePoint| p.new_line.or(p.old_line);
        if let Some(range) = &self.line_range {
            if let (Some(start), Some(end)) = (line(&range.start), line(&range.end)) {
                return Some((start.min(end), end.max(start)));
            }
        }
        let one = self.new_line.or(self.old_line)?;
        Some((one, one))
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct NotedIssue {
    pub iid: u64,
    pub state: String,
}

/// The merge request a note or a pipeline is about; hooks send its attributes whole, the branch and both
/// projects read here (a fork's merge request has a source project of its own).
#[derive(Clone, Debug, Deserialize)]
pub struct NotedMergeRequest {
    pub iid: u64,
    #[serde(default)]
    pub source_branch: Option<String>,
    #[serde(default)]
    pub source_project_id: Option<u64>,
    #[serde(default)]
    pub target_project_id: Option<u64>,
}

impl NoteEvent {
    pub fn read(data: &serde_json::Value) -> Result<Self, String> {
        Self::deserialize(data)
            .map_err(|e| format!("a note event that does not read as GitLab's note event: {e}"))
    }
}

/// `object_kind: "merge_request"`: what reactions read of a merge request opened, approved, merged, closed, ….
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
    /// `open`, `update`, `merge`, `close`, `reopen`, `approved`, `unapproved`, …
    #[serde(default)]
    pub action: Option<String>,
    /// The merge request's head commit: what an approval approved.
    #[serde(default)]
    pub last_commit: Option<Commit>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Commit {
    pub id: String,
}

impl MergeRequestEvent {
    pub fn read(data: &serde_json::Value) -> Result<Self, String> {
        Self::deserialize(data).map_err(|e| {
            format!("a merge request event that does not read as GitLab's merge request event: {e}")
        })
    }
}

/// `object_kind: "pipeline"`.
#[derive(Clone, Debug, Deserialize)]
pub struct PipelineEvent {
    pub project: Project,
    pub object_attributes: PipelineAttributes,
    #[serde(default)]
    pub merge_request: Option<NotedMergeRequest>,
    /// Its jobs (GitLab calls them builds).
    #[serde(default)]
    pub builds: Vec<PipelineJob>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct PipelineAttributes {
    pub id: u64,
    #[serde(rename = "ref")]
    pub git_ref: String,
    pub sha: String,
    /// `pending`, `running`, `success`, `failed`, `canceled`, …
    pub status: String,
    /// Its page.
    #[serde(default)]
    pub url: Option<String>,
}

/// One of a pipeline's jobs, as its hook lists them.
#[derive(Clone, Debug, Deserialize)]
pub struct PipelineJob {
    pub id: u64,
    pub name: String,
    /// `created`, `running`, `success`, `failed`, `skipped`, `canceled`, `manual`, …
    pub status: String,
    /// A job allowed to fail fails no pipeline.
    #[serde(default)]
    pub allow_failure: bool,
}

impl PipelineEvent {
    pub fn read(data: &serde_json::Value) -> Result<Self, String> {
        Self::deserialize(data).map_err(|e| {
            format!("a pipeline event that does not read as GitLab's pipeline event: {e}")
        })
    }

    /// The jobs that failed the pipeline (failed and not allowed to), in its order.
    pub fn failed_jobs(&self) -> impl Iterator<Item = &PipelineJob> {
        self.builds
            .iter()
            .filter(|j| j.status == "failed" && !j.allow_failure)
    }
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

impl JobEvent {
    pub fn read(data: &serde_json::Value) -> Result<Self, String> {
        Self::deserialize(data)
            .map_err(|e| format!("a job event that does not read as GitLab's job event: {e}"))
    }
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

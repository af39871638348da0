//! What `effects:gitlab` can be asked to do. Stored in `effect.requested` under `action` (`gitlab_note`): the
//! names are the log's, so they never change.

use serde::{Deserialize, Serialize};

use crate::effects::ProviderAction;
use crate::tasks::RepoName;

/// A GitLab call. Everything the call needs is in it, so the call is the same whoever makes it, whenever.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action")]
pub enum GitlabAction {
    /// A note on a GitLab issue (Markdown), carrying its key's marker so it is made once.
    #[serde(rename = "gitlab_note")]
    Note {
        project: RepoName,
        iid: u64,
        body: String,
    },
}

impl ProviderAction for GitlabAction {
    fn name(&self) -> &'static str {
        match self {
            GitlabAction::Note { .. } => "gitlab_note",
        }
    }

    fn safe_to_repeat(&self) -> bool {
        match self {
            // The client looks for the key's marker among the notes before making one.
            GitlabAction::Note { .. } => true,
        }
    }
}

//! What `effects:linear` can be asked to do. Stored in `effect.requested` under `action` (`linear_comment`, …):
//! the names are the log's, so they never change.

use serde::{Deserialize, Serialize};

use crate::effects::ProviderAction;

/// A Linear call. Everything the call needs is in it, so the call is the same whoever makes it, whenever.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action")]
pub enum LinearAction {
    /// A comment on a Linear issue (Markdown), created under an id derived from the key so it is made once.
    #[serde(rename = "linear_comment")]
    Comment { issue: uuid::Uuid, body: String },
    /// Moves a Linear issue to the first of `states` its team has, else to its team's first state of type
    /// `fallback` (`started`, `completed`, …).
    #[serde(rename = "linear_move_issue")]
    MoveIssue {
        issue: uuid::Uuid,
        states: Vec<String>,
        fallback: String,
    },
    /// An agent activity in a Linear agent session: `content` is Linear's (`{"type": "thought", "body": …}`).
    #[serde(rename = "linear_activity")]
    Activity {
        session: String,
        content: serde_json::Value,
    },
    /// The links a Linear agent session shows (label, address).
    #[serde(rename = "linear_session_urls")]
    SessionUrls {
        session: String,
        urls: Vec<(String, String)>,
    },
    /// The checklist a Linear agent session shows: a plan's items and where each stands (replaces the last).
    #[serde(rename = "linear_session_plan")]
    SessionPlan {
        session: String,
        plan: Vec<crate::providers::linear::PlanStep>,
    },
}

impl ProviderAction for LinearAction {
    fn name(&self) -> &'static str {
        match self {
            LinearAction::Comment { .. } => "linear_comment",
            LinearAction::MoveIssue { .. } => "linear_move_issue",
            LinearAction::Activity { .. } => "linear_activity",
            LinearAction::SessionUrls { .. } => "linear_session_urls",
            LinearAction::SessionPlan { .. } => "linear_session_plan",
        }
    }

    fn safe_to_repeat(&self) -> bool {
        match self {
            // Created under an id derived from the key: a repeat finds the first.
            LinearAction::Comment { .. } | LinearAction::Activity { .. } => true,
            // Moving to the state it is in, or setting the same links or checklist, changes nothing (and a
            // checklist's next state is asked for only once this one settled, so a repeat is never stale).
            LinearAction::MoveIssue { .. }
            | LinearAction::SessionUrls { .. }
            | LinearAction::SessionPlan { .. } => true,
        }
    }
}

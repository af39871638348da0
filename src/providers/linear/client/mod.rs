//! The Linear GraphQL client effects and the poller call through, at `LINEAR_API_URL` (the endpoint itself,
//! default `https://api.linear.app/graphql`) with `LINEAR_API_KEY` in the `Authorization` header.
//!
//! Creating a comment or an agent activity sends an `id` derived from the effect's key: Linear keeps ids
//! unique, so an attempt repeated after a crash cannot post twice; when the create fails, the client looks the
//! id up and a found one counts as posted before.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use uuid::Uuid;

pub mod operations;

use graphql_client::GraphQLQuery;

use self::operations as ops;
use crate::effects::{CallError, Produced};

pub const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct LinearClient {
    http: reqwest::Client,
    api_url: String,
    key: SecretString,
}

impl std::fmt::Debug for LinearClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinearClient")
    }
}

/// The id Linear stores a created comment or activity under, from the effect key: the same key always makes
/// the same id (in UUID v4 form, which is what Linear accepts from clients).
pub fn entity_id(key: &str) -> Uuid {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// One entry of an agent session's plan, the checklist Linear shows in the session (`agentSessionUpdate`'s
/// `plan`; each update replaces the whole list).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlanStep {
    pub content: String,
    pub status: PlanStepStatus,
}

/// A plan entry's status, as Linear spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PlanStepStatus {
    Pending,
    InProgress,
    Completed,
    Canceled,
}

/// One of a team's workflow states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowState {
    pub id: String,
    pub name: String,
    /// `triage`, `backlog`, `unstarted`, `started`, `completed`, `canceled`.
    pub kind: String,
}

/// Which state to move an issue to: the first of `names` the team has (case-insensitive), else the team's first
/// state of type `fallback`. Pure.
pub fn pick_state<'a>(
    states: &'a [WorkflowState],
    names: &[String],
    fallback: &str,
) -> Option<&'a WorkflowState> {
    names
        .iter()
        .find_map(|name| {
            states
                .iter()
                .find(|s| s.name.trim().eq_ignore_ascii_case(name.trim()))
        })
        .or_else(|| states.iter().find(|s| s.kind == fallback))
}

impl LinearClient {
    pub fn new(api_url: &str, key: &SecretString) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the Linear client: {e}"))?;
        Ok(Self {
            http,
            api_url: api_url.to_owned(),
            key: key.clone(),
        })
    }

    /// One operation of [`operations`], typed against Linear's schema; `what` names it in errors. An answer that
    /// does not fit the operation's types is a permanent error that names what did not fit.
    pub async fn run<Q: GraphQLQuery>(
        &self,
        what: &str,
        variables: Q::Variables,
    ) -> Result<Q::ResponseData, CallError> {
        let data = self.post(what, &Q::build_query(variables)).await?;
        serde_json::from_value(data).map_err(|e| CallError::Permanent {
            message: format!("{what}: Linear's answer does not fit its schema: {e}"),
        })
    }

    /// One GraphQL request. Rate limits (HTTP 429, or Linear's `RATELIMITED` code on a 400) and server errors are
    /// transient; other refusals are permanent.
    async fn post(&self, what: &str, body: &impl serde::Serialize) -> Result<Value, CallError> {
        let response = self
            .http
            .post(&self.api_url)
            .header(reqwest::header::AUTHORIZATION, self.key.expose_secret())
            .json(body)
            .send()
            .await
            .map_err(|e| CallError::Transient {
                message: format!("{what}: no answer from Linear: {}", e.without_url()),
                retry_after: None,
            })?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.min(3600)))
            .or_else(|| reset_wait(response.headers()));
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        let errors = answer["errors"].as_array().cloned().unwrap_or_default();
        if status.is_success() && errors.is_empty() {
            return Ok(answer["data"].clone());
        }
        let codes: Vec<&str> = errors
            .iter()
            .filter_map(|e| e["extensions"]["code"].as_str())
            .collect();
        let detail = errors
            .iter()
            .filter_map(|e| e["message"].as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let message = format!(
            "{what}: Linear answered {status}{}",
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            }
        );
        let limited = status.as_u16() == 429 || codes.contains(&"RATELIMITED");
        if limited || status.is_server_error() || codes.contains(&"INTERNAL_SERVER_ERROR") {
            Err(CallError::Transient {
                message,
                retry_after,
            })
        } else {
            Err(CallError::Permanent { message })
        }
    }

    /// Who the key belongs to (`pidevops doctor`).
    pub async fn viewer(&self) -> Result<String, CallError> {
        let data = self
            .run::<ops::Viewer>("viewer", ops::viewer::Variables)
            .await?;
        Ok(data.viewer.name)
    }

    /// Comments on an issue, once per `key`.
    pub async fn comment(&self, key: &str, issue: Uuid, body: &str) -> Result<Produced, CallError> {
        let id = entity_id(key);
        let input = ops::comment_create::CommentCreateInput {
            id: Some(id.to_string()),
            issue_id: Some(issue.to_string()),
            body: Some(body.to_owned()),
            ..Default::default()
        };
        let created = self
            .run::<ops::CommentCreate>("commentCreate", ops::comment_create::Variables { input })
            .await;
        match created {
            Ok(data) => Ok(Produced::Comment {
                url: data.comment_create.comment.url,
                posted: true,
            }),
            Err(error) => {
                // Made by an attempt cut off before it heard back?
                let found = self
                    .run::<ops::CommentById>(
                        "comment",
                        ops::comment_by_id::Variables { id: id.to_string() },
                    )
                    .await
                    .ok()
                    .map(|data| data.comment.url);
                match found {
                    Some(url) => Ok(Produced::Comment { url, posted: false }),
                    None => Err(error),
                }
            }
        }
    }

    /// Posts an agent activity (`content` as Linear defines it: `{type: thought|action|response|error, …}`) to a
    /// session, once per `key`.
    pub async fn activity(
        &self,
        key: &str,
        session: &str,
        content: &Value,
    ) -> Result<Produced, CallError> {
        let id = entity_id(key);
        let input = ops::agent_activity_create::AgentActivityCreateInput {
            id: Some(id.to_string()),
            agent_session_id: session.to_owned(),
            content: content.clone(),
            ..Default::default()
        };
        let created = self
            .run::<ops::AgentActivityCreate>(
                "agentActivityCreate",
                ops::agent_activity_create::Variables { input },
            )
            .await;
        match created {
            Ok(_) => Ok(Produced::Done),
            Err(error) => {
                let found = self
                    .run::<ops::AgentActivityById>(
                        "agentActivity",
                        ops::agent_activity_by_id::Variables { id: id.to_string() },
                    )
                    .await
                    .is_ok();
                if found {
                    Ok(Produced::Done)
                } else {
                    Err(error)
                }
            }
        }
    }

    /// Sets the links a session shows (`externalUrls`): label and address of each.
    pub async fn session_urls(
        &self,
        session: &str,
        urls: &[(String, String)],
    ) -> Result<Produced, CallError> {
        let urls = urls
            .iter()
            .map(
                |(label, url)| ops::agent_session_update::AgentSessionExternalUrlInput {
                    label: label.clone(),
                    url: url.clone(),
                },
            )
            .collect();
        let input = ops::agent_session_update::AgentSessionUpdateInput {
            external_urls: Some(urls),
            ..Default::default()
        };
        self.session_update(session, input).await
    }

    /// Replaces the checklist a session shows (`plan`) with `steps`.
    pub async fn session_plan(
        &self,
        session: &str,
        steps: &[PlanStep],
    ) -> Result<Produced, CallError> {
        let plan = serde_json::to_value(steps).map_err(|e| CallError::Permanent {
            message: format!("a session plan as JSON: {e}"),
        })?;
        let input = ops::agent_session_update::AgentSessionUpdateInput {
            plan: Some(plan),
            ..Default::default()
        };
        self.session_update(session, input).await
    }

    async fn session_update(
        &self,
        session: &str,
        input: ops::agent_session_update::AgentSessionUpdateInput,
    ) -> Result<Produced, CallError> {
        self.run::<ops::AgentSessionUpdate>(
            "agentSessionUpdate",
            ops::agent_session_update::Variables {
                id: session.to_owned(),
                input,
            },
        )
        .await?;
        Ok(Produced::Done)
    }

    /// Moves an issue to the first of `names` its team has, else to the team's first state of type `fallback`.
    /// The state ids are looked up on every call (teams rename and add states), and an issue already there is
    /// left alone.
    pub async fn move_issue(
        &self,
        issue: Uuid,
        names: &[String],
        fallback: &str,
    ) -> Result<Produced, CallError> {
        let data = self
            .run::<ops::IssueStates>(
                "issue states",
                ops::issue_states::Variables {
                    id: issue.to_string(),
                },
            )
            .await
            .map_err(|error| match error {
                // Linear answers an issue the key cannot see as "Entity not found".
                CallError::Permanent { message } => CallError::Permanent {
                    message: format!(
                        "issue {issue} is not visible with LINEAR_API_KEY ({message})"
                    ),
                },
                transient => transient,
            })?;
        let issue_data = data.issue;
        let states: Vec<WorkflowState> = issue_data
            .team
            .states
            .nodes
            .into_iter()
            .map(|n| WorkflowState {
                id: n.id,
                name: n.name,
                kind: n.type_,
            })
            .collect();
        let Some(target) = pick_state(&states, names, fallback) else {
            return Err(CallError::Permanent {
                message: format!(
                    "team {} has none of the states {names:?} and no state of type {fallback:?}",
                    issue_data.team.key
                ),
            });
        };
        if issue_data.state.id == target.id {
            return Ok(Produced::State {
                name: target.name.clone(),
                moved: false,
            });
        }
        let input = ops::issue_update::IssueUpdateInput {
            state_id: Some(target.id.clone()),
            ..Default::default()
        };
        self.run::<ops::IssueUpdate>(
            "issueUpdate",
            ops::issue_update::Variables {
                id: issue.to_string(),
                input,
            },
        )
        .await?;
        Ok(Produced::State {
            name: target.name.clone(),
            moved: true,
        })
    }
}

/// Linear's rate-limit headers give the reset as epoch milliseconds.
fn reset_wait(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let remaining = headers
        .get("x-ratelimit-requests-remaining")?
        .to_str()
        .ok()?
        .parse::<i64>()
        .ok()?;
    if remaining > 0 {
        return None;
    }
    let reset_ms = headers
        .get("x-ratelimit-requests-reset")?
        .to_str()
        .ok()?
        .parse::<i64>()
        .ok()?;
    let wait = reset_ms - chrono::Utc::now().timestamp_millis();
    Some(Duration::from_millis(wait.clamp(0, 3_600_000) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(id: &str, name: &str, kind: &str) -> WorkflowState {
        WorkflowState {
            id: id.into(),
            name: name.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn a_named_state_wins_then_the_fallback_type() {
        let states = [
            state("1", "Todo", "unstarted"),
            state("2", "In Progress", "started"),
            state("3", "pi-dev: in progress", "started"),
            state("4", "Done", "completed"),
        ];
        let names = vec!["Pi-Dev: In Progress".to_owned()];
        assert_eq!(pick_state(&states, &names, "started").unwrap().id, "3");
        let missing = vec!["Pi-Dev: Blocked".to_owned()];
        assert_eq!(pick_state(&states, &missing, "started").unwrap().id, "2");
        assert_eq!(pick_state(&states, &missing, "triage"), None);
    }

    #[test]
    fn entity_ids_are_stable_v4_uuids() {
        let a = entity_id("linear:comment:T-1:started");
        assert_eq!(a, entity_id("linear:comment:T-1:started"));
        assert_ne!(a, entity_id("linear:comment:T-2:started"));
        assert_eq!(a.get_version_num(), 4);
    }
}

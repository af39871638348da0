//! `[agents.<name>]`: an agent profile's table, and the choices it names (network, stdin, live input, what a
//! follow-up does to a running agent).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[agents.<name>]`: an agent profile of your own (or a preset's name, to replace it).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentTable {
    /// Required; `None` only so that its absence is reported as the profile's own mistake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    pub stdin: StdinMode,
    /// How a follow-up reaches the agent while it runs: `none`, or `claude-stream-json` (user messages as JSON
    /// lines on its standard input, the prompt the first; see dispatch/live.rs).
    pub live_input: LiveInput,
    /// What a follow-up that arrives while a run runs does when the agent takes no live input: `queue` (the task
    /// goes round again after the run) or `restart` (the run is stopped and started again with it).
    pub on_follow_up: OnFollowUp,
    pub env: Vec<String>,
    /// Variables set to a fixed value in the agent's environment (a CLI's switches: no telemetry, no update
    /// check); never a secret, which belongs in the service's environment and `env`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub set_env: BTreeMap<String, String>,
    pub timeout_s: i64,
    pub no_output_timeout_s: i64,
    /// How the agent's output reports what it spent: `claude`, `codex`, `pi`, `opencode` or `none`; unset, it is
    /// guessed from the command (the CLI and its machine-readable flag).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<String>,
    /// A custom agent's usage line: a regex with named groups `input`, `output`, `cache_read`, `cache_write`,
    /// `cost`, `turns`; each matching line adds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_pattern: Option<String>,
    /// The profile that runs this profile's tasks while its provider's usage or rate limit holds, instead of
    /// their waiting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// The agent's network: `proxy` (its own, egress through pidevops's proxy only), `none`, or `host` (the
    /// service's network: an explicit opt-out, named in `/health` and `doctor`).
    pub network: Network,
}

impl Default for AgentTable {
    fn default() -> Self {
        Self {
            command: None,
            stdin: StdinMode::None,
            live_input: LiveInput::None,
            on_follow_up: OnFollowUp::Queue,
            env: Vec::new(),
            set_env: BTreeMap::new(),
            timeout_s: crate::config::profiles::DEFAULT_TIMEOUT.as_secs() as i64,
            no_output_timeout_s: crate::config::profiles::DEFAULT_NO_OUTPUT_TIMEOUT.as_secs()
                as i64,
            usage: None,
            usage_pattern: None,
            fallback: None,
            network: Network::Proxy,
        }
    }
}

/// `[agents.<name>] network`: what the agent's processes may reach (see dispatch/egress).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Its own network namespace (or Landlock's network rules) with only loopback; egress through a proxy of
    /// pidevops's that allows the model API and the repository's `allow_hosts`, and holds the model key.
    #[default]
    Proxy,
    /// No network at all.
    None,
    /// The service's own network, as before: an explicit opt-out.
    Host,
}

/// `[agents.<name>] stdin`: whether the prompt is the agent's standard input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StdinMode {
    Prompt,
    #[default]
    None,
}

/// `[agents.<name>] live_input`: how the running agent is handed a follow-up (a message on its standard input).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LiveInput {
    #[default]
    None,
    /// Claude Code's `--input-format stream-json`: one JSON user message per line, the prompt the first; it keeps
    /// going until its input closes.
    ClaudeStreamJson,
}

/// `[agents.<name>] on_follow_up`: what a follow-up arriving mid-run does when it cannot be handed over live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFollowUp {
    /// The run goes on; the task goes round again after it with the follow-up in the prompt.
    #[default]
    Queue,
    /// The run is stopped and the attempt given back; the next run's prompt has the follow-up.
    Restart,
}

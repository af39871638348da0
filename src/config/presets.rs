//! THE table of agent presets: each entry whole — its name (also its program), command, the variables it passes and
//! sets, whether it takes live input, the usage format its output is read as and the flag that turns it on, how
//! its model calls reach the run's gateway, the credentials its CLI accepts, and the npm package and version the
//! images install. `profiles::presets`, `guess_usage`, `guess_route`, the preflight's credentials and the install
//! script's pins (a test holds `deploy/install-runtime.sh` to them) all read it: a new preset is one entry here.
//! Why each flag and variable is there: docs/agents.md and the comments below.

/// How a CLI is pointed at its run's model gateway (`dispatch/egress/routes/mod.rs` does it; docs/agents.md, "The
/// agent's network"). Each preset names its own; a profile of your own gets its program's (`profiles::guess_route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelRoute {
    /// The provider's base-URL variable, when the profile's `env` names it (`ANTHROPIC_BASE_URL`: Claude Code).
    BaseUrlVariable,
    /// pi: a per-run agent directory (`PI_CODING_AGENT_DIR`) whose `models.json` points the provider there.
    PiModels,
    /// OpenCode: the provider's `options.baseURL` in `OPENCODE_CONFIG_CONTENT`.
    OpencodeConfig,
    /// Codex: `-c openai_base_url=…` on its command line (Codex reads no variable for it).
    CodexConfig,
}

/// What a CLI accepts as its credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// One of these variables.
    AnyOf(&'static [&'static str]),
    /// Any provider's key variable (`dispatch::preflight::provider_key`).
    ProviderKey,
}

/// A flag of the command that makes the CLI print its usage (`--mode json`, or `--mode=json`; `--json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageFlag {
    pub flag: &'static str,
    pub value: Option<&'static str>,
}

/// Where a CLI keeps its sessions, for pidevops to keep one with each checkpoint and resume it
/// (`dispatch::sessions`): its home variable, the transcript's place under it, and its resume flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStore {
    /// Claude Code: `$CLAUDE_CONFIG_DIR/projects/<cwd spelled>/<id>.jsonl`, resumed with `--resume <id>`.
    Claude,
    /// Codex: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`, resumed with `exec resume <id>`.
    Codex,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The profile's name and its program.
    pub name: &'static str,
    pub command: &'static [&'static str],
    /// Variables of the service's environment passed to the agent (its key, where the CLI reads its endpoint).
    pub env: &'static [&'static str],
    /// Variables set for the agent (telemetry, update checks and downloads off).
    pub set_env: &'static [(&'static str, &'static str)],
    /// Claude Code's `--input-format stream-json`: the prompt and each follow-up are messages on its stdin.
    pub live_input: bool,
    /// The usage format (`domain::usage::UsageFormat::named`) its output is read as…
    pub usage: &'static str,
    /// …when its command has one of these flags.
    pub usage_flags: &'static [UsageFlag],
    pub model_route: ModelRoute,
    pub credentials: Credentials,
    /// The npm package the images install (`deploy/install-runtime.sh`) and its pinned version.
    pub npm_package: &'static str,
    pub npm_version: &'static str,
    /// Whether pidevops keeps and resumes its sessions (`None`: each attempt's CLI starts anew).
    pub session: Option<SessionStore>,
}

const fn flag(flag: &'static str, value: Option<&'static str>) -> UsageFlag {
    UsageFlag { flag, value }
}

pub const PRESETS: &[Preset] = &[
    Preset {
        name: "claude",
        command: &[
            "claude",
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--replay-user-messages",
            "--dangerously-skip-permissions",
            // No project settings (`.claude/settings*.json`: hooks, env, plugins) and no `.mcp.json`: only the
            // run's own HOME (fresh) and the flags here configure it (docs/agents.md, "Planted configuration").
            "--setting-sources",
            "user",
            "--strict-mcp-config",
        ],
        env: &["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"],
        set_env: &[
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            // Claude Code refuses --dangerously-skip-permissions as root unless it is told it runs in a sandbox:
            // it does (pidevops contains it), and a service in a container often runs as root.
            ("IS_SANDBOX", "1"),
        ],
        live_input: true,
        usage: "claude",
        usage_flags: &[flag("--output-format", Some("stream-json"))],
        model_route: ModelRoute::BaseUrlVariable,
        credentials: Credentials::AnyOf(&[
            "ANTHROPIC_API_KEY",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "ANTHROPIC_AUTH_TOKEN",
        ]),
        npm_package: "@anthropic-ai/claude-code",
        npm_version: "2.1.332",
        session: Some(SessionStore::Claude),
    },
    Preset {
        name: "pi",
        // No session file: pidevops never resumes one, and the run's log holds the transcript. JSON events: each
        // assistant message's usage and cost. No extensions discovered (`.pi/extensions/` would run at start).
        command: &[
            "pi",
            "-p",
            "--no-session",
            "--mode",
            "json",
            "--no-extensions",
        ],
        // PI_CODING_AGENT_DIR: a directory with pi's models.json / settings.json (another endpoint, a model), read
        // by pidevops: the agent gets a directory of its own pointing pi at the run's gateway.
        env: &["ANTHROPIC_API_KEY", "PI_CODING_AGENT_DIR"],
        set_env: &[("PI_OFFLINE", "1"), ("PI_SKIP_VERSION_CHECK", "1")],
        live_input: false,
        usage: "pi",
        usage_flags: &[flag("--mode", Some("json"))],
        model_route: ModelRoute::PiModels,
        credentials: Credentials::ProviderKey,
        npm_package: "@mariozechner/pi-coding-agent",
        npm_version: "0.73.1",
        session: None,
    },
    Preset {
        name: "opencode",
        // JSON events: each step's tokens and cost.
        command: &["opencode", "run", "--format", "json"],
        env: &[
            "ANTHROPIC_API_KEY",
            "OPENCODE_CONFIG",
            "OPENCODE_CONFIG_CONTENT",
        ],
        set_env: &[
            ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
            ("OPENCODE_DISABLE_SHARE", "1"),
            // Its bundled model list instead of a download at each start.
            ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
            // Else it installs its default plugins from the npm registry at each start (a fresh HOME).
            ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1"),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
            // No opencode.json or .opencode/ of the project (its MCP servers, plugins, agents, commands).
            ("OPENCODE_DISABLE_PROJECT_CONFIG", "1"),
        ],
        live_input: false,
        usage: "opencode",
        usage_flags: &[flag("--format", Some("json"))],
        model_route: ModelRoute::OpencodeConfig,
        credentials: Credentials::ProviderKey,
        npm_package: "opencode-ai",
        npm_version: "1.18.33",
        session: None,
    },
    Preset {
        name: "codex",
        // Codex's own sandbox cannot nest in pidevops's (its workspace-write mode fails to write inside it):
        // pidevops contains the agent, which is what the flag is for. `exec` reads CODEX_API_KEY, not
        // OPENAI_API_KEY. Codex reads no variable for its endpoint: pidevops adds `-c openai_base_url=…` (its run's
        // gateway), which forwards to OPENAI_BASE_URL, else OpenAI's API. `--json`: JSON events, each turn's
        // token counts.
        command: &[
            "codex",
            "exec",
            "--json",
            "--dangerously-bypass-approvals-and-sandbox",
            "-c",
            "analytics.enabled=false",
            "-",
        ],
        env: &["CODEX_API_KEY", "OPENAI_BASE_URL"],
        set_env: &[],
        live_input: false,
        usage: "codex",
        usage_flags: &[flag("--json", None), flag("--experimental-json", None)],
        model_route: ModelRoute::CodexConfig,
        credentials: Credentials::AnyOf(&["CODEX_API_KEY", "OPENAI_API_KEY"]),
        npm_package: "@openai/codex",
        npm_version: "0.171.0",
        session: Some(SessionStore::Codex),
    },
];

/// The preset whose program `program` (a name or a path) is.
pub fn by_program(program: &str) -> Option<&'static Preset> {
    let name = program.rsplit('/').next().unwrap_or(program);
    PRESETS.iter().find(|p| p.name == name)
}

impl Preset {
    /// Whether `args` (a whole command, program first) turn this CLI's usage output on.
    pub fn reports_usage(&self, args: &[&str]) -> bool {
        self.usage_flags.iter().any(|f| match f.value {
            None => args.contains(&f.flag),
            Some(value) => {
                args.windows(2).any(|w| w[0] == f.flag && w[1] == value)
                    || args.iter().any(|a| *a == format!("{}={value}", f.flag))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The images install what the table pins: `deploy/install-runtime.sh`'s defaults and its package list.
    #[test]
    fn the_install_script_pins_what_the_table_says() {
        let script = include_str!("../../deploy/install-runtime.sh");
        for preset in PRESETS {
            let installed = format!("\"{}@$", preset.npm_package);
            assert!(
                script.contains(&installed),
                "{} is not installed: {installed}",
                preset.name
            );
            let pin = script
                .lines()
                .find(|l| l.contains(&format!(":-{}}}", preset.npm_version)))
                .unwrap_or_else(|| {
                    panic!(
                        "{}'s version {} is not the script's default",
                        preset.name, preset.npm_version
                    )
                });
            let variable = pin.split('=').next().unwrap_or_default();
            assert!(
                script.contains(&format!("\"{}@${variable}\"", preset.npm_package)),
                "{}: {pin} is not the version its package installs",
                preset.name
            );
        }
    }

    #[test]
    fn every_entry_is_whole_and_its_own() {
        let mut names = std::collections::BTreeSet::new();
        for preset in PRESETS {
            assert!(names.insert(preset.name), "{} twice", preset.name);
            assert_eq!(
                preset.command.first(),
                Some(&preset.name),
                "the program is the name"
            );
            assert!(
                crate::domain::usage::UsageFormat::named(preset.usage).is_ok(),
                "{}",
                preset.usage
            );
            assert!(
                preset.reports_usage(preset.command),
                "{}'s own command reports usage",
                preset.name
            );
            assert!(!preset.npm_package.is_empty() && !preset.npm_version.is_empty());
        }
        assert_eq!(
            by_program("/opt/pidevops-agents/bin/codex").map(|p| p.name),
            Some("codex")
        );
        assert_eq!(by_program("my-agent"), None);
    }
}

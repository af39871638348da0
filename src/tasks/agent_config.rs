//! The agent CLIs' project configuration: the files in a repository that a CLI started there reads as its own
//! settings, hooks, MCP servers, plugins or extensions. What a worker leaves there runs in the next CLI started
//! in that checkout (a reviewer, a planner, a triage agent, a later worker once it is merged), so pidevops names
//! these paths in an attempt's outcome and sets them aside before the runs that must not load them
//! (`dispatch::agent_files::set_aside_agent_config`). Instructions (`CLAUDE.md`, `AGENTS.md`) are not here: a
//! model reads them as text, they run nothing. Pure; docs/agents.md has the table.

/// A configuration path: a directory (with everything beneath it) or a file, one or more `/`-separated segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigPath {
    Dir(&'static str),
    File(&'static str),
}

impl ConfigPath {
    /// The path as written.
    pub const fn name(&self) -> &'static str {
        match self {
            ConfigPath::Dir(name) | ConfigPath::File(name) => name,
        }
    }

    pub const fn is_dir(&self) -> bool {
        matches!(self, ConfigPath::Dir(_))
    }
}

/// Each path, relative to the repository's root, where the CLIs look for it (they start in the worktree's root).
/// The one list: `tasks::plan::guard::PROTECTED` is built from it (and the hook and CI paths), so a CLI's path
/// added here is also refused in a push unless a scope names it.
pub const PATHS: &[ConfigPath] = &[
    // Claude Code: settings.json and settings.local.json (hooks, env, permissions, plugins, apiKeyHelper),
    // agents, commands, skills.
    ConfigPath::Dir(".claude"),
    // Claude Code: project MCP servers (each a command it starts).
    ConfigPath::File(".mcp.json"),
    // Codex: config.toml (MCP servers, model provider), hooks, exec-policy rules.
    ConfigPath::Dir(".codex"),
    // OpenCode: its config (MCP servers, providers, plugins) and .opencode/ (plugins run at start, agents,
    // commands, tools).
    ConfigPath::File("opencode.json"),
    ConfigPath::File("opencode.jsonc"),
    ConfigPath::Dir(".opencode"),
    // pi: settings.json (shell path, command prefix, npm command, packages installed at start), extensions.
    ConfigPath::Dir(".pi"),
];

/// Whether `path` (relative to the repository's root, `/`-separated, as git names it) is one of [`PATHS`] or,
/// for a directory, inside it.
pub fn is_agent_config(path: &str) -> bool {
    let path = path.strip_prefix("./").unwrap_or(path);
    PATHS.iter().any(|config| {
        path.strip_prefix(config.name())
            .is_some_and(|rest| rest.is_empty() || (config.is_dir() && rest.starts_with('/')))
    })
}

/// The paths of `changed` that are agent CLI configuration, in their order.
pub fn agent_config_of(changed: &[String]) -> Vec<String> {
    changed
        .iter()
        .filter(|p| is_agent_config(p))
        .cloned()
        .collect()
}

/// One line naming `planted` for an attempt's outcome and its next prompt; `None` when there is none.
pub fn planted_note(planted: &[String]) -> Option<String> {
    const MAX_FILES: usize = 20;
    if planted.is_empty() {
        return None;
    }
    let mut files = planted
        .iter()
        .take(MAX_FILES)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if planted.len() > MAX_FILES {
        files.push_str(&format!(" and {} more", planted.len() - MAX_FILES));
    }
    Some(format!(
        "The change writes agent CLI configuration (settings, hooks, MCP servers, plugins), which no reviewer, \
         planner or triage agent loads: {files}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_config_paths_and_what_is_inside_them_are_agent_config() {
        for path in [
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".claude/hooks/approve.sh",
            ".claude",
            ".mcp.json",
            ".codex/config.toml",
            "opencode.json",
            "opencode.jsonc",
            ".opencode/plugin/x.ts",
            ".pi/settings.json",
            ".pi/extensions/x.ts",
            "./.mcp.json",
        ] {
            assert!(is_agent_config(path), "{path}");
        }
    }

    #[test]
    fn instructions_lookalikes_and_nested_copies_are_not() {
        for path in [
            "CLAUDE.md",
            "AGENTS.md",
            ".claudeignore",
            ".claude-notes/x",
            ".mcp.json.bak",
            "opencode.json5",
            "docs/.claude/settings.json",
            "src/.pi/x",
            ".pidevops/review.json",
            "",
        ] {
            assert!(!is_agent_config(path), "{path}");
        }
    }

    #[test]
    fn the_note_names_the_planted_files_and_bounds_the_list() {
        assert_eq!(planted_note(&[]), None);
        let changed = vec![
            "CHANGES.md".to_owned(),
            ".claude/settings.json".to_owned(),
            ".mcp.json".to_owned(),
        ];
        let planted = agent_config_of(&changed);
        assert_eq!(planted, vec![".claude/settings.json", ".mcp.json"]);
        let note = planted_note(&planted).unwrap();
        assert!(
            note.ends_with(": .claude/settings.json, .mcp.json"),
            "{note}"
        );
        let many: Vec<String> = (0..25).map(|n| format!(".claude/{n}")).collect();
        let note = planted_note(&many).unwrap();
        assert!(note.ends_with(" and 5 more"), "{note}");
        assert!(!note.contains(".claude/20"), "{note}");
    }
}

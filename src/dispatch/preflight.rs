//! The preflight: whether an agent profile can run here, said before a run is spent on it. One function,
//! [`check`], read by `pidevops config check` (warnings), `pidevops doctor` (a line per profile) and the
//! dispatcher (a profile that fails it claims nothing: its tasks wait with no attempt spent, and `/health`'s
//! dispatcher detail names the profile and why, in `unready_profiles`).
//!
//! What it asks, each answered from the environment the service runs with and the filesystem, never a network:
//! - the profile's program resolves on the agents' PATH (the service's `PATH`, else [`AGENT_DEFAULT_PATH`], as
//!   `launch.rs` gives it), the way the runner will look for it ([`find_program`]);
//! - pidevops's own `git` is on the service's `PATH` (every attempt clones, commits and pushes with it);
//! - the profile passes a credential its CLI accepts, and it is set ([`credential_variables`]);
//! - the workspace volume (`WORKSPACE_ROOT`, or its nearest existing parent) is writable by this process.

use std::path::Path;

use crate::config::dispatch::DispatchConfig;
use crate::config::profiles::{AgentProfile, Profiles};
use crate::config::Env;
use crate::dispatch::sandbox::find_program;

/// An agent's PATH when the service has none (`launch.rs` `neutral_env`).
pub const AGENT_DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The variables each CLI accepts a credential from, by its program's name; `None`: a CLI pidevops does not know,
/// whose credentials it cannot judge. pi and OpenCode take their provider's key (any of the providers they
/// support), so for them it is any variable the profile passes whose name says it is one ([`provider_key`]).
pub fn credential_variables(program: &str) -> Option<Credentials> {
    match program.rsplit('/').next().unwrap_or(program) {
        "claude" => Some(Credentials::AnyOf(&[
            "ANTHROPIC_API_KEY",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "ANTHROPIC_AUTH_TOKEN",
        ])),
        "codex" => Some(Credentials::AnyOf(&["CODEX_API_KEY", "OPENAI_API_KEY"])),
        "pi" | "opencode" => Some(Credentials::ProviderKey),
        _ => None,
    }
}

/// What a CLI accepts as its credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// One of these variables.
    AnyOf(&'static [&'static str]),
    /// Any provider's key variable ([`provider_key`]).
    ProviderKey,
}

/// Whether a variable's name says it holds a provider's key (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`,
/// `OPENROUTER_API_KEY`, `ANTHROPIC_AUTH_TOKEN`, …).
pub fn provider_key(name: &str) -> bool {
    name.ends_with("_API_KEY") || name.ends_with("_AUTH_TOKEN") || name.ends_with("_OAUTH_TOKEN")
}

/// Why `profile` cannot run here, one reason a line; empty when it can. `env` is the service's environment,
/// `workspace_root` its `WORKSPACE_ROOT`.
pub fn check(profile: &AgentProfile, env: &Env, workspace_root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let program = profile
        .command
        .first()
        .map(String::as_str)
        .unwrap_or_default();
    let agent_path = env.get("PATH").unwrap_or(AGENT_DEFAULT_PATH);
    if find_program(program, Some(agent_path)).is_none() {
        problems.push(if program.contains('/') {
            format!("its command {program:?} is not an executable file")
        } else {
            format!(
                "its command {program:?} is not an executable on the agents' PATH ({agent_path})"
            )
        });
    }
    if find_program("git", env.get("PATH")).is_none() {
        problems.push(format!(
            "git is not on the service's PATH ({}): pidevops clones, commits and pushes with it",
            env.get("PATH").unwrap_or("unset")
        ));
    }
    if let Some(missing) = credential(profile, env) {
        problems.push(missing);
    }
    if let Err(why) = writable(workspace_root) {
        problems.push(why);
    }
    problems
}

/// Why the profile has no credential its CLI accepts, if it has none.
fn credential(profile: &AgentProfile, env: &Env) -> Option<String> {
    let program = profile.command.first()?;
    let accepted = credential_variables(program)?;
    let accepts = |name: &str| match accepted {
        Credentials::AnyOf(names) => names.contains(&name),
        Credentials::ProviderKey => provider_key(name),
    };
    let passed: Vec<&str> = profile
        .env
        .iter()
        .map(String::as_str)
        .filter(|name| accepts(name))
        .collect();
    if passed.iter().any(|name| env.get(name).is_some()) {
        return None;
    }
    let cli = program.rsplit('/').next().unwrap_or(program);
    let takes = match accepted {
        Credentials::AnyOf(names) => names.join(", "),
        Credentials::ProviderKey => {
            "its provider's key (ANTHROPIC_API_KEY, OPENAI_API_KEY, …)".to_owned()
        }
    };
    Some(if passed.is_empty() {
        format!(
            "{cli} takes its credential from {takes}, and the profile's env passes none of them: add one to \
             [agents.{}] env",
            profile.name
        )
    } else {
        format!(
            "no credential: {} {} not set ({cli} takes {takes})",
            passed.join(", "),
            if passed.len() == 1 { "is" } else { "are" }
        )
    })
}

/// Whether this process may create files under `root`: `root` itself or, when it does not exist yet (serve makes
/// it), its nearest existing parent. Asked with `access(2)`, so nothing is written to find out.
pub fn writable(root: &Path) -> Result<(), String> {
    use nix::unistd::{access, AccessFlags};
    let absolute = std::env::current_dir()
        .map(|cwd| cwd.join(root))
        .unwrap_or_else(|_| root.to_owned());
    let existing = absolute
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    match access(existing, AccessFlags::W_OK | AccessFlags::X_OK) {
        Ok(()) => Ok(()),
        Err(errno) => Err(format!(
            "the workspace volume is not writable: {} ({}, WORKSPACE_ROOT {})",
            existing.display(),
            errno.desc(),
            root.display()
        )),
    }
}

/// The profiles this configuration runs, each with whose it is ("acme/api's", "the default", "the planner"…):
/// every repository's, the default, the planner, the triage agent, and each reviewer of a repository reviewed by
/// an agent.
pub fn used_profiles<'a>(
    config: &DispatchConfig,
    profiles: &'a Profiles,
) -> Vec<(String, &'a AgentProfile)> {
    let mut used: Vec<(String, &AgentProfile)> = Vec::new();
    for repo in config.repos.keys() {
        used.push((format!("{repo}'s"), profiles.for_repo(repo)));
    }
    used.push(("the default".to_owned(), profiles.default_profile()));
    if let Some(planner) = profiles.planner() {
        used.push(("the planner".to_owned(), planner));
    }
    if let Some(triager) = profiles.triager() {
        used.push(("the triage".to_owned(), triager));
    }
    for (repo, review) in &config.review {
        if *review != crate::tasks::ReviewPolicy::Agent {
            continue;
        }
        if let Some(reviewer) = profiles.reviewer_for(repo) {
            used.push((format!("{repo}'s reviewer"), reviewer));
        }
    }
    used
}

/// Each profile this configuration runs that fails the preflight, once, with whose it is and why (for `doctor`
/// and `config check`).
pub fn unready_used(
    config: &DispatchConfig,
    profiles: &Profiles,
    env: &Env,
    workspace_root: &Path,
) -> Vec<(String, Vec<String>)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (whose, profile) in used_profiles(config, profiles) {
        if !seen.insert(profile.name.clone()) {
            continue;
        }
        let problems = check(profile, env, workspace_root);
        if !problems.is_empty() {
            out.push((
                format!("agent profile {:?} ({whose} profile)", profile.name),
                problems,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn profile(command: &str, env: &[&str]) -> AgentProfile {
        let mut profile = crate::config::profiles::presets()
            .into_iter()
            .find(|p| p.name == "claude")
            .unwrap();
        profile.name = "p".into();
        profile.command = vec![command.to_owned()];
        profile.env = env.iter().map(|s| (*s).to_owned()).collect();
        profile
    }

    /// A directory with executables of these names (empty scripts).
    fn bin(names: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for name in names {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    #[test]
    fn a_runnable_profile_passes_and_each_missing_part_is_named() {
        let bin = bin(&["claude", "git"]);
        let ws = tempfile::tempdir().unwrap();
        let path = bin.path().display().to_string();
        let env = Env::from_pairs([("PATH", path.as_str()), ("CLAUDE_CODE_OAUTH_TOKEN", "t")]);
        let claude = profile("claude", &["CLAUDE_CODE_OAUTH_TOKEN"]);
        assert_eq!(check(&claude, &env, ws.path()), Vec::<String>::new());

        let missing = check(
            &profile("cladue", &["CLAUDE_CODE_OAUTH_TOKEN"]),
            &env,
            ws.path(),
        );
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].contains("\"cladue\" is not an executable"),
            "{missing:?}"
        );

        let no_git = bin_without_git(&claude);
        assert!(
            no_git
                .iter()
                .any(|p| p.starts_with("git is not on the service's PATH")),
            "{no_git:?}"
        );

        let unset = Env::from_pairs([("PATH", path.as_str())]);
        let keyless = check(&claude, &unset, ws.path());
        assert_eq!(
            keyless,
            ["no credential: CLAUDE_CODE_OAUTH_TOKEN is not set (claude takes ANTHROPIC_API_KEY, \
              CLAUDE_CODE_OAUTH_TOKEN, ANTHROPIC_AUTH_TOKEN)"]
        );
        // A key set in the service's environment that the profile does not pass never reaches the agent.
        let unpassed = check(&profile("claude", &["ANTHROPIC_BASE_URL"]), &env, ws.path());
        assert!(unpassed[0].contains("passes none of them"), "{unpassed:?}");
    }

    fn bin_without_git(profile: &AgentProfile) -> Vec<String> {
        let bin = bin(&["claude"]);
        let path = bin.path().display().to_string();
        let env = Env::from_pairs([("PATH", path.as_str()), ("CLAUDE_CODE_OAUTH_TOKEN", "t")]);
        check(profile, &env, Path::new("/tmp"))
    }

    #[test]
    fn each_cli_takes_its_own_credentials_and_an_unknown_one_is_not_judged() {
        let bin = bin(&["codex", "pi", "mine", "git"]);
        let path = bin.path().display().to_string();
        let env = Env::from_pairs([
            ("PATH", path.as_str()),
            ("OPENAI_API_KEY", "k"),
            ("OPENROUTER_API_KEY", "k"),
        ]);
        let ws = tempfile::tempdir().unwrap();
        assert!(check(&profile("codex", &["OPENAI_API_KEY"]), &env, ws.path()).is_empty());
        assert!(check(&profile("pi", &["OPENROUTER_API_KEY"]), &env, ws.path()).is_empty());
        let pi = check(&profile("pi", &["GEMINI_API_KEY"]), &env, ws.path());
        assert!(pi[0].contains("GEMINI_API_KEY is not set"), "{pi:?}");
        assert!(check(&profile("mine", &[]), &env, ws.path()).is_empty());
    }

    #[test]
    fn a_workspace_under_a_directory_it_cannot_write_is_named() {
        assert_eq!(writable(&std::env::temp_dir().join("not-yet/made")), Ok(()));
        // A directory this process may not write: by its mode, or (root may write any mode) a read-only mount.
        let dir = tempfile::tempdir().unwrap();
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o555)).unwrap();
        // SAFETY: geteuid has no preconditions and cannot fail.
        let read_only = if unsafe { nix::libc::geteuid() } == 0 {
            std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split(' ').collect();
                    let ro = fields.get(5)?.split(',').any(|o| o == "ro");
                    let point = fields.get(4)?;
                    ro.then(|| std::path::PathBuf::from(point))
                })
                .find(|point| point.is_dir())
        } else {
            Some(closed)
        };
        let Some(read_only) = read_only else {
            eprintln!("no read-only mount here and running as root: the refusal is not exercised");
            return;
        };
        let why = writable(&read_only.join("ws")).unwrap_err();
        assert!(
            why.contains(&read_only.display().to_string()) && why.contains("not writable"),
            "{why}"
        );
    }
}

//! A repository's own environment for its runs, from `[repos."owner/name"]`: the commands pidevops runs in the
//! worktree around the agent and the secrets those commands (never the agent) get. Pure; every mistake names its
//! key.
//!
//! ```toml
//! [repos."acme/web"]
//! setup = ["npm", "ci"]            # once per fresh worktree, before the agent
//! before_run = ["make", "fixtures"]
//! after_run = ["npm", "run", "format"]
//! check = ["npm", "test"]          # after the agent: a failure sends the task back with its output
//! secrets = ["NPM_TOKEN"]          # passed to setup, before_run and after_run; never to the agent or the check
//! hook_timeout_s = 600             # each of setup, before_run, after_run
//! check_timeout_s = 1800
//! ```
//!
//! A secret is only a name here: its value is read from the environment when a run starts, and a run whose
//! secret is unset fails as `setup` (naming the variable), so the file can be checked anywhere.

use std::time::Duration;

use super::file::RepoTable;
use super::profiles::is_never_passed;

/// What a repository's runs do besides the agent. `Default`: nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct RepoEnv {
    pub setup: Option<Vec<String>>,
    pub before_run: Option<Vec<String>>,
    pub after_run: Option<Vec<String>>,
    pub check: Option<Vec<String>>,
    /// Environment variable names, handed to the hooks (setup, before_run, after_run) only.
    pub secrets: Vec<String>,
    pub hook_timeout: Duration,
    pub check_timeout: Duration,
}

impl Default for RepoEnv {
    fn default() -> Self {
        Self {
            setup: None,
            before_run: None,
            after_run: None,
            check: None,
            secrets: Vec::new(),
            hook_timeout: Self::DEFAULT_HOOK_TIMEOUT,
            check_timeout: Self::DEFAULT_CHECK_TIMEOUT,
        }
    }
}

impl RepoEnv {
    pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(600);
    pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(1800);

    /// Whether the runs of this repository do anything besides the agent.
    pub fn is_empty(&self) -> bool {
        self.setup.is_none()
            && self.before_run.is_none()
            && self.after_run.is_none()
            && self.check.is_none()
    }

    /// The environment keys of `[repos."<name>"]` (`key` is `repos."<name>"`); `None` when it sets none.
    pub fn from_table(key: &str, table: &RepoTable) -> Result<Option<Self>, String> {
        let command = |field: &str, value: &Option<Vec<String>>| {
            match value {
            None => Ok(None),
            Some(argv) if argv.first().is_none_or(|p| p.trim().is_empty()) => Err(format!(
                "{key}.{field} must be a command: a non-empty list whose first string is the program"
            )),
            Some(argv) if argv.iter().any(|a| a.contains('\0')) => {
                Err(format!("{key}.{field} must not contain a NUL character"))
            }
            Some(argv) => Ok(Some(argv.clone())),
        }
        };
        let seconds = |field: &str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(s) if s.is_finite() && s > 0.0 && s < 1e7 => Ok(Duration::from_secs_f64(s)),
            Some(_) => Err(format!(
                "{key}.{field} must be a positive number of seconds"
            )),
        };
        let env = RepoEnv {
            setup: command("setup", &table.setup)?,
            before_run: command("before_run", &table.before_run)?,
            after_run: command("after_run", &table.after_run)?,
            check: command("check", &table.check)?,
            secrets: table.secrets.clone().unwrap_or_default(),
            hook_timeout: seconds(
                "hook_timeout_s",
                table.hook_timeout_s,
                Self::DEFAULT_HOOK_TIMEOUT,
            )?,
            check_timeout: seconds(
                "check_timeout_s",
                table.check_timeout_s,
                Self::DEFAULT_CHECK_TIMEOUT,
            )?,
        };
        for (i, var) in env.secrets.iter().enumerate() {
            let name_like = var
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !name_like {
                return Err(format!(
                    "{key}.secrets[{i}]: {var:?} is not an environment variable name"
                ));
            }
            if is_never_passed(var) || var.starts_with("PIDEVOPS_") {
                return Err(format!(
                    "{key}.secrets[{i}] is {var}, one of pidevops's own secrets or settings: a repository's \
                     commands never get those"
                ));
            }
            if env.secrets[..i].contains(var) {
                return Err(format!("{key}.secrets lists {var} twice"));
            }
        }
        let hooks = env.setup.is_some() || env.before_run.is_some() || env.after_run.is_some();
        if !env.secrets.is_empty() && !hooks {
            return Err(format!(
                "{key}.secrets are passed only to setup, before_run and after_run, and none of them is set"
            ));
        }
        let timeouts_only =
            env.is_empty() && (table.hook_timeout_s.is_some() || table.check_timeout_s.is_some());
        if timeouts_only {
            return Err(format!(
                "{key} sets a timeout but no setup, before_run, after_run or check for it to bound"
            ));
        }
        Ok((!env.is_empty()).then_some(env))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<RepoEnv>, String> {
        let file = text
            .parse::<crate::config::FileConfig>()
            .map_err(|e| e.to_string())?;
        Ok(file
            .dispatch
            .environments
            .get(&"acme/web".parse().unwrap())
            .cloned())
    }

    #[test]
    fn the_commands_secrets_and_timeouts_are_read() {
        let env = parse(
            r#"[repos."acme/web"]
            setup = ["npm", "ci"]
            before_run = ["make", "fixtures"]
            after_run = ["npm", "run", "format"]
            check = ["npm", "test"]
            secrets = ["NPM_TOKEN", "_PRIVATE_2"]
            hook_timeout_s = 30
            check_timeout_s = 0.5"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(env.setup.unwrap(), ["npm", "ci"]);
        assert_eq!(env.before_run.unwrap(), ["make", "fixtures"]);
        assert_eq!(env.after_run.unwrap(), ["npm", "run", "format"]);
        assert_eq!(env.check.unwrap(), ["npm", "test"]);
        assert_eq!(env.secrets, ["NPM_TOKEN", "_PRIVATE_2"]);
        assert_eq!(env.hook_timeout, Duration::from_secs(30));
        assert_eq!(env.check_timeout, Duration::from_millis(500));
    }

    #[test]
    fn a_repository_without_commands_has_no_environment_and_defaults_hold() {
        assert_eq!(parse("[repos.\"acme/web\"]\nbase = \"dev\"").unwrap(), None);
        let env = parse("[repos.\"acme/web\"]\ncheck = [\"true\"]")
            .unwrap()
            .unwrap();
        assert_eq!(env.hook_timeout, RepoEnv::DEFAULT_HOOK_TIMEOUT);
        assert_eq!(env.check_timeout, RepoEnv::DEFAULT_CHECK_TIMEOUT);
        assert!(env.secrets.is_empty());
    }

    #[test]
    fn each_mistake_names_its_key_and_nothing_is_built() {
        for (text, says) in [
            ("setup = []", "repos.\"acme/web\".setup must be a command"),
            (
                "check = [\" \"]",
                "repos.\"acme/web\".check must be a command",
            ),
            (
                "after_run = [\"a\\u0000b\"]",
                "after_run must not contain a NUL",
            ),
            (
                "setup = [\"x\"]\nsecrets = [\"NPM TOKEN\"]",
                "secrets[0]: \"NPM TOKEN\" is not an environment variable name",
            ),
            (
                "setup = [\"x\"]\nsecrets = [\"1ST\"]",
                "is not an environment variable name",
            ),
            (
                "setup = [\"x\"]\nsecrets = [\"A\", \"GITHUB_TOKEN\"]",
                "secrets[1] is GITHUB_TOKEN, one of pidevops's own secrets",
            ),
            (
                "setup = [\"x\"]\nsecrets = [\"PIDEVOPS_DATA_DIR\"]",
                "one of pidevops's own secrets or settings",
            ),
            (
                "setup = [\"x\"]\nsecrets = [\"A\", \"A\"]",
                "secrets lists A twice",
            ),
            (
                "check = [\"cargo\", \"test\"]\nsecrets = [\"NPM_TOKEN\"]",
                "passed only to setup, before_run and after_run, and none of them is set",
            ),
            (
                "setup = [\"x\"]\nhook_timeout_s = 0",
                "hook_timeout_s must be a positive number of seconds",
            ),
            (
                "check = [\"x\"]\ncheck_timeout_s = -1",
                "check_timeout_s must be a positive number",
            ),
            ("hook_timeout_s = 5", "sets a timeout but no setup"),
            ("setups = [\"x\"]", "did you mean setup?"),
        ] {
            let error = parse(&format!("[repos.\"acme/web\"]\n{text}")).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
